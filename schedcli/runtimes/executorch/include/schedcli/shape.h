// schedcli's one view of which shape of ExecuTorch's batching interface is in scope
// (extension/llm/batching/{types,scheduler}.h), detected from the declarations themselves
// at compile time, never from a flag. The recorder, the `-p cxx:` shim and schedcli's test
// schedulers read and write a task's work through it, so each shape is handled here once.
//
// The shapes (docs/cxx.md, "Interface shapes"):
// - seed (4f95b1ff): the five calls; TaskId 32-bit; Input::tokens, a shared_ptr to the
//   whole backing vector of int64 tokens.
// - 64-bit TaskId (913315313a): the same calls and tokens; SamplingParams off Input.
// - experimental: max_prefill_chunk_size() on the interface, ET_EXPERIMENTAL on it.
// - payload (152bb8a7): Input::payload, a variant of the token pointer (uint64 tokens) and
//   a PreparedInputPtr, an opaque prepared prompt that only says its size().
// Detected: `payload` versus `tokens` on Input; max_prefill_chunk_size() on the interface;
// the id and token widths from the typedefs. A Task that is not a struct with `tid`, or an
// Input with neither member, is another shape, refused with a message that says so.
// Header-only; C++17; builds with -fno-exceptions.

#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <executorch/extension/llm/batching/scheduler.h>

// The payload shape marks everything ET_EXPERIMENTAL, a [[deprecated]] attribute: our own
// uses of it must not warn (a -Werror build would fail on them).
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif

namespace schedcli {
namespace shape {

namespace et = ::executorch::extension::llm::batching;

template <class I, class = void>
struct has_payload : std::false_type {};
template <class I>
struct has_payload<I, std::void_t<decltype(std::declval<I&>().payload)>> : std::true_type {};

template <class I, class = void>
struct has_tokens : std::false_type {};
template <class I>
struct has_tokens<I, std::void_t<decltype(std::declval<I&>().tokens)>> : std::true_type {};

template <class T, class = void>
struct is_plain_task : std::false_type {};
template <class T>
struct is_plain_task<T, std::void_t<decltype(std::declval<T&>().tid),
                                    decltype(std::declval<T&>().input)>> : std::true_type {};

// Whether the interface S declares max_prefill_chunk_size() (the experimental shape on).
template <class S, class = void>
struct declares_chunk_limit : std::false_type {};
template <class S>
struct declares_chunk_limit<S, std::void_t<decltype(&S::max_prefill_chunk_size)>>
    : std::true_type {};

static_assert(is_plain_task<et::Task>::value,
              "schedcli: this ExecuTorch's batching::Task is not a struct with tid and input "
              "(a variant of preparation and execution tasks?): an interface shape schedcli "
              "does not support; docs/cxx.md lists the supported ones");
static_assert(has_payload<et::Input>::value || has_tokens<et::Input>::value,
              "schedcli: this ExecuTorch's batching::Input has neither `tokens` nor `payload`: "
              "an interface shape schedcli does not support; docs/cxx.md lists the supported "
              "ones");

constexpr bool kPayload = has_payload<et::Input>::value;
constexpr bool kChunkLimit = declares_chunk_limit<et::Scheduler>::value;

using Tokens = std::shared_ptr<const std::vector<et::Token>>;

// The input's token pointer, or null when it carries none (or an opaque prepared input).
template <class I>
const Tokens* tokens_of(const I& in) {
  if constexpr (has_payload<I>::value) {
    return std::get_if<Tokens>(&in.payload);
  } else {
    return &in.tokens;
  }
}

template <class I>
void set_tokens(I& in, Tokens tokens) {
  if constexpr (has_payload<I>::value) {
    in.payload = std::move(tokens);
  } else {
    in.tokens = std::move(tokens);
  }
}

// Whether the input holds an opaque prepared input (only the payload shape has them), and
// its size() (positions of the whole backing) through `size`.
template <class I>
bool prepared_of(const I& in, std::size_t& size) {
  if constexpr (has_payload<I>::value) {
    const auto* p = std::get_if<1>(&in.payload);
    if (p == nullptr || *p == nullptr) return false;
    size = (*p)->size();
    return true;
  } else {
    (void)in;
    (void)size;
    return false;
  }
}

// Calls f with the pointer the input's work is held by (tokens, or a prepared input), as
// it is: its owner is the task's identity (a copy of the pointer shares it).
template <class I, class F>
decltype(auto) with_owner(const I& in, F&& f) {
  if constexpr (has_payload<I>::value) {
    return std::visit([&](const auto& p) -> decltype(auto) { return f(p); }, in.payload);
  } else {
    return f(in.tokens);
  }
}

// A stand-in prepared input of `n` positions: what a trace's opaque task (`prepared`) is
// handed to a C++ scheduler as, under the payload shape. It declares every member later
// PreparedInputs ask for (kind, size, last_prompt_token, suffix), without `override`, so
// each overrides where the checkout's class declares it and is unused where not.
template <class Base>
class Opaque : public Base {
 public:
  explicit Opaque(std::size_t n) : n_(n) {}
  const void* kind() const { return &kKind; }
  std::size_t size() const { return n_; }
  et::Token last_prompt_token() const { return et::Token{}; }
  std::shared_ptr<const Base> suffix(std::size_t start) const {
    if (start >= n_) return nullptr;
    return std::make_shared<const Opaque>(n_ - start);
  }

 private:
  static inline char kKind = 0;  // one address per process: this type's kind()
  std::size_t n_;
};

// Makes `in` hold a stand-in prepared input of `n` positions; false where the interface
// has no prepared inputs (a shape before the payload one).
template <class I>
bool set_prepared(I& in, std::size_t n) {
  if constexpr (has_payload<I>::value) {
    using Ptr = std::variant_alternative_t<1, std::decay_t<decltype(in.payload)>>;
    using Base = typename Ptr::element_type;
    in.payload = Ptr(std::make_shared<const Opaque<std::remove_const_t<Base>>>(n));
    return true;
  } else {
    (void)in;
    (void)n;
    return false;
  }
}

}  // namespace shape
}  // namespace schedcli

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic pop
#endif
