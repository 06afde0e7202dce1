// schedcli's stand-in for ExecuTorch's extension/llm/batching/types.h as of
// pytorch/executorch 913315313a0c1e76a0b0cd0840f5f9b98732190c (the 64-bit TaskId shape), written
// from reading it: TaskId widened to 64 bits, SamplingParams gone from Input; tokens still
// a shared_ptr to the whole backing vector, a slice tokens[offset : offset + size] at
// position + offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace executorch {
namespace extension {
namespace llm {
namespace batching {

using Token = std::int64_t;
using SessionId = std::int64_t;
using Position = std::int32_t;
using TaskId = std::int64_t;

struct Input {
  SessionId sid;
  bool produce_output;
  size_t offset;
  size_t size;
  std::shared_ptr<const std::vector<Token>> tokens;
  Position position;
};

struct Task {
  TaskId tid;
  bool cancelled;
  Input input;
  bool is_decode;
};

}  // namespace batching
}  // namespace llm
}  // namespace extension
}  // namespace executorch
