// Drives schedcli's C++ recorder: a small test policy (FirstFree, mirrored in Python by
// tests/plugin_policies.py:FirstFree), producers on several threads, one consumer.
//   recording_test OUT.jsonl [calls-for-timing]
//   recording_test --tokens OUT.jsonl
// Writes the recording to OUT.jsonl, then prints the cost per call, bare and recorded.
// --tokens records a three-chunk prompt whose chunks share one backing vector, a decode
// with no tokens at all, and a chunk longer than its backing vector, with
// record_tokens(true).
//
// --prepared (the payload shape) records a prompt prepared as one opaque input, as three
// chunks, and a chunk whose slice runs past its backing.
//
// Builds against every shape of the interface (tests/cpp/{seed,tid64,later,payload}): no
// member is marked override, so max_prefill_chunk_size() overrides where the interface
// declares it and is a plain member where it does not.

#include <schedcli/recording_scheduler.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

// Later upstream marks the interface ET_EXPERIMENTAL ([[deprecated]]): this program uses
// it knowingly (the recorder itself builds warning-free without this).
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace b = ::executorch::extension::llm::batching;

// Queue order; a batch takes, front to back, each task whose session is not yet in it,
// up to 8 tasks. Admission: size >= 1, a decode of size 1, a tid not already queued.
class FirstFree : public b::Scheduler {
 public:
  bool submit(std::vector<b::Task> tasks) {
    std::lock_guard<std::mutex> g(mutex_);
    std::unordered_set<b::TaskId> seen;
    for (const b::Task& t : tasks) {
      if (t.input.size == 0 || (t.is_decode && t.input.size != 1)) {
        return false;
      }
      if (queued_.count(t.tid) != 0 || !seen.insert(t.tid).second) {
        return false;
      }
    }
    for (b::Task& t : tasks) {
      queued_.insert(t.tid);
      queue_.push_back(std::move(t));
    }
    return true;
  }
  bool has_work() const {
    std::lock_guard<std::mutex> g(mutex_);
    return !queue_.empty();
  }
  std::vector<b::Task> get_work() {
    std::lock_guard<std::mutex> g(mutex_);
    std::vector<b::Task> batch;
    std::unordered_set<b::SessionId> sessions;
    std::deque<b::Task> rest;
    for (b::Task& t : queue_) {
      if (batch.size() < 8 && sessions.insert(t.input.sid).second) {
        queued_.erase(t.tid);
        batch.push_back(std::move(t));
      } else {
        rest.push_back(std::move(t));
      }
    }
    queue_.swap(rest);
    return batch;
  }
  std::vector<b::Task> cancel(b::SessionId sid) {
    std::lock_guard<std::mutex> g(mutex_);
    std::vector<b::Task> dropped;
    std::deque<b::Task> rest;
    for (b::Task& t : queue_) {
      if (t.input.sid == sid) {
        queued_.erase(t.tid);
        t.cancelled = true;
        dropped.push_back(std::move(t));
      } else {
        rest.push_back(std::move(t));
      }
    }
    queue_.swap(rest);
    return dropped;
  }
  std::vector<b::Task> clear() {
    std::lock_guard<std::mutex> g(mutex_);
    std::vector<b::Task> dropped(queue_.begin(), queue_.end());
    queue_.clear();
    queued_.clear();
    return dropped;
  }
  std::size_t max_prefill_chunk_size() const {
    return 64;
  }

 private:
  mutable std::mutex mutex_;
  std::deque<b::Task> queue_;
  std::unordered_set<b::TaskId> queued_;
};

static b::Task make(b::TaskId tid, b::SessionId sid, bool decode, std::size_t size) {
  b::Task t;
  t.tid = tid;
  t.is_decode = decode;
  t.input.sid = sid;
  t.input.size = size;
  t.input.produce_output = true;
  t.input.position = static_cast<b::Position>(tid % 1000);
  return t;
}

static void traffic(b::Scheduler& s, int producers, int per_producer) {
  std::atomic<b::TaskId> next{1};
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&s, &next, p, per_producer] {
      unsigned seed = 7u + static_cast<unsigned>(p);
      for (int i = 0; i < per_producer; ++i) {
        seed = seed * 1103515245u + 12345u;
        const b::SessionId sid = p * 100 + static_cast<b::SessionId>((seed >> 16) % 6);
        const bool decode = (seed >> 8) % 2 == 0;
        std::vector<b::Task> group;
        group.push_back(make(next++, sid, decode, decode ? 1 : 1 + (seed >> 4) % 64));
        if (!decode && (seed >> 12) % 3 == 0) {
          group.push_back(make(next++, sid, false, 8));
        }
        s.submit(std::move(group));
        if ((seed >> 20) % 29 == 0) {
          s.cancel(sid);
        }
      }
    });
  }
  std::thread consumer([&s, &done] {
    while (!done.load()) {
      s.get_work();
    }
  });
  for (std::thread& t : threads) {
    t.join();
  }
  done = true;
  consumer.join();
  while (s.has_work()) {
    s.get_work();
  }
}

static double per_call_ns(b::Scheduler& s, int calls) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) {
    s.submit({make(1000000 + i, i % 8, true, 1)});
    if (i % 8 == 7) {
      s.get_work();
    }
  }
  const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
  return took.count() / calls;
}

