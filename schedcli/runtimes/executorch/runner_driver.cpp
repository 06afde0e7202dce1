// schedcli's driver of ExecuTorch's batching Runner (`schedcli simulate W -p
// cxx-runner:NAME`, docs/cxx.md "The runner in the loop"). runner.py puts the scheduler's
// header and a factory function `schedcli_factory` before this text and builds it with the
// checkout's runner.cpp and metrics.cpp into one program, run as a child process.
//
// What runs: ExecuTorch's own Runner, its engine thread and all, with
// - a fake Executor of ours: one token per output-producing input, computed from the
//   input's position (deterministic); every step costs simulated time by the cost model;
// - its Scheduler: the factory's, wrapped by schedcli's recorder (the trace), wrapped by a
//   Gate of ours that forwards every call and answers two get_work polls itself (below);
// - the workload's requests: each arrival opens a session and starts one generation on it
//   (its prompt; max_new_tokens its output), is cancelled when its cancel_after runs out,
//   and its session is closed when its generation ends.
//
// Determinism (invariant): the main thread only starts the runner, asks for one session
// (the kick) and waits; every other call into the runner is made on its engine thread, at
// points its loop reaches in a fixed order. The engine runs commands (in the order they
// were posted), ends cancelled generations, then polls get_work. At the end of each step
// (inside Executor::execute) the arrivals due are handed over: a session is asked for
// each, then one more "marker" open whose Executor::open_session call comes after theirs;
// there the generations are started; a second marker, posted after those starts, flags the
// cancels due. The one poll between the marker and the starts is answered empty by the
// Gate (the arrivals land before the next batch); so is a poll of an empty scheduler,
// which the idle engine makes as often as the wall clock lets it. When no generation is
// live the clock jumps to the next arrival, handed over from the last one's on_settled
// (the first from the kick). So the scheduler sees the same calls in the same order on
// every run, whatever the threads' timing.
//
// Input (argv[1]), one item a line: a format line, the policy name and the params JSON for
// the trace header, the factory's arguments, the cost model, then the requests. Output: the
// trace (argv[2], the recorder's) and a results file (argv[3]) runner.py reads. Exit 0; 2
// bad input (said on stderr); 5 the scheduler can make no progress (said on stderr).

#include <executorch/extension/llm/batching/scheduler.h>
#include <executorch/extension/llm/batching/types.h>
#include <schedcli/shape.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#if defined(__linux__)
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>
#endif

// ExecuTorch marks this interface ET_EXPERIMENTAL, a [[deprecated]] attribute: our own
// uses of it must not warn (a -Werror build would fail on them).
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif

namespace schedcli_runner {

namespace et = ::executorch::extension::llm::batching;

// The shape this driver is written for (pytorch/executorch 152bb8a7): checked first (the
// interface's types before runner.h is read), so a checkout of another shape fails here,
// with the file and what it lacks.
// (schedcli/shape.h, included before the scheduler's header, tells the shapes apart.)
static_assert(::schedcli::shape::kPayload,
              "schedcli: types.h: Input has no payload (std::variant<TokenInputPtr, "
              "PreparedInputPtr>): an interface before the payload shape, whose runner "
              "schedcli does not drive");

template <class S, class = void>
struct has_chunk_limit : std::false_type {};
template <class S>
struct has_chunk_limit<S, std::void_t<decltype(std::declval<const S&>().max_prefill_chunk_size())>>
    : std::true_type {};
static_assert(has_chunk_limit<et::Scheduler>::value,
              "schedcli: scheduler.h: Scheduler has no max_prefill_chunk_size()");

}  // namespace schedcli_runner

#include <executorch/extension/llm/batching/runner.h>
#include <schedcli/recording_scheduler.h>

