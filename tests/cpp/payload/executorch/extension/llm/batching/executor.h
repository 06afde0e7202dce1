// schedcli's stand-in for ExecuTorch's extension/llm/batching/executor.h of the payload
// shape (pytorch/executorch 152bb8a788a2ac1ace8caaa9d8c2d7369dfb2966), written from reading
// it and the runner.cpp beside it: the seam the runner runs batches through, called only on
// its engine thread. initialize() (default: ready), accepts() of a PreparedInput (default:
// none) and clone() (default: unsupported) are virtual with defaults; the four others are
// what an executor must give.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <executorch/extension/llm/batching/types.h>
#include <executorch/runtime/platform/compiler.h>  // ET_EXPERIMENTAL

namespace executorch {
namespace extension {
namespace llm {
namespace batching {

class ET_EXPERIMENTAL Executor {
 public:
  virtual ~Executor() = default;
  virtual bool initialize() { return true; }
  virtual std::optional<SessionId> open_session() = 0;
  virtual void close_session(SessionId session) = 0;
  virtual std::optional<SessionId> clone(SessionId /*source*/, Position /*upto*/) {
    return std::nullopt;
  }
  virtual bool accepts(const PreparedInput& /*input*/) const { return false; }
  virtual void set_sampling(SessionId session, const SamplingParams& params,
                            std::optional<std::uint64_t> seed) = 0;
  // outputs[i] answers inputs[i]: nullopt exactly where produce_output is unset.
  virtual bool execute(const BatchInput& batch, BatchOutput& out) = 0;
};

}  // namespace batching
}  // namespace llm
}  // namespace extension
}  // namespace executorch
