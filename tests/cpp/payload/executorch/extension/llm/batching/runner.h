// schedcli's stand-in for ExecuTorch's extension/llm/batching/runner.h of the payload shape
// (pytorch/executorch 152bb8a788a2ac1ace8caaa9d8c2d7369dfb2966), written from reading it:
// the declarations as they are there. One engine thread owns the executor and every
// generation; callers reach it through a command inbox (open a session, start a
// generation on it, close it) and a cancellation flag. A generation's prompt is split at
// the scheduler's max_prefill_chunk_size(); each output-producing step's token is handed to
// the generation's callback and fed back as a one-token decode until max_new_tokens; its
// end cancels what it still has queued. Callbacks and on_settled run on the engine thread.
// runner.cpp beside it is schedcli's own, not ExecuTorch's.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <executorch/extension/llm/batching/executor.h>
#include <executorch/extension/llm/batching/metrics.h>
#include <executorch/extension/llm/batching/scheduler.h>
#include <executorch/extension/llm/batching/types.h>
#include <executorch/runtime/platform/compiler.h>  // ET_EXPERIMENTAL

namespace executorch {
namespace extension {
namespace llm {
namespace batching {

enum class ET_EXPERIMENTAL FinishReason { StopToken, NewTokenLimit, Cancelled, Failed };

// One streaming or terminal update: finish_reason is set on the last one only.
struct ET_EXPERIMENTAL GenerationUpdate {
  std::vector<Token> tokens;
  std::optional<FinishReason> finish_reason;
  std::string error_message;
};

using GenerationCallback = std::function<void(const GenerationUpdate&)>;

using GenerationInput ET_EXPERIMENTAL = std::variant<std::vector<Token>, PreparedInputPtr>;

struct ET_EXPERIMENTAL GenConfig {
  std::int32_t max_new_tokens = 256;
  SamplingParams sampling;
  std::vector<Token> stop_tokens;
  std::optional<std::uint64_t> seed;
};

struct GenerationHandleState;
struct SessionState;

class RunnerImpl;

class ET_EXPERIMENTAL GenerationHandle {
 public:
  GenerationHandle() = default;
  GenerationHandle(const GenerationHandle&) = default;
  GenerationHandle& operator=(const GenerationHandle&) = default;
  GenerationHandle(GenerationHandle&&) noexcept = default;
  GenerationHandle& operator=(GenerationHandle&&) noexcept = default;

  bool valid() const noexcept;
  void cancel() const;
  bool done() const;
  void wait() const;
  std::optional<FinishReason> finish_reason() const;
  std::string error_message() const;
  GenerationMetrics metrics() const;

 private:
  friend class RunnerImpl;
  friend class Session;
  explicit GenerationHandle(std::shared_ptr<GenerationHandleState> state)
      : state_(std::move(state)) {}

  std::shared_ptr<GenerationHandleState> state_;
};

// Sole owner of one open executor session; destroying it asks for its close.
class ET_EXPERIMENTAL Session {
 public:
  Session();
  ~Session();

  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  bool valid() const noexcept;
  Position position() const noexcept;
  std::future<std::optional<Session>> clone_async(Position upto) const;
  GenerationHandle generate_async(GenerationInput delta, GenConfig config,
                                  GenerationCallback on_update,
                                  std::function<void()> on_settled = {}) const;

 private:
  friend class RunnerImpl;
  friend class PrefixCache;
  explicit Session(std::unique_ptr<SessionState> state);

  std::function<std::future<std::optional<Session>>()> make_clone_request(Position upto) const;

  std::unique_ptr<SessionState> state_;
};

enum class ET_EXPERIMENTAL InitializationState { Pending, Ready, Failed };

class ET_EXPERIMENTAL Runner {
 public:
  // Takes the scheduler (which also gives the prefill chunk size); the executor is
  // borrowed and must outlive shutdown.
  Runner(Executor& executor, std::unique_ptr<Scheduler> scheduler);
  ~Runner();

  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  InitializationState initialization_state() const noexcept;
  std::future<std::optional<Session>> open_session_async();
  void shutdown();
  EngineMetrics metrics() const;

 private:
  std::shared_ptr<RunnerImpl> impl_;
};

}  // namespace batching
}  // namespace llm
}  // namespace extension
}  // namespace executorch