namespace schedcli_runner {

template <class S, class = void>
struct has_generate : std::false_type {};
template <class S>
struct has_generate<S, std::void_t<decltype(std::declval<const S&>().generate_async(
                           std::declval<et::GenerationInput>(), std::declval<et::GenConfig>(),
                           std::declval<et::GenerationCallback>(),
                           std::declval<std::function<void()>>()))>> : std::true_type {};
static_assert(has_generate<et::Session>::value,
              "schedcli: runner.h: Session has no generate_async(GenerationInput, GenConfig, "
              "GenerationCallback, std::function<void()> on_settled)");

template <class R, class = void>
struct has_open : std::false_type {};
template <class R>
struct has_open<R, std::void_t<decltype(std::declval<R&>().open_session_async().get())>>
    : std::true_type {};
static_assert(has_open<et::Runner>::value,
              "schedcli: runner.h: Runner has no open_session_async()");
static_assert(std::is_constructible<et::Runner, et::Executor&,
                                    std::unique_ptr<et::Scheduler>>::value,
              "schedcli: runner.h: Runner is not made from (Executor&, "
              "std::unique_ptr<Scheduler>)");

constexpr int kBadInput = 2;
constexpr int kStuck = 5;
// Polls of an empty scheduler while generations wait (about 20 ms apart), and empty
// batches while it says it has work, before the scheduler is taken to be stuck.
constexpr int kIdlePolls = 50;
constexpr int kEmptyBatches = 100000;

enum Reason { kPending = 0, kStop = 1, kLimit = 2, kCancelled = 3, kFailed = 4 };

struct Request {
  et::SessionId sid = 0;
  double arrival = 0;
  double cancel_at = -1;  // < 0: never
  std::int64_t prompt = 0;
  std::int64_t output = 0;
  // What happened to it, in simulated seconds and steps.
  int reason = kPending;
  std::string message;
  std::int64_t produced = 0;
  std::uint64_t arrival_step = 0;
  double first_dispatch = -1;
  std::int64_t first_dispatch_step = -1;
  double first_token = -1;
  std::int64_t first_token_step = -1;
  double last_token = -1;
  std::int64_t last_token_step = -1;
};

struct Cost {
  double a = 0, b = 0, c = 0, d = 0;
};

[[noreturn]] void fail(int code, const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  std::_Exit(code);
}

class Driver;

// Between the runner and the recorder: forwards every call, and counts what the cost model
// needs of a batch. Answers two get_work calls itself, unrecorded: one while the driver
// holds the batch for arrivals still landing, and one while the scheduler has no work (an
// idle engine's poll, as often as the wall clock lets it; the contract says it returns
// nothing).
class Gate final : public et::Scheduler {
 public:
  Gate(std::unique_ptr<schedcli::RecordingScheduler> inner, Driver& driver)
      : inner_(std::move(inner)), driver_(driver) {}

  bool submit(std::vector<et::Task> tasks) override { return inner_->submit(std::move(tasks)); }
  bool has_work() const override { return inner_->has_work(); }
  std::vector<et::Task> get_work() override;
  std::vector<et::Task> cancel(et::SessionId sid) override { return inner_->cancel(sid); }
  std::vector<et::Task> clear() override { return inner_->clear(); }
  std::size_t max_prefill_chunk_size() const override { return inner_->max_prefill_chunk_size(); }

 private:
  std::unique_ptr<et::Scheduler> inner_;
  Driver& driver_;
  int idle_polls_ = 0;
  int empty_batches_ = 0;
};

// The workload's side of the run, on the engine thread (see the invariant at the top) but
// for the few calls the main thread makes before the kick and after the end.
class Driver {
 public:
  Driver(std::vector<Request> requests, Cost cost)
      : requests_(std::move(requests)), cost_(cost), sessions_(requests_.size()),
        opening_(requests_.size()), handles_(requests_.size()) {
    for (std::size_t i = 0; i < requests_.size(); ++i) {
      by_sid_.emplace(requests_[i].sid, i);
    }
  }

  // --- the executor's calls ---

  // In the order the opens were asked for: a request's session, or a marker's turn; an
  // open nobody here asked for is the main thread's kick.
  std::optional<et::SessionId> open_session() {
    if (expected_.empty()) {
      settle_idle_();
      return std::nullopt;
    }
    const Expected next = expected_.front();
    expected_.pop_front();
    switch (next.kind) {
      case Expected::kSession:
        return requests_[next.index].sid;
      case Expected::kStarts:
        start_arrivals_(next.t);
        break;
      case Expected::kCancels:
        cancel_due_(next.t);
        break;
    }
    return std::nullopt;
  }

