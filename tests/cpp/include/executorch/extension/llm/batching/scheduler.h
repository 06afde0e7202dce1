// Test-only stand-in for ExecuTorch's Scheduler interface (declarations only), written
// for schedcli's tests so CI can build the recorder without ExecuTorch.
#pragma once

#include <cstddef>
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
  virtual std::size_t max_prefill_chunk_size() const = 0;
};

}  // namespace batching
}  // namespace llm
}  // namespace extension
}  // namespace executorch
