// schedcli's recorder for ExecuTorch's batching runner: wraps any Scheduler and writes
// every call, with the batch it returned, as a schedcli trace (format v1) that
// `schedcli replay REC.jsonl --check` replays exactly. Header-only; C++17; builds with
// -fno-exceptions. See docs/recording.md in the schedcli repository.
//
// Costs: one mutex held across the inner call and the append, so the file's order is the
// order the inner scheduler saw the calls, whatever the threads; the record is formatted
// into a memory buffer and written with one fwrite per kBufferBytes (the step loop does
// no I/O but once per megabyte). Memory is bounded by that buffer.
//
// Recorded per task: tid, sid, kind, size, position, produce_output. Token ids are never
// recorded (they are user data) unless record_tokens(true) asks.

#pragma once

#include <chrono>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <executorch/extension/llm/batching/scheduler.h>

namespace schedcli {

namespace batching = ::executorch::extension::llm::batching;

class RecordingScheduler : public batching::Scheduler {
 public:
  static constexpr std::size_t kBufferBytes = 1 << 20;

  // nullptr if path cannot be opened for writing. policy and params_json (a JSON object,
  // or nullptr for none) go into the trace header, so a replay picks the same policy.
  static std::unique_ptr<RecordingScheduler> create(
      std::unique_ptr<batching::Scheduler> inner,
      const char* path,
      const char* policy,
      const char* params_json) {
    if (inner == nullptr || path == nullptr) {
      return nullptr;
    }
    std::FILE* file = std::fopen(path, "wb");
    if (file == nullptr) {
      return nullptr;
    }
    std::unique_ptr<RecordingScheduler> rec(new RecordingScheduler(std::move(inner), file));
    rec->header_(policy, params_json);
    return rec;
  }

  ~RecordingScheduler() override {
    std::lock_guard<std::mutex> g(mutex_);
    write_out_();
    std::fclose(file_);
  }

  RecordingScheduler(const RecordingScheduler&) = delete;
  RecordingScheduler& operator=(const RecordingScheduler&) = delete;

  // The file is a complete trace after flush() (and after destruction).
  void flush() {
    std::lock_guard<std::mutex> g(mutex_);
    write_out_();
    std::fflush(file_);
  }

  // Adds "t": seconds since the recorder was created (steady clock), for `schedcli fit`.
  void record_time(bool on) {
    std::lock_guard<std::mutex> g(mutex_);
    record_time_ = on;
  }

  // Records each task's token ids. Off by default: tokens are user data.
  void record_tokens(bool on) {
    std::lock_guard<std::mutex> g(mutex_);
    record_tokens_ = on;
  }

  bool submit(std::vector<batching::Task> tasks) override {
    std::lock_guard<std::mutex> g(mutex_);
    // Formatted before the call: the inner scheduler takes the tasks by value.
    std::string group;
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      if (i != 0) {
        group += ',';
      }
      task_(group, tasks[i]);
    }
    const bool accepted = inner_->submit(std::move(tasks));
    begin_("submit");
    buffer_ += ",\"tasks\":[";
    buffer_ += group;
    buffer_ += ']';
    if (!accepted) {
      buffer_ += ",\"meta\":{\"rejected\":\"the scheduler refused the group\"}";
    }
    end_();
    return accepted;
  }

  bool has_work() const override {
    return inner_->has_work();
  }

