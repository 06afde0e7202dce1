// The FIFO twin of `fcfs` (fifo_scheduler.h), keeping a copy of every task it hands back
// for a while and dropping the oldest on a thread of its own: the last reference to a
// task's identity mark goes on that thread while the calling thread marks new tasks, so
// the shim's mark pool is used from two threads at once.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "fifo_scheduler.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#if defined(__clang__)
#pragma GCC diagnostic ignored "-Winconsistent-missing-override"
#endif

namespace schedcli_test {

class ThreadedFifoScheduler : public et::Scheduler {
 public:
  static std::unique_ptr<ThreadedFifoScheduler> create(
      std::size_t max_batch_tokens, std::size_t max_num_seqs, std::size_t max_prefill_chunk_size,
      std::size_t keep) {
    auto inner = FifoScheduler::create(max_batch_tokens, max_num_seqs, max_prefill_chunk_size);
    if (!inner) return nullptr;
    return std::unique_ptr<ThreadedFifoScheduler>(
        new ThreadedFifoScheduler(std::move(inner), keep));
  }

  ~ThreadedFifoScheduler() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    wake_.notify_one();
    worker_.join();
  }

  bool submit(std::vector<et::Task> tasks) override { return inner_->submit(std::move(tasks)); }
  bool has_work() const override { return inner_->has_work(); }
  std::vector<et::Task> get_work() override { return kept(inner_->get_work()); }
  std::vector<et::Task> cancel(et::SessionId sid) override { return kept(inner_->cancel(sid)); }
  std::vector<et::Task> clear() override { return kept(inner_->clear()); }
  std::size_t max_prefill_chunk_size() const { return inner_->max_prefill_chunk_size(); }

 private:
  ThreadedFifoScheduler(std::unique_ptr<FifoScheduler> inner, std::size_t keep)
      : inner_(std::move(inner)), keep_(keep), worker_([this] { drop(); }) {}

  std::vector<et::Task> kept(std::vector<et::Task> tasks) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const et::Task& t : tasks) held_.push_back(t);
    }
    wake_.notify_one();
    return tasks;
  }

  // Drops the oldest copies past `keep_`, here, on this thread.
  void drop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return done_ || held_.size() > keep_; });
      if (done_) return;
      std::vector<et::Task> old;
      while (held_.size() > keep_) {
        old.push_back(std::move(held_.front()));
        held_.pop_front();
      }
      lock.unlock();
      old.clear();  // the marks' last references, released off the calling thread
      lock.lock();
    }
  }

  std::unique_ptr<FifoScheduler> inner_;
  std::size_t keep_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<et::Task> held_;
  bool done_ = false;
  std::thread worker_;  // last: started once the rest is built
};

}  // namespace schedcli_test

#pragma GCC diagnostic pop
