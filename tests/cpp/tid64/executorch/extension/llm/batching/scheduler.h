// schedcli's stand-in for ExecuTorch's extension/llm/batching/scheduler.h as of
// pytorch/executorch 913315313a0c1e76a0b0cd0840f5f9b98732190c (the 64-bit TaskId shape),
// written from reading it: still the seed's five calls, no max_prefill_chunk_size(), no
// ET_EXPERIMENTAL; what changed is in types.h (TaskId 64-bit, no SamplingParams on Input).
#pragma once

#include <vector>

#include <executorch/extension/llm/batching/types.h>

namespace executorch {
namespace extension {
namespace llm {
namespace batching {

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  virtual bool submit(std::vector<Task> tasks) = 0;
  virtual bool has_work() const = 0;
  virtual std::vector<Task> get_work() = 0;
  virtual std::vector<Task> cancel(SessionId sid) = 0;
  virtual std::vector<Task> clear() = 0;
};

}  // namespace batching
}  // namespace llm
}  // namespace extension
}  // namespace executorch
