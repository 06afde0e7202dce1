// schedcli's stand-in for ExecuTorch's extension/llm/batching/metrics.h of the runner's
// time (pytorch/executorch 4c33c5e69931dacdaa73fa1d24a2ed24f4a542b8, the version beside the
// payload shape's runner.cpp), written from reading it: a generation's timeline and counts,
// the engine's totals, and the two reports metrics.cpp formats. The derived figures
// upstream computes from these fields are left out: schedcli reads none of them.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>

#include <executorch/extension/llm/batching/types.h>
#include <executorch/runtime/platform/compiler.h>  // ET_EXPERIMENTAL

namespace executorch {
namespace extension {
namespace llm {
namespace batching {

using MetricsClock = std::chrono::steady_clock;
using MetricsTime = MetricsClock::time_point;

ET_EXPERIMENTAL inline std::int64_t us_between(MetricsTime from, MetricsTime to) {
  return std::chrono::duration_cast<std::chrono::microseconds>(to - from).count();
}

// A default time_point is an event that never happened.
ET_EXPERIMENTAL inline bool stamped(MetricsTime t) { return t.time_since_epoch().count() != 0; }

struct ET_EXPERIMENTAL GenerationMetrics {
  SessionId sid = 0;
  MetricsTime t_submit{};
  MetricsTime t_first_step{};
  MetricsTime t_first_token{};
  MetricsTime t_end{};
  std::int64_t n_prompt_tokens = 0;
  std::int64_t n_prefilled_tokens = 0;
  std::int64_t n_generated_tokens = 0;
  std::int32_t n_prefill_steps = 0;
  std::int32_t n_decode_steps = 0;
  std::int64_t itl_count = 0;
  std::int64_t itl_sum_us = 0;
  std::int64_t itl_min_us = std::numeric_limits<std::int64_t>::max();
  std::int64_t itl_max_us = 0;

  std::int64_t ttft_us() const {
    return stamped(t_submit) && stamped(t_first_token) ? us_between(t_submit, t_first_token) : 0;
  }
  std::int64_t e2e_us() const {
    return stamped(t_submit) && stamped(t_end) ? us_between(t_submit, t_end) : 0;
  }
};

struct ET_EXPERIMENTAL EngineMetrics {
  std::uint64_t steps = 0;
  std::uint64_t steps_failed = 0;
  std::uint64_t decode_sessions_total = 0;
  std::uint64_t prefill_sessions_total = 0;
  std::uint64_t ready_total = 0;
  std::int64_t step_latency_sum_us = 0;
  std::int64_t step_latency_max_us = 0;
  std::uint64_t decode_tokens_total = 0;
  std::uint64_t prefill_tokens_total = 0;
  std::uint64_t decode_only_tokens = 0;
  std::uint64_t steps_with_decode = 0;
  std::uint64_t steps_with_prefill = 0;
  std::int64_t decode_only_latency_sum_us = 0;
  std::int64_t mixed_latency_sum_us = 0;
  std::int64_t prefill_only_latency_sum_us = 0;
  std::int64_t context_sum = 0;
  std::int64_t context_max = 0;
  std::int64_t decode_session_time_sum_us = 0;
  std::uint64_t sessions_refused = 0;
  std::uint64_t peak_concurrent_generations = 0;
  std::uint64_t generations_started = 0;
  std::uint64_t generations_completed = 0;
  std::uint64_t finished_stop_token = 0;
  std::uint64_t finished_token_limit = 0;
  std::uint64_t finished_cancelled = 0;
  std::uint64_t finished_failed = 0;
  std::uint64_t ttft_count = 0;
  std::int64_t ttft_sum_us = 0;
  std::int64_t ttft_min_us = std::numeric_limits<std::int64_t>::max();
  std::int64_t ttft_max_us = 0;
  std::int64_t total_prompt_tokens = 0;
  std::int64_t total_generated_tokens = 0;
  MetricsTime t_first_step{};
  MetricsTime t_last_step{};
  std::int64_t init_us = 0;
};

ET_EXPERIMENTAL std::string format_report(const GenerationMetrics& m);
ET_EXPERIMENTAL std::string format_report(const EngineMetrics& m);

}  // namespace batching
}  // namespace llm
}  // namespace extension
}  // namespace executorch