// A prompt of 40 tokens in one backing vector at position 100, as three chunks (16, 16,
// 8) that each name their slice by offset; then a decode that carries no tokens.
static int record_tokens(const char* out) {
  auto rec = schedcli::RecordingScheduler::create(
      std::make_unique<FirstFree>(), out, "first-free", nullptr);
  if (rec == nullptr) {
    return 1;
  }
  rec->record_tokens(true);
  auto backing = std::make_shared<std::vector<b::Token>>();
  for (int i = 0; i < 40; ++i) {
    backing->push_back(1000 + i);
  }
  std::vector<b::Task> prompt;
  const std::size_t offsets[] = {0, 16, 32};
  const std::size_t sizes[] = {16, 16, 8};
  for (int c = 0; c < 3; ++c) {
    b::Task t = make(c + 1, 7, false, sizes[c]);
    schedcli::shape::set_tokens(t.input, backing);
    t.input.offset = offsets[c];
    t.input.position = 100;
    t.input.produce_output = c == 2;
    prompt.push_back(std::move(t));
  }
  rec->record_time(true);
  rec->submit(std::move(prompt));
  for (int step = 0; step < 3; ++step) {
    rec->get_work();  // FirstFree takes one task of a session per batch
  }
  b::Task decode = make(4, 7, true, 1);
  decode.input.position = 140;
  rec->submit({std::move(decode)});  // tokens: nullptr
  rec->get_work();
  // A chunk of 5 whose backing vector holds 3 tokens: accepted by the scheduler, recorded
  // without tokens (the slice cannot be written whole).
  b::Task short_chunk = make(5, 8, false, 5);
  schedcli::shape::set_tokens(short_chunk.input, std::make_shared<std::vector<b::Token>>(3, 9));
  rec->submit({std::move(short_chunk)});
  rec->get_work();
  rec->flush();
  return 0;
}

// `to` holds what `from` holds: the same backing (one pointer, shared).
template <class I>
static void share_payload(I& to, const I& from) {
  if constexpr (schedcli::shape::has_payload<I>::value) {
    to.payload = from.payload;
  } else {
    to.tokens = from.tokens;
  }
}

// A prompt of 48 positions prepared as one opaque input at position 200, as three chunks
// (16 each) naming their slice by offset; a chunk whose slice runs past its backing; and,
// where the interface has no prepared inputs, nothing (exit 3: the caller knows the shape).
static int record_prepared(const char* out) {
  auto rec = schedcli::RecordingScheduler::create(
      std::make_unique<FirstFree>(), out, "first-free", nullptr);
  if (rec == nullptr) {
    return 1;
  }
  rec->record_tokens(true);  // prepared inputs are recorded either way; tokens are none here
  std::vector<b::Task> prompt;
  b::Task whole = make(1, 9, false, 16);
  if (!schedcli::shape::set_prepared(whole.input, 48)) {
    return 3;
  }
  for (int c = 0; c < 3; ++c) {
    b::Task t = make(c + 1, 9, false, 16);
    share_payload(t.input, whole.input);  // one backing, shared by the three chunks
    t.input.offset = static_cast<std::size_t>(16 * c);
    t.input.position = 200;
    t.input.produce_output = c == 2;
    prompt.push_back(std::move(t));
  }
  rec->submit(std::move(prompt));
  for (int step = 0; step < 3; ++step) {
    rec->get_work();
  }
  b::Task past = make(4, 10, false, 8);
  schedcli::shape::set_prepared(past.input, 4);  // 8 positions of a backing of 4
  rec->submit({std::move(past)});
  rec->get_work();
  // A decode whose token id is past what a trace's signed 64-bit integers hold.
  b::Task wide = make(5, 11, true, 1);
  schedcli::shape::set_tokens(
      wide.input, std::make_shared<std::vector<b::Token>>(1, static_cast<b::Token>(-1)));
  rec->submit({std::move(wide)});
  rec->get_work();
  rec->flush();
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--tokens") {
    return record_tokens(argv[2]);
  }
  if (argc == 3 && std::string(argv[1]) == "--prepared") {
    return record_prepared(argv[2]);
  }
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT.jsonl [calls] | --tokens OUT.jsonl | --prepared OUT.jsonl\n", argv[0]);
    return 2;
  }
  {
    auto rec = schedcli::RecordingScheduler::create(
        std::make_unique<FirstFree>(), argv[1], "first-free", nullptr);
    if (rec == nullptr) {
      std::fprintf(stderr, "cannot open %s\n", argv[1]);
      return 1;
    }
    rec->record_time(true);
    traffic(*rec, 4, 2000);
    rec->flush();
  }
  if (argc >= 3) {
    const int calls = std::atoi(argv[2]);
    FirstFree bare;
    auto rec = schedcli::RecordingScheduler::create(
        std::make_unique<FirstFree>(), "/dev/null", "first-free", nullptr);
    const double bare_ns = per_call_ns(bare, calls);
    const double rec_ns = per_call_ns(*rec, calls);
    std::printf("bare %.0f ns/call, recorded %.0f ns/call (+%.0f ns)\n", bare_ns, rec_ns,
                rec_ns - bare_ns);
  }
  return 0;
}
