// schedcli's own runner.cpp for the stand-in checkout (not ExecuTorch's): runner.h's
// declarations implemented simply, so that CI builds and runs `simulate -p cxx-runner:...`
// without an ExecuTorch checkout. What it keeps of the real runner's behaviour, which
// schedcli's driver relies on:
// - one engine thread; each pass runs every queued command (in the order posted), ends the
//   generations that were cancelled or whose session closed, then asks for one batch;
//   with none it waits (20 ms at most) for a command or work;
// - a prompt is split at the scheduler's max_prefill_chunk_size(), its last chunk producing
//   output; each token is handed to the callback and fed back as a one-token decode at the
//   session's position until max_new_tokens (or a stop token);
// - a generation's end cancels the session's queued tasks; a session's close cancels them
//   again; shutdown clears the scheduler;
// - executor calls, callbacks and on_settled run on the engine thread with no lock held.
// tests/runtimes/test_cxx_runner.py checks that it makes the scheduler traffic ExecuTorch's
// own runner makes, where a checkout is given.
#include <executorch/extension/llm/batching/runner.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif

namespace executorch {
namespace extension {
namespace llm {
namespace batching {

struct GenerationHandleState {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  std::optional<FinishReason> reason;
  std::string error_message;
  GenerationMetrics metrics;
  std::function<void()> on_settled;
  std::atomic<bool> cancelled{false};
};

struct SessionStatus {
  std::atomic<bool> open{true};
  std::atomic<Position> position{0};
};

namespace {

struct Generation {
  std::int32_t left = 0;
  std::vector<Token> stop_tokens;
  GenerationCallback on_update;
  std::shared_ptr<GenerationHandleState> state;
  GenerationMetrics m;
};

// The generation's last update, then its handle's end, then on_settled: exactly once (a
// Generation is moved out of its session before it is settled).
void settle(Generation& g, FinishReason reason, std::vector<Token> tokens, std::string error) {
  g.m.t_end = MetricsClock::now();
  if (g.on_update) {
    g.on_update(GenerationUpdate{std::move(tokens), reason, error});
  }
  std::function<void()> settled;
  {
    std::lock_guard<std::mutex> lock(g.state->mutex);
    g.state->reason = reason;
    g.state->error_message = std::move(error);
    g.state->metrics = g.m;
    g.state->done = true;
    settled.swap(g.state->on_settled);
  }
  g.state->cv.notify_all();
  if (settled) {
    settled();
  }
}

std::size_t payload_size(const InputPayload& payload) {
  if (const auto* tokens = std::get_if<TokenInputPtr>(&payload)) {
    return *tokens ? (*tokens)->size() : 0;
  }
  const auto& prepared = std::get<PreparedInputPtr>(payload);
  return prepared ? prepared->size() : 0;
}

}  // namespace

class RunnerImpl : public std::enable_shared_from_this<RunnerImpl> {
 public:
  RunnerImpl(Executor& executor, std::unique_ptr<Scheduler> scheduler)
      : executor_(executor), scheduler_(std::move(scheduler)) {}

  ~RunnerImpl() {
    shutdown();
    if (engine_.joinable()) {
      engine_.detach();  // the last owner let go on the engine thread itself
    }
  }

  void start() {
    engine_ = std::thread([this] { loop_(); });
    engine_id_ = engine_.get_id();
  }

  void shutdown() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (std::this_thread::get_id() == engine_id_) {
      return;
    }
    std::lock_guard<std::mutex> lock(join_mutex_);
    if (engine_.joinable()) {
      engine_.join();
    }
  }

  InitializationState initialization_state() const noexcept { return init_.load(); }
  EngineMetrics metrics() const { return metrics_; }

  std::future<std::optional<Session>> open_session_async() {
    auto promise = std::make_shared<std::promise<std::optional<Session>>>();
    auto future = promise->get_future();
    if (!post_([this, promise] { open_(*promise); })) {
      promise->set_value(std::nullopt);
    }
    return future;
  }

  void request_close(SessionId sid) noexcept {
    post_([this, sid] { retire_(sid); });
  }

  GenerationHandle generate_async(SessionId sid, GenerationInput delta, GenConfig config,
                                  GenerationCallback on_update, std::function<void()> on_settled) {
    auto state = std::make_shared<GenerationHandleState>();
    state->on_settled = std::move(on_settled);
    Generation g;
    g.left = config.max_new_tokens;
    g.stop_tokens = std::move(config.stop_tokens);
    g.on_update = std::move(on_update);
    g.state = state;
    g.m.sid = sid;
    g.m.t_submit = MetricsClock::now();
    InputPayload payload;
    if (auto* tokens = std::get_if<std::vector<Token>>(&delta)) {
      payload = std::make_shared<const std::vector<Token>>(std::move(*tokens));
    } else {
      payload = std::get<PreparedInputPtr>(delta);
    }
    auto start = [this, sid, payload, g, sampling = config.sampling, seed = config.seed]() mutable {
      start_(sid, std::move(payload), std::move(g), sampling, seed);
    };
    if (!post_(start)) {
      settle(g, FinishReason::Cancelled, {}, {});
    }
    return GenerationHandle(state);
  }

