// A batching::Scheduler of schedcli's own that checks what crosses the boundary, for the
// tests: it accepts a task only if its tokens, when it has any, are the slice
// [position, position + 1, ...] of exactly `size` tokens at offset 0, a task with no
// tokens has a null pointer and, if it has no position, -1, and a task holding a prepared
// input (payload shape) has its slice inside it. Batches of one task, FIFO.
#pragma once

#include <cstddef>
#include <deque>
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

class TokenCheck : public et::Scheduler {
 public:
  explicit TokenCheck(std::size_t untokened_position) : untokened_(untokened_position) {}

  bool submit(std::vector<et::Task> tasks) override {
    for (const et::Task& t : tasks) {
      std::size_t backing = 0;
      if (schedcli::shape::prepared_of(t.input, backing)) {
        if (t.input.offset > backing || t.input.size > backing - t.input.offset) return false;
        continue;
      }
      if (t.input.offset != 0) return false;
      const schedcli::shape::Tokens* held = schedcli::shape::tokens_of(t.input);
      if (held == nullptr || *held == nullptr) {
        if (t.input.position != -1 && static_cast<std::size_t>(t.input.position) != untokened_) {
          return false;
        }
        continue;
      }
      const std::vector<et::Token>& tokens = **held;
      if (tokens.size() != t.input.size) return false;
      for (std::size_t i = 0; i < tokens.size(); ++i) {
        if (tokens[i] != static_cast<et::Token>(t.input.position) + static_cast<et::Token>(i)) {
          return false;
        }
      }
    }
    for (et::Task& t : tasks) queue_.push_back(std::move(t));
    return true;
  }
  bool has_work() const override { return !queue_.empty(); }
  std::vector<et::Task> get_work() override {
    std::vector<et::Task> out;
    if (!queue_.empty()) {
      out.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    return out;
  }
  std::vector<et::Task> cancel(et::SessionId) override { return {}; }
  std::vector<et::Task> clear() override {
    std::vector<et::Task> out(std::make_move_iterator(queue_.begin()),
                              std::make_move_iterator(queue_.end()));
    queue_.clear();
    return out;
  }
  std::size_t max_prefill_chunk_size() const { return 1024; }

 private:
  std::size_t untokened_;
  std::deque<et::Task> queue_;
};

}  // namespace schedcli_test

#pragma GCC diagnostic pop
