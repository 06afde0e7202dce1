// Test-only stand-in for ExecuTorch's batching types, written for schedcli's tests:
// the declarations schedcli's recorder reads, nothing else. CI builds against this;
// a real build includes ExecuTorch's own header from the same path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace executorch {
namespace extension {
namespace llm {
namespace batching {

using Token = std::uint64_t;
using SessionId = std::int64_t;
using Position = std::int32_t;
using TaskId = std::int64_t;

struct SamplingParams {
  float temperature = 0.0f;
  float top_p = 1.0f;
  std::int32_t top_k = 0;
};

struct Input {
  SessionId sid = 0;
  bool produce_output = false;
  std::size_t offset = 0;
  std::size_t size = 0;
  std::vector<Token> tokens;
  Position position = 0;
  SamplingParams sampling_params;
};

struct Task {
  TaskId tid = 0;
  bool cancelled = false;
  Input input;
  bool is_decode = false;
};

}  // namespace batching
}  // namespace llm
}  // namespace extension
}  // namespace executorch
