// Records a C++ scheduler under threaded traffic, for replaying it as `-p cxx:...`:
// four producers submit and cancel while one consumer takes batches; then, with work
// still queued, clear() (whose order is the scheduler's own). Each decode carries its
// token; a prompt's chunks share one backing: token ids, or (the payload shape) every
// other prompt an opaque prepared input, recorded as `prepared`.
//   record_threads OUT.jsonl
// The scheduler is compiled in: -DPOLICY_HEADER='"x.h"' -DPOLICY_MAKE='expr'
// -DPOLICY_NAME='"cxx:name"' -DPOLICY_PARAMS='"{...}"' (the header's params, as JSON).

#include <schedcli/recording_scheduler.h>

#include POLICY_HEADER

#include <atomic>
#include <cstdio>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

// Later upstream marks the interface ET_EXPERIMENTAL ([[deprecated]]): this program uses
// it knowingly (the recorder itself builds warning-free without this).
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace b = ::executorch::extension::llm::batching;

static b::Task make(b::TaskId tid, b::SessionId sid, bool decode, std::size_t size) {
  b::Task t{};
  t.tid = tid;
  t.is_decode = decode;
  t.input.sid = sid;
  t.input.size = size;
  t.input.produce_output = decode;
  t.input.position = -1;
  return t;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.jsonl\n", argv[0]);
    return 2;
  }
  auto rec = schedcli::RecordingScheduler::create(POLICY_MAKE, argv[1], POLICY_NAME, POLICY_PARAMS);
  if (rec == nullptr) {
    std::fprintf(stderr, "cannot record to %s\n", argv[1]);
    return 1;
  }
  rec->record_tokens(true);
  b::Scheduler& s = *rec;
  std::atomic<b::TaskId> next{1};
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  for (int p = 0; p < 4; ++p) {
    threads.emplace_back([&s, &next, p] {
      unsigned seed = 11u + static_cast<unsigned>(p);
      for (int i = 0; i < 1500; ++i) {
        seed = seed * 1103515245u + 12345u;
        const b::SessionId sid = p * 100 + static_cast<b::SessionId>((seed >> 16) % 6);
        const bool decode = (seed >> 8) % 3 == 0;
        std::vector<b::Task> group;
        if (decode) {
          b::Task t = make(next++, sid, true, 1);
          schedcli::shape::set_tokens(t.input, std::make_shared<std::vector<b::Token>>(1, seed % 50000));
          t.input.position = static_cast<b::Position>(seed % 4000);
          group.push_back(std::move(t));
        } else {
          const int chunks = 1 + static_cast<int>((seed >> 12) % 3);
          std::size_t sizes[3];
          std::size_t total = 0;
          for (int c = 0; c < chunks; ++c) {
            sizes[c] = 1 + (seed >> (4 + c)) % 32;
            total += sizes[c];
          }
          b::Task first = make(0, sid, false, 0);
          if ((seed >> 3) % 2 == 0 || !schedcli::shape::set_prepared(first.input, total)) {
            schedcli::shape::set_tokens(first.input, std::make_shared<std::vector<b::Token>>(total, seed % 50000));
          }
          std::size_t offset = 0;
          for (int c = 0; c < chunks; ++c) {
            b::Task t = make(next++, sid, false, sizes[c]);
            t.input = first.input;  // the same backing, shared
            t.input.sid = sid;
            t.input.size = sizes[c];
            t.input.offset = offset;
            t.input.position = 0;
            t.input.produce_output = c == chunks - 1;
            offset += sizes[c];
            group.push_back(std::move(t));
          }
        }
        s.submit(std::move(group));
        if ((seed >> 20) % 31 == 0) {
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
  for (std::thread& t : threads) t.join();
  done = true;
  consumer.join();
  s.clear();
  rec->flush();
  return 0;
}