 private:
  struct Record {
    std::shared_ptr<SessionStatus> status;
    std::optional<Token> pending;  // the last token handed out, not yet fed back
    std::optional<Generation> active;
  };

  bool running_() const { return !stopping_.load(); }

  bool post_(std::function<void()> command) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) {
        return false;
      }
      inbox_.push_back(std::move(command));
    }
    cv_.notify_all();
    return true;
  }

  void loop_() {
    const bool ready = executor_.initialize();
    init_.store(ready ? InitializationState::Ready : InitializationState::Failed);
    if (!ready) {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    while (running_()) {
      run_commands_();
      reap_();
      if (step_()) {
        continue;
      }
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait_for(lock, std::chrono::milliseconds(20),
                   [this] { return stopping_ || !inbox_.empty() || scheduler_->has_work(); });
    }
    run_commands_();
    scheduler_->clear();
    std::vector<SessionId> open;
    for (const auto& entry : sessions_) {
      open.push_back(entry.first);
    }
    for (SessionId sid : open) {
      retire_(sid);
    }
  }

  void run_commands_() {
    std::vector<std::function<void()>> commands;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      commands.swap(inbox_);
    }
    for (auto& command : commands) {
      command();
    }
  }

  void open_(std::promise<std::optional<Session>>& promise) {
    const std::optional<SessionId> sid = running_() ? executor_.open_session() : std::nullopt;
    if (!sid || sessions_.count(*sid) != 0) {
      metrics_.sessions_refused += running_() ? 1 : 0;
      promise.set_value(std::nullopt);
      return;
    }
    auto status = std::make_shared<SessionStatus>();
    sessions_.emplace(*sid, Record{status, std::nullopt, std::nullopt});
    promise.set_value(Session(std::make_unique<SessionState>(shared_from_this(), *sid, status)));
  }

  // The session is gone: its queued tasks cancelled, its generation ended as Cancelled.
  void retire_(SessionId sid) {
    auto it = sessions_.find(sid);
    if (it == sessions_.end()) {
      return;
    }
    it->second.status->open.store(false);
    std::optional<Generation> active = std::move(it->second.active);
    sessions_.erase(it);
    (void)scheduler_->cancel(sid);
    if (active) {
      end_(*active, FinishReason::Cancelled, {}, {});
    }
    executor_.close_session(sid);
  }

  void reap_() {
    std::vector<SessionId> doomed;
    for (const auto& entry : sessions_) {
      const Record& r = entry.second;
      if (r.active && (r.active->state->cancelled.load() || !r.status->open.load())) {
        doomed.push_back(entry.first);
      }
    }
    for (SessionId sid : doomed) {
      finish_(sid, FinishReason::Cancelled, {}, {});
    }
  }

  void start_(SessionId sid, InputPayload payload, Generation g, SamplingParams sampling,
              std::optional<std::uint64_t> seed) {
    ++metrics_.generations_started;
    if (!running_() || g.state->cancelled.load()) {
      return end_(g, FinishReason::Cancelled, {}, {});
    }
    auto it = sessions_.find(sid);
    if (it == sessions_.end()) {
      return end_(g, FinishReason::Failed, {}, "session is not open");
    }
    Record& r = it->second;
    std::size_t size = payload_size(payload);
    const char* refused = nullptr;
    const auto* prepared = std::get_if<PreparedInputPtr>(&payload);
    if (g.left <= 0) {
      refused = "max_new_tokens must be greater than zero";
    } else if (size == 0) {
      refused = "generation delta must not be empty";
    } else if (r.active) {
      refused = "session already has an active generation";
    } else if (prepared != nullptr && !executor_.accepts(**prepared)) {
      refused = "executor does not accept prepared input";
    }
    if (refused != nullptr) {
      return end_(g, FinishReason::Failed, {}, refused);
    }
    Position at = r.status->position.load();
    std::vector<Task> tasks;
    if (r.pending) {  // the last token handed out goes first
      if (auto* tokens = std::get_if<TokenInputPtr>(&payload)) {
        auto carried = std::make_shared<std::vector<Token>>(1, *r.pending);
        carried->insert(carried->end(), (*tokens)->begin(), (*tokens)->end());
        payload = TokenInputPtr(std::move(carried));
        ++size;
      } else {
        tasks = tasks_(sid, std::make_shared<const std::vector<Token>>(1, *r.pending), 1, at++,
                       false, false);
      }
    }
    executor_.set_sampling(sid, sampling, seed);
    g.m.n_prompt_tokens = static_cast<std::int64_t>(size);
    r.active = std::move(g);
    auto prompt = tasks_(sid, std::move(payload), size, at, false, true);
    tasks.insert(tasks.end(), std::make_move_iterator(prompt.begin()),
                 std::make_move_iterator(prompt.end()));
    submit_(sid, std::move(tasks));
  }

