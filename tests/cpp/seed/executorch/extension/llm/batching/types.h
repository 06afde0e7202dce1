// schedcli's stand-in for ExecuTorch's extension/llm/batching/types.h as of
// pytorch/executorch 4f95b1ffba54c07b9b1e1e63b5a1e3844d10430e (the seed shape), written
// from reading it: the declarations the recorder touches, with their real types and
// members (TaskId is 32-bit; tokens are held through a shared_ptr to the whole backing
// vector, and a slice is tokens[offset : offset + size] at position + offset).
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
using TaskId = std::int32_t;

struct SamplingParams {
  float temperature = 0.0f;
  float top_p = 1.0f;
  std::int32_t top_k = 0;
};

struct Input {
  SessionId sid;
  bool produce_output;
  size_t offset;
  size_t size;
  std::shared_ptr<const std::vector<Token>> tokens;
  Position position;
  SamplingParams sampling_params;
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
