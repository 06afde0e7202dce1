// schedcli's stand-in for ExecuTorch's extension/llm/batching/scheduler.h as of
// pytorch/executorch 152bb8a788a2ac1ace8caaa9d8c2d7369dfb2966 (the payload shape), written
// from reading it: unchanged there from the later shape (the five calls, and
// max_prefill_chunk_size() on the interface, all ET_EXPERIMENTAL); the payload shape's
// changes are in types.h.
#pragma once

#include <cstddef>
#include <vector>

#include <executorch/extension/llm/batching/types.h>
#include <executorch/runtime/platform/compiler.h>  // ET_EXPERIMENTAL

namespace executorch {
namespace extension {
namespace llm {
namespace batching {

class ET_EXPERIMENTAL Scheduler {
 public:
  virtual ~Scheduler() = default;
  virtual bool submit(std::vector<Task> tasks) = 0;
  virtual bool has_work() const = 0;
  virtual std::vector<Task> get_work() = 0;
  virtual std::vector<Task> cancel(SessionId sid) = 0;
  virtual std::vector<Task> clear() = 0;
  virtual std::size_t max_prefill_chunk_size() const = 0;
};

}  // namespace batching
}  // namespace llm
}  // namespace extension
}  // namespace executorch
