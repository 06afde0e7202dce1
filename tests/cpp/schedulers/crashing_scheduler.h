// A batching::Scheduler of schedcli's own that breaks on purpose, for the tests: FIFO
// batches of one task, until get_work call number `crash_at` (1-based), which dies the way
// `how` says: 1 null dereference (SIGSEGV), 2 abort(), 3 a failed assert, 4 loops forever,
// 5 hands back a task it never had; it ends the process with 6 exit(0), 7 _Exit(0),
// 8 quick_exit(0), 9 std::exit(0), 10 _exit(0), 11 the exit_group system call, 12
// kill(getpid(), SIGKILL); it stops itself with 13 raise(SIGTERM), 14 kill(getpid(),
// SIGINT); it hands back 15 the task it handed back last time, 16 one task twice; it hands
// back its front task changed: 17 another sid, 18 a bigger size, 19 the other kind, 20
// produce_output flipped, 21 another position, 22 another offset, 23 other tokens; it hands
// back its front task as a scheduler may: 24 its tokens copied into a vector of its own, 25
// the same with a token past the slice; or 26 with its tokens pointer reset.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <cassert>
#include <csignal>
#include <cstddef>
#include <cstdlib>
#include <deque>
#include <iterator>
#include <memory>
#include <vector>

#include <executorch/extension/llm/batching/scheduler.h>
#include <schedcli/shape.h>

// The later interface shapes mark it ET_EXPERIMENTAL ([[deprecated]]): a user's scheduler
// says it knows, as this one does, to build warning-free under -Werror.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

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
      if (how_ == 15 && has_last_) {
        out.push_back(last_);
        return out;
      }
      if (how_ == 16 && !queue_.empty()) {
        out.push_back(queue_.front());
        out.push_back(queue_.front());
        queue_.pop_front();
        return out;
      }
      if (how_ >= 17 && how_ <= 26 && !queue_.empty()) {
        et::Task t = queue_.front();
        queue_.pop_front();
        change(t);
        out.push_back(t);
        return out;
      }
    }
    if (!queue_.empty()) {
      out.push_back(std::move(queue_.front()));
      queue_.pop_front();
      last_ = out.back();
      has_last_ = true;
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
      case 6: exit(0);
      case 7: _Exit(0);
      case 8: quick_exit(0);
      case 9: std::exit(0);
      case 10: _exit(0);
      case 11: syscall(SYS_exit_group, 0); break;
      case 12: kill(getpid(), SIGKILL); break;
      case 13: raise(SIGTERM); break;
      case 14: kill(getpid(), SIGINT); break;
      default: break;
    }
  }

  void change(et::Task& t) const {
    switch (how_) {
      case 17: t.input.sid += 1; break;
      case 18: t.input.size += 174; break;
      case 19: t.is_decode = !t.is_decode; break;
      case 20: t.input.produce_output = !t.input.produce_output; break;
      case 21: t.input.position += 1; break;
      case 22: t.input.offset += 1; break;
      case 23: {
        auto other = std::make_shared<std::vector<et::Token>>(t.input.size, et::Token{7});
        schedcli::shape::set_tokens(t.input, other);
        break;
      }
      case 24:
      case 25: {
        const schedcli::shape::Tokens* held = schedcli::shape::tokens_of(t.input);
        if (held != nullptr && *held) {
          auto copy = std::make_shared<std::vector<et::Token>>(**held);
          if (how_ == 25) copy->push_back(et::Token{99});
          schedcli::shape::set_tokens(t.input, copy);
        }
        break;
      }
      case 26: schedcli::shape::set_tokens(t.input, nullptr); break;
      default: break;
    }
  }

  std::size_t crash_at_;
  std::size_t how_;
  std::size_t calls_ = 0;
  std::deque<et::Task> queue_;
  et::Task last_{};
  bool has_last_ = false;
};

}  // namespace schedcli_test

#pragma GCC diagnostic pop
