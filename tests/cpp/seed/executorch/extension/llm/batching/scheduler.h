// schedcli's stand-in for ExecuTorch's extension/llm/batching/scheduler.h as of
// pytorch/executorch 4f95b1ffba54c07b9b1e1e63b5a1e3844d10430e (the seed shape), written
// from reading it: the interface is the five calls, nothing more.
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
