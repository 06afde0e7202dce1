// schedcli's own metrics.cpp for the stand-in checkout (not ExecuTorch's): the two reports
// metrics.h declares, as one line each. ExecuTorch's formats them for people at length.
#include <executorch/extension/llm/batching/metrics.h>

#include <string>

namespace executorch {
namespace extension {
namespace llm {
namespace batching {

std::string format_report(const GenerationMetrics& m) {
  return "session " + std::to_string(m.sid) + ": " + std::to_string(m.n_prompt_tokens) +
         " prompt + " + std::to_string(m.n_generated_tokens) + " generated tokens\n";
}

std::string format_report(const EngineMetrics& m) {
  return "engine: " + std::to_string(m.steps) + " steps, " +
         std::to_string(m.generations_completed) + " of " +
         std::to_string(m.generations_started) + " generations\n";
}

}  // namespace batching
}  // namespace llm
}  // namespace extension
}  // namespace executorch