  std::vector<Task> tasks_(SessionId sid, const InputPayload& payload, std::size_t size,
                           Position at, bool decode, bool produce) {
    const std::size_t chunk = std::max<std::size_t>(
        1, std::min(size, scheduler_->max_prefill_chunk_size()));
    std::vector<Task> tasks;
    for (std::size_t i = 0; i < size; i += chunk) {
      const std::size_t n = std::min(chunk, size - i);
      Task t;
      t.tid = next_tid_++;
      t.cancelled = false;
      t.is_decode = decode;
      t.input.sid = sid;
      t.input.produce_output = produce && i + n == size;
      t.input.offset = i;
      t.input.size = n;
      t.input.payload = payload;
      t.input.position = at;
      tasks.push_back(std::move(t));
    }
    return tasks;
  }

  void submit_(SessionId sid, std::vector<Task> tasks) {
    bool accepted = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      accepted = !stopping_ && scheduler_->submit(std::move(tasks));
    }
    if (!accepted) {
      finish_(sid, running_() ? FinishReason::Failed : FinishReason::Cancelled, {},
              running_() ? "scheduler rejected generation tasks" : "");
    }
  }

  // The session's generation ends: detached, its queued tasks cancelled, then settled.
  void finish_(SessionId sid, FinishReason reason, std::vector<Token> tokens,
               std::string error) {
    auto it = sessions_.find(sid);
    if (it == sessions_.end() || !it->second.active) {
      return;
    }
    Generation g = std::move(*it->second.active);
    it->second.active.reset();
    (void)scheduler_->cancel(sid);
    end_(g, reason, std::move(tokens), std::move(error));
  }

  void end_(Generation& g, FinishReason reason, std::vector<Token> tokens, std::string error) {
    ++metrics_.generations_completed;
    metrics_.total_generated_tokens += g.m.n_generated_tokens;
    settle(g, reason, std::move(tokens), std::move(error));
  }

  bool step_() {
    std::vector<Task> batch;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) {
        return false;
      }
      batch = scheduler_->get_work();
    }
    if (batch.empty()) {
      return false;
    }
    ++metrics_.steps;
    BatchInput in = to_batch_input(batch);
    BatchOutput out;
    const bool ok = executor_.execute(in, out);
    if (!running_()) {
      return true;
    }
    if (!ok || out.outputs.size() != in.inputs.size()) {
      ++metrics_.steps_failed;
      for (const Input& input : in.inputs) {
        finish_(input.sid, FinishReason::Failed, {}, "executor failed to execute the batch");
      }
      return true;
    }
    for (const Input& input : in.inputs) {  // every slice is in the session now
      auto it = sessions_.find(input.sid);
      if (it != sessions_.end()) {
        it->second.status->position.fetch_add(static_cast<Position>(input.size));
        it->second.pending.reset();
      }
    }
    for (std::size_t i = 0; i < in.inputs.size() && running_(); ++i) {
      output_(in.inputs[i], out.outputs[i]);
    }
    return true;
  }

  void output_(const Input& input, std::optional<Output>& output) {
    auto it = sessions_.find(input.sid);
    if (it == sessions_.end() || !it->second.active) {
      return;
    }
    Record& r = it->second;
    if (input.produce_output != output.has_value() ||
        (output && (output->sid != input.sid || output->tokens.empty()))) {
      return finish_(input.sid, FinishReason::Failed, {}, "executor returned an invalid output");
    }
    if (!r.status->open.load() || r.active->state->cancelled.load()) {
      return finish_(input.sid, FinishReason::Cancelled, {}, {});
    }
    if (!input.produce_output) {
      return;
    }
    Generation& g = *r.active;
    std::vector<Token> emitted;
    bool stop = false;
    for (Token token : output->tokens) {
      emitted.push_back(token);
      --g.left;
      stop = std::find(g.stop_tokens.begin(), g.stop_tokens.end(), token) != g.stop_tokens.end();
      if (stop || g.left <= 0) {
        break;
      }
    }
    g.m.n_generated_tokens += static_cast<std::int64_t>(emitted.size());
    // All but the last output token are in the session; the last goes in when fed back.
    const std::size_t kept = std::min(emitted.size(), output->tokens.size() - 1);
    r.status->position.fetch_add(static_cast<Position>(kept));
    r.pending = emitted.size() == output->tokens.size() ? std::optional<Token>(emitted.back())
                                                        : std::nullopt;
    if (stop || g.left <= 0) {
      return finish_(input.sid, stop ? FinishReason::StopToken : FinishReason::NewTokenLimit,
                     std::move(emitted), {});
    }
    const Token next = emitted.back();
    const Position at = r.status->position.load();
    if (g.on_update) {
      g.on_update(GenerationUpdate{std::move(emitted), std::nullopt, {}});
    }
    auto again = sessions_.find(input.sid);  // the callback may have changed anything
    if (!running_() || again == sessions_.end() || !again->second.active) {
      return;
    }
    submit_(input.sid,
            tasks_(input.sid, std::make_shared<const std::vector<Token>>(1, next), 1, at, true,
                   true));
  }

  Executor& executor_;
  std::unique_ptr<Scheduler> scheduler_;
  std::mutex mutex_;  // the inbox, the stop, and the scheduler's submit and get_work
  std::condition_variable cv_;
  std::vector<std::function<void()>> inbox_;
  std::atomic<bool> stopping_{false};
  std::atomic<InitializationState> init_{InitializationState::Pending};
  std::mutex join_mutex_;
  std::thread engine_;
  std::thread::id engine_id_;
  // Engine thread only.
  std::unordered_map<SessionId, Record> sessions_;
  TaskId next_tid_ = 1;
  EngineMetrics metrics_;
};

