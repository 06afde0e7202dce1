// schedcli's stand-in for ExecuTorch's extension/llm/batching/scheduler.h as of
// pytorch/executorch 19cb4ed1cfb0b19149eb385f04176efbdbfddebf (the later shape), written
// from reading it: the five calls, and max_prefill_chunk_size() on the interface; marked
// ET_EXPERIMENTAL as upstream marks it later on.
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
