// schedcli's stand-in for ExecuTorch's extension/llm/batching/types.h as of
// pytorch/executorch 152bb8a788a2ac1ace8caaa9d8c2d7369dfb2966 (the payload shape), written
// from reading it: every declaration ET_EXPERIMENTAL; Token unsigned 64-bit; an Input's
// work is `payload`, either token ids (a shared_ptr to the whole backing vector) or an
// opaque PreparedInput (kind() and size(), its positions); the slice is
// payload[offset : offset + size] at position + offset. SamplingParams is no longer on
// Input; Output holds the tokens an input produced.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <variant>
#include <vector>

#include <executorch/runtime/platform/compiler.h>  // ET_EXPERIMENTAL

namespace executorch {
namespace extension {
namespace llm {
namespace batching {

using Token ET_EXPERIMENTAL = std::uint64_t;
using SessionId ET_EXPERIMENTAL = std::int64_t;
using Position ET_EXPERIMENTAL = std::int32_t;
using TaskId ET_EXPERIMENTAL = std::int64_t;

class ET_EXPERIMENTAL PreparedInput {
 public:
  virtual ~PreparedInput() = default;
  virtual const void* kind() const = 0;
  virtual std::size_t size() const = 0;
};
using PreparedInputPtr ET_EXPERIMENTAL = std::shared_ptr<const PreparedInput>;
using TokenInputPtr ET_EXPERIMENTAL = std::shared_ptr<const std::vector<Token>>;
using InputPayload ET_EXPERIMENTAL = std::variant<TokenInputPtr, PreparedInputPtr>;

struct ET_EXPERIMENTAL SamplingParams {
  float temperature = 0.0f;
  float top_p = 1.0f;
  std::int32_t top_k = 0;
};

struct ET_EXPERIMENTAL Input {
  SessionId sid;
  bool produce_output;
  size_t offset;
  size_t size;
  InputPayload payload;
  Position position;
};

struct ET_EXPERIMENTAL Output {
  SessionId sid;
  std::vector<Token> tokens;
};

struct ET_EXPERIMENTAL Task {
  TaskId tid;
  bool cancelled;
  Input input;
  bool is_decode;
};

struct ET_EXPERIMENTAL BatchInput {
  std::vector<Input> inputs;
  size_t size() const {
    size_t sz = 0;
    for (const auto& i : inputs) sz += i.size;
    return sz;
  }
};

ET_EXPERIMENTAL inline BatchInput to_batch_input(std::vector<Task>& tasks) {
  BatchInput batch;
  batch.inputs.reserve(tasks.size());
  for (Task& t : tasks) batch.inputs.push_back(std::move(t.input));
  return batch;
}

struct ET_EXPERIMENTAL BatchOutput {
  std::vector<std::optional<Output>> outputs;
};

}  // namespace batching
}  // namespace llm
}  // namespace extension
}  // namespace executorch