  bool execute(const et::BatchInput& batch, et::BatchOutput& out) {
    const double start = now_;
    std::uint64_t tokens = 0;
    for (const et::Input& in : batch.inputs) {
      tokens += in.size;
    }
    now_ = start + cost_.a + cost_.b * static_cast<double>(tokens) +
           cost_.c * static_cast<double>(decodes_) + cost_.d * static_cast<double>(context_);
    batch_tokens_ += tokens;
    decode_tokens_ += decodes_;
    prefill_tokens_ += tokens - std::min<std::uint64_t>(decodes_, tokens);
    out.outputs.clear();
    out.outputs.reserve(batch.inputs.size());
    for (const et::Input& in : batch.inputs) {
      const auto found = by_sid_.find(in.sid);
      if (found != by_sid_.end() && requests_[found->second].first_dispatch_step < 0) {
        requests_[found->second].first_dispatch = start;
        requests_[found->second].first_dispatch_step = static_cast<std::int64_t>(steps_);
      }
      if (!in.produce_output) {
        out.outputs.emplace_back(std::nullopt);
        continue;
      }
      et::Output produced;
      produced.sid = in.sid;
      const std::uint64_t end = static_cast<std::uint64_t>(in.position) + in.offset + in.size;
      produced.tokens.push_back(static_cast<et::Token>(1 + (end * 7919u) % 32000u));
      out.outputs.emplace_back(std::move(produced));
    }
    ++steps_;
    if (recorder_ != nullptr) {
      recorder_->flush();  // a run that dies keeps every call up to this step's batch
    }
    hand_over_(now_);  // what arrived or ran out while this step ran
    return true;
  }

  // --- the gate's ---

  bool take_hold() {
    const bool held = hold_;
    hold_ = false;
    return held;
  }

  void batch_taken(const std::vector<et::Task>& batch) {
    decodes_ = 0;
    context_ = 0;
    for (const et::Task& t : batch) {
      decodes_ += t.is_decode ? 1 : 0;
      context_ += static_cast<std::uint64_t>(t.input.position) + t.input.offset + t.input.size;
    }
  }

  long live() const { return live_; }

  [[noreturn]] void stuck(const std::string& message) {
    if (recorder_ != nullptr) {
      recorder_->flush();
    }
    fail(kStuck, message + " (after " + std::to_string(steps_) + " steps)");
  }

  // --- the main thread's, before the kick and after the end ---

  void attach(et::Runner* runner, schedcli::RecordingScheduler* recorder) {
    runner_ = runner;
    recorder_ = recorder;
  }

  void wait_done() {
    std::unique_lock<std::mutex> lock(done_mutex_);
    done_cv_.wait(lock, [this] { return done_; });
  }

  bool write_results(const char* path, std::size_t chunk) const {
    std::FILE* f = std::fopen(path, "wb");
    if (f == nullptr) {
      return false;
    }
    std::fprintf(f, "schedcli-runner-results 1\nchunk %zu\n", chunk);
    std::fprintf(f, "totals %llu %llu %llu %llu %.17g\n",
                 static_cast<unsigned long long>(steps_),
                 static_cast<unsigned long long>(batch_tokens_),
                 static_cast<unsigned long long>(prefill_tokens_),
                 static_cast<unsigned long long>(decode_tokens_), now_);
    for (std::size_t i = 0; i < requests_.size(); ++i) {
      const Request& r = requests_[i];
      std::fprintf(f, "r %zu %d %lld %llu %.17g %lld %.17g %lld %.17g %lld\n", i, r.reason,
                   static_cast<long long>(r.produced),
                   static_cast<unsigned long long>(r.arrival_step), r.first_dispatch,
                   static_cast<long long>(r.first_dispatch_step), r.first_token,
                   static_cast<long long>(r.first_token_step), r.last_token,
                   static_cast<long long>(r.last_token_step));
      if (!r.message.empty()) {
        std::string line = r.message;
        std::replace(line.begin(), line.end(), '\n', ' ');
        std::fprintf(f, "m %zu %s\n", i, line.c_str());
      }
    }
    return std::fclose(f) == 0;
  }

 private:
  struct Expected {
    enum Kind { kSession, kStarts, kCancels } kind;
    std::size_t index;
    double t;
  };

  // An open whose Executor::open_session call is `what`'s turn (see open_session).
  void expect_(Expected what) {
    expected_.push_back(what);
    if (what.kind == Expected::kSession) {
      opening_[what.index] = runner_->open_session_async();
    } else {
      (void)runner_->open_session_async();
    }
  }

  // What is due by `t`: each arrival (in file order) its session, then the marker that
  // starts them; or, with no arrival, the cancels due.
  void hand_over_(double t) {
    bool arrived = false;
    while (next_ < requests_.size() && requests_[next_].arrival <= t) {
      const std::size_t i = next_++;
      requests_[i].arrival_step = steps_;
      ++live_;
      arriving_.push_back(i);
      expect_({Expected::kSession, i, t});
      arrived = true;
    }
    if (arrived) {
      expect_({Expected::kStarts, 0, t});
      hold_ = true;  // the next poll comes before the starts
    } else if (!deadlines_.empty() && deadlines_.top().first <= t) {
      expect_({Expected::kCancels, 0, t});
    }
  }

