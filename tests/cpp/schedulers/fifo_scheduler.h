// A FIFO batching::Scheduler of schedcli's own, for the tests: the C++ twin of the
// built-in `fcfs` policy (one queue in submission order, one token budget, a task cap,
// head-of-line blocking), written against either interface shape.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <unordered_set>
#include <vector>

#include <executorch/extension/llm/batching/scheduler.h>

// The later interface shapes mark it ET_EXPERIMENTAL ([[deprecated]]): a user's scheduler
// says it knows, as this one does, to build warning-free under -Werror.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#if defined(__clang__)  // max_prefill_chunk_size() overrides only where the shape declares it
#pragma GCC diagnostic ignored "-Winconsistent-missing-override"
#endif

namespace schedcli_test {

namespace et = ::executorch::extension::llm::batching;

class FifoScheduler : public et::Scheduler {
 public:
  // Null when a chunk as large as allowed could never fit a batch.
  static std::unique_ptr<FifoScheduler> create(
      std::size_t max_batch_tokens, std::size_t max_num_seqs, std::size_t max_prefill_chunk_size) {
    if (max_batch_tokens == 0 || max_num_seqs == 0 || max_prefill_chunk_size == 0 ||
        max_prefill_chunk_size > max_batch_tokens) {
      return nullptr;
    }
    return std::unique_ptr<FifoScheduler>(
        new FifoScheduler(max_batch_tokens, max_num_seqs, max_prefill_chunk_size));
  }

  bool submit(std::vector<et::Task> tasks) override {
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      const et::Task& t = tasks[i];
      if (t.input.size == 0 || (t.is_decode && t.input.size != 1) ||
          (!t.is_decode && t.input.size > max_prefill_chunk_size_) || queued(t.tid)) {
        return false;
      }
      for (std::size_t j = 0; j < i; ++j) {
        if (tasks[j].tid == t.tid) return false;
      }
    }
    for (et::Task& t : tasks) {
      t.cancelled = false;
      queue_.push_back(std::move(t));
    }
    return true;
  }

  bool has_work() const override { return !queue_.empty(); }

  // In order while tasks fit; a session the batch rule stops waits with all its later
  // tasks; the first other task that does not fit ends the batch.
  std::vector<et::Task> get_work() override {
    std::vector<et::Task> taken;
    std::size_t spent = 0;
    std::unordered_set<et::SessionId> present, closed, blocked;
    for (auto it = queue_.begin(); it != queue_.end() && taken.size() < max_num_seqs_;) {
      const et::SessionId sid = it->input.sid;
      const bool allowed = closed.count(sid) == 0 && !(it->is_decode && present.count(sid) != 0);
      if (blocked.count(sid) != 0 || !allowed) {
        blocked.insert(sid);
        ++it;
        continue;
      }
      if (it->input.size > max_batch_tokens_ - spent) break;
      spent += it->input.size;
      present.insert(sid);
      if (it->is_decode || it->input.produce_output) closed.insert(sid);
      taken.push_back(std::move(*it));
      it = queue_.erase(it);
    }
    return taken;
  }

  std::vector<et::Task> cancel(et::SessionId sid) override {
    std::vector<et::Task> dropped;
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (it->input.sid == sid) {
        it->cancelled = true;
        dropped.push_back(std::move(*it));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    return dropped;
  }

  std::vector<et::Task> clear() override {
    std::vector<et::Task> dropped;
    for (et::Task& t : queue_) {
      t.cancelled = true;
      dropped.push_back(std::move(t));
    }
    queue_.clear();
    return dropped;
  }

  // Overrides the later shape's interface call; a plain member under the seed's.
  std::size_t max_prefill_chunk_size() const { return max_prefill_chunk_size_; }

 private:
  FifoScheduler(std::size_t budget, std::size_t seqs, std::size_t chunk)
      : max_batch_tokens_(budget), max_num_seqs_(seqs), max_prefill_chunk_size_(chunk) {}

  bool queued(et::TaskId tid) const {
    for (const et::Task& t : queue_) {
      if (t.tid == tid) return true;
    }
    return false;
  }

  std::size_t max_batch_tokens_;
  std::size_t max_num_seqs_;
  std::size_t max_prefill_chunk_size_;
  std::list<et::Task> queue_;
};

}  // namespace schedcli_test

#pragma GCC diagnostic pop
