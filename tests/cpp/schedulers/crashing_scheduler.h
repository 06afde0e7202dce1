// A batching::Scheduler of schedcli's own that breaks on purpose, for the tests: FIFO
// batches of one task, until get_work call number `crash_at` (1-based), which dies the way
// `how` says: 1 null dereference (SIGSEGV), 2 abort(), 3 a failed assert, 4 loops forever,
// 5 hands back a task it never had.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdlib>
#include <deque>
#include <memory>
#include <iterator>
#include <vector>

#include <executorch/extension/llm/batching/scheduler.h>

namespace schedcli_test {

namespace et = ::executorch::extension::llm::batching;

class CrashingScheduler : public et::Scheduler {
 public:
  CrashingScheduler(std::size_t crash_at, std::size_t how) : crash_at_(crash_at), how_(how) {}

  bool submit(std::vector<et::Task> tasks) override {
    for (et::Task& t : tasks) queue_.push_back(std::move(t));
    return true;
  }
  bool has_work() const override { return !queue_.empty(); }
  std::vector<et::Task> get_work() override {
    std::vector<et::Task> out;
    if (++calls_ == crash_at_) {
      die();
      if (how_ == 5 && !queue_.empty()) {
        out.push_back(queue_.front());
        out.back().tid = 999999;
        return out;
      }
    }
    if (!queue_.empty()) {
      out.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    return out;
  }
  std::vector<et::Task> cancel(et::SessionId sid) override {
    std::vector<et::Task> out;
    std::deque<et::Task> kept;
    for (et::Task& t : queue_) {
      if (t.input.sid == sid) {
        out.push_back(std::move(t));
      } else {
        kept.push_back(std::move(t));
      }
    }
    queue_.swap(kept);
    return out;
  }
  std::vector<et::Task> clear() override {
    std::vector<et::Task> out(std::make_move_iterator(queue_.begin()),
                              std::make_move_iterator(queue_.end()));
    queue_.clear();
    return out;
  }
  std::size_t max_prefill_chunk_size() const { return 1 << 20; }

 private:
  void die() {
    volatile int* nowhere = nullptr;
    switch (how_) {
      case 1: *nowhere = 1; break;
      case 2: std::abort();
      case 3: assert(how_ != 3 && "the crashing scheduler's assert"); break;
      case 4: for (volatile int spin = 0;; spin = spin + 1) {} break;
      default: break;
    }
  }

  std::size_t crash_at_;
  std::size_t how_;
  std::size_t calls_ = 0;
  std::deque<et::Task> queue_;
};

}  // namespace schedcli_test
