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
// Recorded per task: tid, sid, kind, size, position (the chunk's own start, position +
// offset), produce_output. Token ids are never recorded (they are user data) unless
// record_tokens(true) asks; then each task's slice tokens[offset : offset + size] of its
// backing vector, when the vector holds all of it (else none, so the recording replays).
// A task whose payload is an opaque PreparedInput (the payload shape) is recorded as
// `"prepared":{"size":N,"offset":O}`: the backing's size() and the slice's offset, never
// its contents, when the slice lies inside it.
//
// Builds against every shape of ExecuTorch's interface schedcli knows (shape.h: the
// seed's, 64-bit TaskId, max_prefill_chunk_size() on the interface, the payload variant),
// detected at compile time; ids and tokens are written at their declared width.

#pragma once

#include <chrono>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <executorch/extension/llm/batching/scheduler.h>

#include "shape.h"

// Later upstream marks the interface ET_EXPERIMENTAL, a [[deprecated]] attribute: our own
// uses of it must not warn (a -Werror build would fail on them), whatever the shape.
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif

namespace schedcli {

namespace batching = ::executorch::extension::llm::batching;

namespace detail {

// The wrapped scheduler, and, where the interface declares it, max_prefill_chunk_size()
// forwarded to it: a recorder is then as concrete as the scheduler it wraps.
template <class S, bool = shape::declares_chunk_limit<S>::value>
class Wrapping : public S {
 protected:
  explicit Wrapping(std::unique_ptr<S> inner) : inner_(std::move(inner)) {}
  std::unique_ptr<S> inner_;
};

template <class S>
class Wrapping<S, true> : public S {
 public:
  std::size_t max_prefill_chunk_size() const override {
    return inner_->max_prefill_chunk_size();
  }

 protected:
  explicit Wrapping(std::unique_ptr<S> inner) : inner_(std::move(inner)) {}
  std::unique_ptr<S> inner_;
};

}  // namespace detail

class RecordingScheduler : public detail::Wrapping<batching::Scheduler> {
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

 private:
  RecordingScheduler(std::unique_ptr<batching::Scheduler> inner, std::FILE* file)
      : Wrapping(std::move(inner)), file_(file), start_(std::chrono::steady_clock::now()) {
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
    const batching::Input& in = t.input;
    out += "{\"tid\":";
    int_(out, t.tid);
    out += ",\"sid\":";
    int_(out, in.sid);
    out += t.is_decode ? ",\"kind\":\"decode\",\"size\":" : ",\"kind\":\"prefill\",\"size\":";
    int_(out, in.size);
    if (in.position >= 0) {
      // position is the base of the whole backing vector; the chunk starts offset past it.
      out += ",\"position\":";
      int_(out, static_cast<std::int64_t>(in.position) + static_cast<std::int64_t>(in.offset));
    }
    out += in.produce_output ? ",\"produce_output\":true" : ",\"produce_output\":false";
    // Only a whole slice: one that runs past its backing is recorded without tokens, or
    // without `prepared` (a replay refuses a slice outside its backing, and the recording
    // must replay).
    std::size_t opaque = 0;
    const shape::Tokens* held = shape::tokens_of(in);
    if (shape::prepared_of(in, opaque)) {
      // A trace's prepared input has at least one position, and sizes fit 63 bits.
      if (opaque > 0 && opaque <= kMaxTraceInt && in.offset <= opaque &&
          in.size <= opaque - in.offset) {
        out += ",\"prepared\":{\"size\":";
        int_(out, opaque);
        out += ",\"offset\":";
        int_(out, in.offset);
        out += '}';
      }
    } else if (record_tokens_ && held != nullptr && *held != nullptr &&
               in.offset <= (*held)->size() && in.size <= (*held)->size() - in.offset &&
               fits_trace_(**held, in.offset, in.offset + in.size)) {
      const auto& backing = **held;
      out += ",\"tokens\":[";
      const std::size_t end = in.offset + in.size;
      for (std::size_t i = in.offset; i < end; ++i) {
        if (i != in.offset) {
          out += ',';
        }
        int_(out, backing[i]);
      }
      out += ']';
    }
    out += '}';
  }

  template <class Int>
  void int_(Int v) {
    int_(buffer_, v);
  }

  // A trace's integers are signed 64-bit: an unsigned token id past that (the payload
  // shape's Token is uint64_t) cannot be written, so the slice is recorded without tokens.
  static constexpr std::uint64_t kMaxTraceInt = 9223372036854775807ULL;
  template <class T>
  static bool fits_trace_(const std::vector<T>& tokens, std::size_t begin, std::size_t end) {
    if constexpr (std::is_unsigned<T>::value) {
      for (std::size_t i = begin; i < end; ++i) {
        if (static_cast<std::uint64_t>(tokens[i]) > kMaxTraceInt) return false;
      }
    }
    (void)tokens;
    (void)begin;
    (void)end;
    return true;
  }

  // An integer at its declared width and signedness (a 32- or 64-bit TaskId, a size_t).
  template <class Int>
  static void int_(std::string& out, Int v) {
    static_assert(std::is_integral<Int>::value, "ids, sizes and tokens are integers");
    char text[24];
    if (std::is_signed<Int>::value) {
      std::snprintf(text, sizeof(text), "%" PRId64, static_cast<std::int64_t>(v));
    } else {
      std::snprintf(text, sizeof(text), "%" PRIu64, static_cast<std::uint64_t>(v));
    }
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
  std::FILE* file_;
  std::chrono::steady_clock::time_point start_;
  std::string buffer_;
  bool record_time_ = false;
  bool record_tokens_ = false;
};

}  // namespace schedcli

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic pop
#endif