struct SessionState {
  SessionState(std::shared_ptr<RunnerImpl> runner, SessionId id,
               std::shared_ptr<SessionStatus> state)
      : impl(std::move(runner)), sid(id), status(std::move(state)) {}
  ~SessionState() {
    status->open.store(false);
    impl->request_close(sid);
  }
  SessionState(const SessionState&) = delete;
  SessionState& operator=(const SessionState&) = delete;

  std::shared_ptr<RunnerImpl> impl;
  SessionId sid;
  std::shared_ptr<SessionStatus> status;
};

// --- GenerationHandle ---

bool GenerationHandle::valid() const noexcept { return state_ != nullptr; }

void GenerationHandle::cancel() const {
  if (state_) {
    state_->cancelled.store(true);
  }
}

bool GenerationHandle::done() const {
  if (!state_) {
    return false;
  }
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done;
}

void GenerationHandle::wait() const {
  if (!state_) {
    return;
  }
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->cv.wait(lock, [this] { return state_->done; });
}

std::optional<FinishReason> GenerationHandle::finish_reason() const {
  if (!state_) {
    return std::nullopt;
  }
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done ? state_->reason : std::nullopt;
}

std::string GenerationHandle::error_message() const {
  if (!state_) {
    return {};
  }
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->error_message;
}

GenerationMetrics GenerationHandle::metrics() const {
  if (!state_) {
    return {};
  }
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->metrics;
}

// --- Session ---

Session::Session() = default;
Session::Session(std::unique_ptr<SessionState> state) : state_(std::move(state)) {}
Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

bool Session::valid() const noexcept { return state_ && state_->status->open.load(); }

Position Session::position() const noexcept {
  return state_ ? state_->status->position.load() : 0;
}

std::future<std::optional<Session>> Session::clone_async(Position) const {
  std::promise<std::optional<Session>> none;  // cloning is not supported here
  none.set_value(std::nullopt);
  return none.get_future();
}

std::function<std::future<std::optional<Session>>()> Session::make_clone_request(
    Position upto) const {
  return [this, upto] { return clone_async(upto); };
}

GenerationHandle Session::generate_async(GenerationInput delta, GenConfig config,
                                         GenerationCallback on_update,
                                         std::function<void()> on_settled) const {
  if (!state_ || !state_->status->open.load()) {
    Generation g;
    g.on_update = std::move(on_update);
    g.state = std::make_shared<GenerationHandleState>();
    g.state->on_settled = std::move(on_settled);
    settle(g, state_ ? FinishReason::Cancelled : FinishReason::Failed, {},
           state_ ? "" : "session is not initialized");
    return GenerationHandle(g.state);
  }
  return state_->impl->generate_async(state_->sid, std::move(delta), std::move(config),
                                      std::move(on_update), std::move(on_settled));
}

// --- Runner ---

Runner::Runner(Executor& executor, std::unique_ptr<Scheduler> scheduler)
    : impl_(std::make_shared<RunnerImpl>(executor, std::move(scheduler))) {
  impl_->start();
}

Runner::~Runner() { shutdown(); }

InitializationState Runner::initialization_state() const noexcept {
  return impl_->initialization_state();
}

std::future<std::optional<Session>> Runner::open_session_async() {
  return impl_->open_session_async();
}

void Runner::shutdown() { impl_->shutdown(); }

EngineMetrics Runner::metrics() const { return impl_->metrics(); }

}  // namespace batching
}  // namespace llm
}  // namespace extension
}  // namespace executorch

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic pop
#endif