  // The arrivals' sessions are open (their opens came first): their generations start,
  // then the cancels due by `t` (theirs with no patience too) are flagged after the starts.
  void start_arrivals_(double t) {
    for (const std::size_t i : arriving_) {
      std::optional<et::Session> session = opening_[i].get();
      if (!session) {
        stuck("the runner refused to open a session for request " + std::to_string(i + 1));
      }
      sessions_[i] = std::move(*session);
      start_(i);
    }
    arriving_.clear();
    if (!deadlines_.empty() && deadlines_.top().first <= t) {
      expect_({Expected::kCancels, 0, t});
    }
  }

  void cancel_due_(double t) {
    while (!deadlines_.empty() && deadlines_.top().first <= t) {
      const std::size_t i = deadlines_.top().second;
      deadlines_.pop();
      if (requests_[i].reason == kPending) {
        handles_[i].cancel();
      }
    }
  }

  // Nothing is live: the clock jumps to the next arrival; none left, the run is done.
  void settle_idle_() {
    if (next_ == requests_.size()) {
      {
        std::lock_guard<std::mutex> lock(done_mutex_);
        done_ = true;
      }
      done_cv_.notify_all();
      return;
    }
    now_ = std::max(now_, requests_[next_].arrival);
    hand_over_(now_);
  }

  void start_(std::size_t i) {
    Request& r = requests_[i];
    if (r.cancel_at >= 0) {
      deadlines_.emplace(r.cancel_at, i);
    }
    std::vector<et::Token> prompt(static_cast<std::size_t>(r.prompt));
    for (std::size_t k = 0; k < prompt.size(); ++k) {
      prompt[k] = static_cast<et::Token>(1 + (i * 131 + k) % 32000);
    }
    et::GenConfig config;
    config.max_new_tokens = static_cast<std::int32_t>(r.output);
    config.seed = static_cast<std::uint64_t>(i);
    handles_[i] = sessions_[i].generate_async(
        et::GenerationInput{std::move(prompt)}, std::move(config),
        [this, i](const et::GenerationUpdate& update) { updated_(i, update); },
        [this, i] { settled_(i); });
  }

  void updated_(std::size_t i, const et::GenerationUpdate& update) {
    Request& r = requests_[i];
    if (!update.tokens.empty()) {
      r.produced += static_cast<std::int64_t>(update.tokens.size());
      if (r.first_token_step < 0) {
        r.first_token = now_;
        r.first_token_step = static_cast<std::int64_t>(steps_);
      }
      r.last_token = now_;
      r.last_token_step = static_cast<std::int64_t>(steps_);
    }
    if (update.finish_reason) {
      switch (*update.finish_reason) {
        case et::FinishReason::StopToken:
          r.reason = kStop;
          break;
        case et::FinishReason::NewTokenLimit:
          r.reason = kLimit;
          break;
        case et::FinishReason::Cancelled:
          r.reason = kCancelled;
          break;
        case et::FinishReason::Failed:
          r.reason = kFailed;
          break;
      }
      r.message = update.error_message;
    }
  }

  // The generation ended: its session is closed (the runner cancels its queued tasks), and
  // if nothing else is live, the next arrivals are handed over.
  void settled_(std::size_t i) {
    if (requests_[i].reason == kPending) {
      requests_[i].reason = kFailed;  // settled without a terminal update
    }
    sessions_[i] = et::Session{};
    --live_;
    if (live_ == 0) {
      settle_idle_();
    }
  }