  std::vector<batching::Task> get_work() override {
    std::lock_guard<std::mutex> g(mutex_);
    std::vector<batching::Task> batch = inner_->get_work();
    begin_("get_work");
    buffer_ += ",\"expect\":[";
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (i != 0) {
        buffer_ += ',';
      }
      int_(batch[i].tid);
    }
    buffer_ += ']';
    end_();
    return batch;
  }

  std::vector<batching::Task> cancel(batching::SessionId sid) override {
    std::lock_guard<std::mutex> g(mutex_);
    std::vector<batching::Task> dropped = inner_->cancel(sid);
    begin_("cancel");
    buffer_ += ",\"sid\":";
    int_(sid);
    end_();
    return dropped;
  }

  std::vector<batching::Task> clear() override {
    std::lock_guard<std::mutex> g(mutex_);
    std::vector<batching::Task> dropped = inner_->clear();
    begin_("clear");
    end_();
    return dropped;
  }

  std::size_t max_prefill_chunk_size() const override {
    return inner_->max_prefill_chunk_size();
  }

 private:
  RecordingScheduler(std::unique_ptr<batching::Scheduler> inner, std::FILE* file)
      : inner_(std::move(inner)), file_(file), start_(std::chrono::steady_clock::now()) {
    buffer_.reserve(kBufferBytes + 4096);
  }

  // Caller holds mutex_ (or is the factory, before anyone else can).
  void header_(const char* policy, const char* params_json) {
    buffer_ += "{\"schedcli\":1";
    if (policy != nullptr) {
      buffer_ += ",\"policy\":";
      string_(policy);
    }
    if (params_json != nullptr) {
      buffer_ += ",\"params\":";
      buffer_ += params_json;
    }
    buffer_ += ",\"meta\":{\"recorded_by\":\"schedcli recording_scheduler.h\"}}\n";
  }

  void begin_(const char* op) {
    buffer_ += "{\"op\":\"";
    buffer_ += op;
    buffer_ += '"';
    if (record_time_) {
      const std::chrono::duration<double> since = std::chrono::steady_clock::now() - start_;
      char text[40];
      std::snprintf(text, sizeof(text), ",\"t\":%.9f", since.count());
      buffer_ += text;
    }
  }

  // A whole line at a time: the buffer only ever holds complete records.
  void end_() {
    buffer_ += "}\n";
    if (buffer_.size() >= kBufferBytes) {
      write_out_();
    }
  }

  void write_out_() {
    if (!buffer_.empty()) {
      std::fwrite(buffer_.data(), 1, buffer_.size(), file_);
      buffer_.clear();
    }
  }

  void task_(std::string& out, const batching::Task& t) {
    out += "{\"tid\":";
    int_(out, t.tid);
    out += ",\"sid\":";
    int_(out, t.input.sid);
    out += t.is_decode ? ",\"kind\":\"decode\",\"size\":" : ",\"kind\":\"prefill\",\"size\":";
    uint_(out, t.input.size);
    if (t.input.position >= 0) {
      out += ",\"position\":";
      int_(out, t.input.position);
    }
    out += t.input.produce_output ? ",\"produce_output\":true" : ",\"produce_output\":false";
    if (record_tokens_) {
      out += ",\"tokens\":[";
      const std::size_t end = t.input.offset + t.input.size;
      for (std::size_t i = t.input.offset; i < end && i < t.input.tokens.size(); ++i) {
        if (i != t.input.offset) {
          out += ',';
        }
        uint_(out, t.input.tokens[i]);
      }
      out += ']';
    }
    out += '}';
  }

  void int_(std::int64_t v) {
    int_(buffer_, v);
  }

  static void int_(std::string& out, std::int64_t v) {
    char text[24];
    std::snprintf(text, sizeof(text), "%" PRId64, v);
    out += text;
  }

  static void uint_(std::string& out, std::uint64_t v) {
    char text[24];
    std::snprintf(text, sizeof(text), "%" PRIu64, v);
    out += text;
  }

  // A JSON string: quotes, backslashes and control characters escaped.
  void string_(const char* s) {
    buffer_ += '"';
    for (; *s != '\0'; ++s) {
      const unsigned char c = static_cast<unsigned char>(*s);
      if (c == '"' || c == '\\') {
        buffer_ += '\\';
        buffer_ += static_cast<char>(c);
      } else if (c < 0x20) {
        char text[8];
        std::snprintf(text, sizeof(text), "\\u%04x", c);
        buffer_ += text;
      } else {
        buffer_ += static_cast<char>(c);
      }
    }
    buffer_ += '"';
  }

  mutable std::mutex mutex_;
  std::unique_ptr<batching::Scheduler> inner_;
  std::FILE* file_;
  std::chrono::steady_clock::time_point start_;
  std::string buffer_;
  bool record_time_ = false;
  bool record_tokens_ = false;
};

}  // namespace schedcli