  std::vector<Request> requests_;
  Cost cost_;
  std::vector<et::Session> sessions_;
  std::vector<std::future<std::optional<et::Session>>> opening_;
  std::vector<et::GenerationHandle> handles_;
  std::unordered_map<et::SessionId, std::size_t> by_sid_;
  std::deque<Expected> expected_;
  std::vector<std::size_t> arriving_;
  std::priority_queue<std::pair<double, std::size_t>, std::vector<std::pair<double, std::size_t>>,
                      std::greater<std::pair<double, std::size_t>>>
      deadlines_;
  et::Runner* runner_ = nullptr;
  schedcli::RecordingScheduler* recorder_ = nullptr;
  std::size_t next_ = 0;
  long live_ = 0;
  bool hold_ = false;
  double now_ = 0;
  std::uint64_t steps_ = 0;
  std::uint64_t decodes_ = 0;
  std::uint64_t context_ = 0;
  std::uint64_t batch_tokens_ = 0;
  std::uint64_t prefill_tokens_ = 0;
  std::uint64_t decode_tokens_ = 0;
  std::mutex done_mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
};

std::vector<et::Task> Gate::get_work() {
  if (driver_.take_hold()) {
    return {};
  }
  if (!inner_->has_work()) {
    if (driver_.live() > 0 && ++idle_polls_ >= kIdlePolls) {
      driver_.stuck("the scheduler has no work (has_work() is false) while " +
                    std::to_string(driver_.live()) + " generations wait for it");
    }
    return {};
  }
  idle_polls_ = 0;
  std::vector<et::Task> batch = inner_->get_work();
  if (batch.empty()) {
    if (++empty_batches_ >= kEmptyBatches) {
      driver_.stuck("the scheduler returned an empty batch " + std::to_string(kEmptyBatches) +
                    " times in a row while has_work() was true");
    }
  } else {
    empty_batches_ = 0;
  }
  driver_.batch_taken(batch);
  return batch;
}

class FakeExecutor final : public et::Executor {
 public:
  explicit FakeExecutor(Driver& driver) : driver_(driver) {}
  std::optional<et::SessionId> open_session() override { return driver_.open_session(); }
  void close_session(et::SessionId) override {}
  void set_sampling(et::SessionId, const et::SamplingParams&,
                    std::optional<std::uint64_t>) override {}
  bool execute(const et::BatchInput& batch, et::BatchOutput& out) override {
    return driver_.execute(batch, out);
  }

 private:
  Driver& driver_;
};

static_assert(!std::is_abstract<FakeExecutor>::value,
              "schedcli: executor.h: Executor declares a call schedcli's fake executor does "
              "not give (it gives open_session, close_session, set_sampling and execute)");

struct Input {
  std::string policy;
  std::string params_json;
  std::vector<std::size_t> args;
  Cost cost;
  std::vector<Request> requests;
};

Input read_input(const char* path) {
  std::ifstream in(path);
  std::string format;
  if (!in || !std::getline(in, format) || format != "schedcli-runner-input 1") {
    fail(kBadInput, std::string("schedcli runner: ") + path + ": not a driver input");
  }
  Input got;
  std::getline(in, got.policy);
  std::getline(in, got.params_json);
  std::size_t n = 0;
  in >> n;
  got.args.resize(n);
  for (auto& a : got.args) {
    in >> a;
  }
  in >> got.cost.a >> got.cost.b >> got.cost.c >> got.cost.d >> n;
  got.requests.resize(n);
  for (Request& r : got.requests) {
    long long sid = 0;
    in >> sid >> r.arrival >> r.cancel_at >> r.prompt >> r.output;
    r.sid = static_cast<et::SessionId>(sid);
  }
  if (!in) {
    fail(kBadInput, std::string("schedcli runner: ") + path + ": the input is cut short");
  }
  return got;
}

}  // namespace schedcli_runner

int main(int argc, char** argv) {
  using namespace schedcli_runner;
  if (argc != 5) {
    fail(kBadInput, "usage: schedcli-runner INPUT TRACE RESULTS PARENT_PID");
  }
#if defined(__linux__)
  // Never outlives the schedcli that runs it.
  const pid_t parent = static_cast<pid_t>(std::atoll(argv[4]));  // 0: none to watch
  if (parent != 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) {
      return 143;
    }
  }
#endif
  Input input = read_input(argv[1]);
  std::vector<std::size_t> params = input.args;
  params.push_back(0);  // a factory without parameters still gets a valid pointer
  auto made = schedcli_factory(params.data());
  if (made == nullptr) {
    fail(kBadInput, "the factory returned null: the C++ refuses these parameters");
  }
  std::unique_ptr<et::Scheduler> scheduler(std::move(made));
  const std::size_t chunk = scheduler->max_prefill_chunk_size();
  auto recorder = schedcli::RecordingScheduler::create(
      std::move(scheduler), argv[2], input.policy.c_str(), input.params_json.c_str());
  if (recorder == nullptr) {
    fail(kBadInput, std::string("cannot write the trace to ") + argv[2]);
  }
  Driver driver(std::move(input.requests), input.cost);
  schedcli::RecordingScheduler* trace = recorder.get();
  FakeExecutor executor(driver);
  {
    et::Runner runner(executor, std::make_unique<Gate>(std::move(recorder), driver));
    driver.attach(&runner, trace);
    // The kick: an open nobody expects, whose Executor::open_session call (on the engine
    // thread) hands the first arrivals over.
    (void)runner.open_session_async().get();
    driver.wait_done();
    runner.shutdown();
    trace->flush();
  }
  if (!driver.write_results(argv[3], chunk)) {
    fail(kBadInput, std::string("cannot write the results to ") + argv[3]);
  }
  return 0;
}

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic pop
#endif
