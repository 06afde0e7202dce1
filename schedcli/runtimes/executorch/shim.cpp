// schedcli's boundary to a C++ executorch::extension::llm::batching::Scheduler: a CPython
// extension module (docs/cxx.md). Built per policy by schedcli.runtimes.executorch: the
// generated source before this file defines SCHEDCLI_MODULE (the module's name) and
// SCHEDCLI_INIT (its PyInit_ function), includes the policy's header, and defines
// schedcli_factory(const std::size_t* params), the spec's factory call.
//
// Invariants:
// - Every call into the scheduler runs with the GIL held, so at most one thread is inside
//   the scheduler at a time, and the process-wide guard below belongs to that thread.
// - A crash signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) raised inside a call jumps
//   back to the call's entry, which raises PolicyAborted; the scheduler is abandoned from
//   then on (never called, never destroyed: its memory and locks are in an unknown state).
// - A stop signal (SIGINT, SIGTERM) inside a call is passed to Python's own handler at
//   once; if the call has not returned GRACE_MS later it is abandoned the same way, and the
//   stop is raised in Python as if the call had returned.
// - A stop signal the scheduler sends itself (kill(getpid(), ...), raise) is not the user's:
//   the call is abandoned at once and Python hears that the scheduler raised it.
// - exit, _exit, _Exit and quick_exit, called by the scheduler's code inside a call, come
//   back to the call's entry the same way (the build links them to the wrappers below, with
//   -Wl,--wrap): the scheduler cannot end the process from a call. What the wrappers cannot
//   see (a raw exit_group system call, SIGKILL) ends the process; Python's supervisor
//   (runtimes/supervisor.py) then reads the call in progress from `g_watch`.
// - Tasks go in with offset 0, position as the trace gives it (-1 for none) and, when the
//   trace has tokens, the slice's own tokens; an opaque task (`prepared`: backing size and
//   offset) with that offset, its base position (position - offset) and, under the payload
//   shape, a stand-in PreparedInput of that size (shape.h). What comes back is matched by tid to the
//   Python tasks submitted (Handle::queued), which are what Python gets, and must carry
//   every field as it went in (Entry::sent): a scheduler passes its tasks through.

#include <Python.h>
#include <structmember.h>

#include <pthread.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <csetjmp>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include <schedcli/shape.h>  // which interface shape: detected there, handled there once

#pragma GCC diagnostic push
// Later upstream marks the interface ET_EXPERIMENTAL, a [[deprecated]] attribute.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace schedcli_shim {

namespace et = ::executorch::extension::llm::batching;
using Sched = et::Scheduler;

constexpr long GRACE_MS = 500;
constexpr int STOPPED = 1000;  // sigsetjmp's value for a stop: STOPPED + signum
constexpr int RAISED = 2000;   // ... for a stop signal the scheduler sent itself: RAISED + signum
constexpr int ENDED = 3000;    // ... for an exit function called inside a call: ENDED + kExits index
const char* const kExits[] = {"exit", "_exit", "_Exit", "quick_exit"};

namespace shape = ::schedcli::shape;
template <class T>
using HasChunkLimit = shape::declares_chunk_limit<T>;

// A task the scheduler holds: the Python task (a strong reference) and the task as it
// went in, which what comes back must equal field for field.
struct Entry {
  PyObject* task = nullptr;
  et::Task sent{};
};

// A task handed back, remembered for a while: a tid handed back again is named with the
// call that handed it back first.
struct Returned {
  et::TaskId tid;
  const char* call;
  std::uint64_t serial;  // which call of the scheduler's (1-based)
  std::weak_ptr<const void> owner;  // its work pointer's owner: the task's identity
};
constexpr std::size_t kRecent = 4096;

// The queued tasks by tid: a flat open-addressing table (linear probing; an erase shifts
// the probe run back, so there are no tombstones), so a task costs no allocation of its own.
// A slot is empty when its task is null. Capacity a power of two, at most half full.
class Queued {
 public:
  Entry* find(et::TaskId tid) {
    if (slots_.empty()) return nullptr;
    for (std::size_t i = home(tid);; i = (i + 1) & mask_) {
      Entry& e = slots_[i];
      if (e.task == nullptr) return nullptr;
      if (e.sent.tid == tid) return &e;
    }
  }

  // Holds `task` (the caller's reference passes to the table) under sent.tid; false, and
  // nothing held, when that tid is held already.
  bool insert(PyObject* task, et::Task&& sent) {
    if ((count_ + 1) * 2 > slots_.size()) grow();
    std::size_t i = home(sent.tid);
    for (; slots_[i].task != nullptr; i = (i + 1) & mask_) {
      if (slots_[i].sent.tid == sent.tid) return false;
    }
    slots_[i].task = task;
    slots_[i].sent = std::move(sent);
    ++count_;
    return true;
  }

  // Empties `e`'s slot (its task reference is the caller's now); `e` is invalid after.
  void erase(Entry* e) {
    std::size_t hole = static_cast<std::size_t>(e - slots_.data());
    for (std::size_t j = (hole + 1) & mask_; slots_[j].task != nullptr; j = (j + 1) & mask_) {
      const std::size_t k = home(slots_[j].sent.tid);
      // The entry at j stays when its home lies cyclically in (hole, j]: a probe from its
      // home reaches it without crossing the hole.
      const bool stays = hole <= j ? (hole < k && k <= j) : (hole < k || k <= j);
      if (stays) continue;
      slots_[hole] = std::move(slots_[j]);
      hole = j;
    }
    slots_[hole].task = nullptr;
    slots_[hole].sent = et::Task{};  // its pointers released
    --count_;
  }

  template <class F>
  void each(F&& f) {
    for (Entry& e : slots_) {
      if (e.task != nullptr) f(e);
    }
  }

 private:
  std::size_t home(et::TaskId tid) const {
    // Fibonacci hashing: consecutive tids spread over the table.
    return static_cast<std::size_t>((static_cast<std::uint64_t>(tid) * 0x9E3779B97F4A7C15ull) >>
                                    shift_);
  }

  void grow() {
    std::vector<Entry> old;
    old.swap(slots_);
    const std::size_t size = old.empty() ? 64 : old.size() * 2;
    slots_.resize(size);
    for (Entry& e : slots_) e.task = nullptr;
    mask_ = size - 1;
    shift_ = 64;
    for (std::size_t n = size; n > 1; n >>= 1) --shift_;
    for (Entry& e : old) {
      if (e.task == nullptr) continue;
      std::size_t i = home(e.sent.tid);
      while (slots_[i].task != nullptr) i = (i + 1) & mask_;
      slots_[i] = std::move(e);
    }
  }

  std::vector<Entry> slots_;
  std::size_t count_ = 0;
  std::size_t mask_ = 0;
  unsigned shift_ = 64;
};

// The scheduler, and the Python task behind each tid it holds: what it hands back is
// matched here by tid, so Python sees the very tasks it submitted.
struct Handle {
  std::shared_ptr<Sched> s;
  Queued queued;
  std::vector<Returned> recent;  // a ring of the last kRecent tasks handed back
  std::size_t next = 0;
  std::uint64_t calls = 0;  // calls that hand tasks back, so far
  std::vector<et::Task> sent;  // submit's buffer: the group as it went in
  bool abandoned = false;
};

inline std::shared_ptr<Sched> own(std::shared_ptr<Sched> p) { return p; }
template <class T>
std::shared_ptr<Sched> own(T* p) { return std::shared_ptr<Sched>(p); }

// --- submit's marks -------------------------------------------------------------------------
//
// A task without tokens goes in marked by a null token pointer sharing ownership of its
// submit's mark (its identity: see same_task). The marks' control blocks come from this
// pool of fixed-size blocks rather than from malloc: one is taken per submit and given back
// when the last copy of the pointer and the history's weak reference are gone, exactly when
// a malloc'd one would be freed, so a block is reused only when nothing refers to it (the
// identity checks rely on that). The blocks are dense, so the history releasing an old
// mark touches a line still in cache, and they never reach malloc's free lists. A spin
// lock, uncontended under the GIL: a scheduler may drop its copies on a thread of its own.
class MarkPool {
 public:
  static constexpr std::size_t kBlock = 32;
  static constexpr std::size_t kSlab = 512;  // blocks taken from the system at once

  void* take() {
    lock();
    if (head_ == nullptr) refill();
    Free* b = head_;
    head_ = b->next;
    busy_.clear(std::memory_order_release);
    return b;
  }

  void give(void* p) noexcept {
    lock();
    auto* b = static_cast<Free*>(p);
    b->next = head_;
    head_ = b;
    busy_.clear(std::memory_order_release);
  }

 private:
  struct Free {
    Free* next;
  };
  void lock() noexcept {
    while (busy_.test_and_set(std::memory_order_acquire)) {
    }
  }
  void refill() {  // kept for the process's life, as the blocks handed out may be
    auto* slab = static_cast<unsigned char*>(::operator new(kBlock * kSlab));
    for (std::size_t i = kSlab; i-- > 0;) {
      auto* b = reinterpret_cast<Free*>(slab + i * kBlock);
      b->next = head_;
      head_ = b;
    }
  }

  Free* head_ = nullptr;
  std::atomic_flag busy_ = ATOMIC_FLAG_INIT;
};
MarkPool g_marks;

// allocate_shared's allocator for a mark: its control block (one, of at most kBlock bytes)
// from g_marks.
template <class T>
struct MarkAlloc {
  using value_type = T;
  MarkAlloc() noexcept = default;
  template <class U>
  MarkAlloc(const MarkAlloc<U>&) noexcept {}
  T* allocate(std::size_t n) {
    static_assert(sizeof(T) <= MarkPool::kBlock && alignof(T) <= alignof(void*) * 2,
                  "a mark's control block fits a pool block");
    if (n != 1) return static_cast<T*>(::operator new(n * sizeof(T)));
    return static_cast<T*>(g_marks.take());
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n != 1) {
      ::operator delete(p);
      return;
    }
    g_marks.give(p);
  }
  template <class U>
  bool operator==(const MarkAlloc<U>&) const noexcept {
    return true;
  }
  template <class U>
  bool operator!=(const MarkAlloc<U>&) const noexcept {
    return false;
  }
};

// --- the guard ----------------------------------------------------------------------------

sigjmp_buf g_jump;
volatile sig_atomic_t g_in_call = 0;
volatile sig_atomic_t g_stop = 0;
int g_status = 0;  // the status an exit function was called with
// Shared with the supervisor process, when there is one: the call in progress (its index in
// kCalls, 0 for none), so that a process ended from inside a call is named as such.
unsigned char g_no_watch = 0;
volatile unsigned char* g_watch = &g_no_watch;
pthread_t g_thread;
std::atomic<pthread_t> g_heap_owner{};  // the heap's lists' thread (see Heap)
struct sigaction g_old[NSIG];
const int kCrash[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
const int kStop[] = {SIGINT, SIGTERM};

bool ours() { return g_in_call && pthread_equal(pthread_self(), g_thread); }

void chain(int sig, siginfo_t* info, void* ctx) {
  const struct sigaction& old = g_old[sig];
  if (old.sa_flags & SA_SIGINFO) {
    old.sa_sigaction(sig, info, ctx);
  } else if (old.sa_handler != SIG_IGN && old.sa_handler != SIG_DFL) {
    old.sa_handler(sig);
  } else if (old.sa_handler == SIG_DFL) {
    sigaction(sig, &old, nullptr);
    raise(sig);
  }
}

void arm(long ms) {
  itimerval t{};
  t.it_value.tv_sec = ms / 1000;
  t.it_value.tv_usec = (ms % 1000) * 1000;
  setitimer(ITIMER_REAL, &t, nullptr);
}

extern "C" void on_crash(int sig, siginfo_t* info, void*) {
  if (ours()) {
    g_in_call = 0;
    siglongjmp(g_jump, sig);
  }
  // Not raised inside a call: the handler before ours takes it, re-raised if it was sent
  // (a fault repeats by itself when the faulting instruction runs again).
  sigaction(sig, &g_old[sig], nullptr);
  if (info == nullptr || info->si_code <= 0) {
    raise(sig);
  }
}

// Sent by this process (kill, raise, sigqueue) while a call runs on this thread: the
// scheduler's own doing, not a user's stop.
bool self_sent(const siginfo_t* info) {
  return info != nullptr && info->si_pid == getpid() &&
         (info->si_code == SI_USER || info->si_code == SI_TKILL || info->si_code == SI_QUEUE);
}

extern "C" void on_stop(int sig, siginfo_t* info, void* ctx) {
  if (ours() && self_sent(info)) {
    g_in_call = 0;
    siglongjmp(g_jump, RAISED + sig);
  }
  chain(sig, info, ctx);
  if (ours() && g_stop == 0) {
    g_stop = sig;
    arm(GRACE_MS);
  }
}

extern "C" void on_alarm(int sig, siginfo_t* info, void* ctx) {
  if (ours() && g_stop != 0) {
    g_in_call = 0;
    siglongjmp(g_jump, STOPPED + g_stop);
  }
  chain(sig, info, ctx);
}

void install(int sig, void (*fn)(int, siginfo_t*, void*)) {
  struct sigaction now {};
  sigaction(sig, nullptr, &now);
  if ((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == fn) {
    return;
  }
  struct sigaction mine {};
  mine.sa_sigaction = fn;
  sigemptyset(&mine.sa_mask);
  // NODEFER: a jump out of the handler leaves the signal unblocked (sigsetjmp saves no
  // mask, which would cost a system call per call).
  mine.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  g_old[sig] = now;
  sigaction(sig, &mine, nullptr);
}

void install_all() {
  for (int sig : kCrash) install(sig, on_crash);
  for (int sig : kStop) install(sig, on_stop);
  install(SIGALRM, on_alarm);
  // A stack overflow can only be caught on a stack of its own.
  stack_t now{};
  if (sigaltstack(nullptr, &now) == 0 && (now.ss_flags & SS_DISABLE)) {
    stack_t alt{};
    alt.ss_size = 1 << 16;
    alt.ss_sp = std::malloc(alt.ss_size);  // kept for the thread's life
    if (alt.ss_sp != nullptr) sigaltstack(&alt, nullptr);
  }
}

[[noreturn]] void ended(int how, int status) {
  g_status = status;
  g_in_call = 0;
  siglongjmp(g_jump, ENDED + how);
}

PyObject* g_aborted = nullptr;  // schedcli.model.errors.PolicyAborted
PyObject* g_unfit = nullptr;    // schedcli.model.errors.UnfitTask

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV (a segmentation fault)";
    case SIGBUS: return "SIGBUS (a bus error)";
    case SIGFPE: return "SIGFPE (an arithmetic fault)";
    case SIGILL: return "SIGILL (an illegal instruction, e.g. __builtin_trap)";
    case SIGABRT: return "SIGABRT (abort(), e.g. a failed assert)";
    default: return "a signal";
  }
}

// The call at `what` did not return: the scheduler is abandoned, and Python hears why.
PyObject* abandoned(Handle* h, int code, const char* what) {
  h->abandoned = true;
  g_in_call = 0;
  sigset_t unblock;
  sigemptyset(&unblock);
  for (int sig : kCrash) sigaddset(&unblock, sig);
  for (int sig : kStop) sigaddset(&unblock, sig);
  sigaddset(&unblock, SIGALRM);
  sigprocmask(SIG_UNBLOCK, &unblock, nullptr);
  *g_watch = 0;
  if (code >= ENDED) {
    PyErr_Format(g_aborted,
                 "the C++ scheduler called %s(%d) in %s: a scheduler may not end the process "
                 "(the call was abandoned)",
                 kExits[code - ENDED], g_status, what);
    return nullptr;
  }
  if (code >= RAISED) {
    PyErr_Format(g_aborted,
                 "the C++ scheduler raised signal %d (%s) on itself in %s: not a stop from "
                 "outside (the call was abandoned)",
                 code - RAISED, code - RAISED == SIGINT ? "SIGINT" : "SIGTERM", what);
    return nullptr;
  }
  if (code > STOPPED) {
    g_stop = 0;
    arm(0);
    // Python's handler saw the signal when it came: running it raises the stop.
    if (PyErr_CheckSignals() < 0) return nullptr;
    PyErr_Format(g_aborted, "%s did not return after a stop signal, and was abandoned", what);
    return nullptr;
  }
  PyErr_Format(g_aborted, "the C++ scheduler died (in %s) with signal %d, %s", what, code,
               signal_name(code));
  return nullptr;
}

// The calls, as the supervisor names them (g_watch holds an index; 0 is none): the same
// names, in the same order, as CALLS in supervisor.py.
const char* const kCalls[] = {"", "its factory", "submit", "get_work", "has_work", "cancel",
                              "clear", "max_prefill_chunk_size"};

enum Call : unsigned char { FACTORY = 1, SUBMIT, GET_WORK, HAS_WORK, CANCEL, CLEAR, CHUNK };

void enter(unsigned char call) {
  g_thread = pthread_self();
  g_heap_owner.store(g_thread, std::memory_order_relaxed);
  *g_watch = call;
  g_in_call = 1;
}

void leave() {
  g_in_call = 0;
  *g_watch = 0;
  if (g_stop != 0) {  // the call returned within the grace: Python raises the stop
    arm(0);
    g_stop = 0;
  }
}

// The process's own operator new(size_t) and sized operator delete, as the wrappers at the
// end of this file reach them (-Wl,--wrap).
extern "C" void* __real__Znwm(std::size_t n);
extern "C" void __real__ZdlPvm(void* p, std::size_t n) noexcept;

// --- the extension's own heap ------------------------------------------------------------
//
// What this library allocates through operator new (the scheduler's code, compiled in,
// included: ExecuTorch's tasks, map nodes and deques, the vector its submit takes by value)
// goes through the wrappers at the end of this file: the build links this library's own
// references to operator new(size_t) and the sized operator delete to them, so no
// ExecuTorch source changes and no other library's calls come here. A freed block of a
// small size (a multiple of kGrain, up to kLargest) waits on a list of its exact size for
// the next request of that size, up to kBudget bytes in all; any other block goes back to
// the process's operator delete at once. A scheduler frees a batch's tasks at once, more
// than glibc's per-thread cache keeps: they come back here, past glibc's slower paths.
// Invariants:
// - Every block is one the process's operator new made for exactly the size of its list,
//   so a block freed here, or one freed by another library's delete, is released as it
//   would have been without this heap.
// - The lists belong to one thread, the one making calls (set at each call's entry, under
//   the GIL); another thread (a scheduler's own) reaches the process's operator new and
//   delete directly, so no list is touched by two threads at once.
// - A call abandoned half-way through a list operation (a stop's grace ran out) at worst
//   loses a block: a list is one pointer, updated by one store.
class Heap {
 public:
  static constexpr std::size_t kGrain = 8;
  static constexpr std::size_t kLargest = 1024;
  static constexpr std::size_t kBudget = std::size_t{4} << 20;

  void* take(std::size_t n) {
    if (n % kGrain == 0 && n != 0 && n <= kLargest && mine()) {
      Free*& head = free_[n / kGrain];
      if (Free* b = head) {
        head = b->next;
        kept_ -= n;
        return b;
      }
    }
    return __real__Znwm(n);  // or the new-handler, then bad_alloc, as the standard says
  }

  void give(void* p, std::size_t n) noexcept {
    if (p != nullptr && n % kGrain == 0 && n != 0 && n <= kLargest && kept_ + n <= kBudget &&
        mine()) {
      auto* b = static_cast<Free*>(p);
      Free*& head = free_[n / kGrain];
      b->next = head;
      head = b;
      kept_ += n;
      return;
    }
    __real__ZdlPvm(p, n);
  }

  std::size_t kept() const noexcept { return kept_; }  // bytes waiting on the lists

 private:
  struct Free {
    Free* next;
  };
  static bool mine() noexcept {
    return pthread_equal(pthread_self(), g_heap_owner.load(std::memory_order_relaxed)) != 0;
  }

  Free* free_[kLargest / kGrain + 1] = {};
  std::size_t kept_ = 0;
};
Heap g_heap;  // constant-initialized: usable from the first allocation, before any constructor

// --- conversions ----------------------------------------------------------------------------

template <class Int>
bool to_int(PyObject* value, Int& out, const char* field, const char* type_name) {
  if (!PyLong_CheckExact(value)) {
    PyErr_Format(g_unfit, "%s %R is not an integer, and a C++ %s is", field, value, type_name);
    return false;
  }
  using Limits = std::numeric_limits<Int>;
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
  const bool fits =
      overflow == 0 &&
      (v < 0 ? Limits::is_signed && v >= static_cast<long long>(Limits::min())
             : static_cast<unsigned long long>(v) <= static_cast<unsigned long long>(Limits::max()));
  if (!fits) {
    PyErr_Format(g_unfit, "%s %R does not fit the interface's %s (%lld..%llu)", field, value,
                 type_name, static_cast<long long>(Limits::min()),
                 static_cast<unsigned long long>(Limits::max()));
    return false;
  }
  out = static_cast<Int>(v);
  return true;
}

enum Field { TID, SID, SIZE, KIND, OUTPUT, POSITION, TOKENS, PREPARED, FIELDS };
const char* const kFieldNames[FIELDS] = {"tid",      "sid",    "size",    "kind",
                                         "produce_output", "position", "tokens", "prepared"};
PyObject* g_names[FIELDS];
PyObject* g_cancelled_name = nullptr;
PyObject* g_decode = nullptr;  // TaskKind.DECODE

// A task's fields are read through the descriptors its type declares (a compiled class's
// getsets, a __slots__ class's members), looked up once per type: a generic getattr
// would search the type's MRO for each of the seven, for every task.
struct Reader {
  PyTypeObject* type = nullptr;
  PyObject* descr[FIELDS] = {};
};
Reader g_reader;

PyObject* read(PyObject* obj, int f) {
  PyObject* d = Py_TYPE(obj) == g_reader.type ? g_reader.descr[f] : nullptr;
  if (d != nullptr) {
    if (Py_IS_TYPE(d, &PyGetSetDescr_Type)) {
      PyGetSetDef* def = reinterpret_cast<PyGetSetDescrObject*>(d)->d_getset;
      return def->get(obj, def->closure);
    }
    return PyMember_GetOne(reinterpret_cast<const char*>(obj),
                           reinterpret_cast<PyMemberDescrObject*>(d)->d_member);
  }
  return PyObject_GetAttr(obj, g_names[f]);
}

void learn(PyTypeObject* type) {
  if (g_reader.type == type) return;
  Reader r;
  r.type = type;
  for (int f = 0; f < FIELDS; ++f) {
    PyObject* d = _PyType_Lookup(type, g_names[f]);  // borrowed, kept alive by the type
    const bool plain = d != nullptr && (Py_IS_TYPE(d, &PyGetSetDescr_Type) ||
                                        Py_IS_TYPE(d, &PyMemberDescr_Type));
    r.descr[f] = plain ? d : nullptr;
  }
  Py_INCREF(type);
  Py_XDECREF(reinterpret_cast<PyObject*>(g_reader.type));
  g_reader = r;
}

struct Ref {  // a new reference, released at scope exit
  PyObject* p;
  explicit Ref(PyObject* o) : p(o) {}
  ~Ref() { Py_XDECREF(p); }
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
};

bool to_task(PyObject* obj, et::Task& t) {
  learn(Py_TYPE(obj));
  Ref tid(read(obj, TID));
  Ref sid(read(obj, SID));
  Ref size(read(obj, SIZE));
  Ref kind(read(obj, KIND));
  Ref output(read(obj, OUTPUT));
  Ref position(read(obj, POSITION));
  Ref tokens(read(obj, TOKENS));
  Ref prepared(read(obj, PREPARED));
  if (!tid.p || !sid.p || !size.p || !kind.p || !output.p || !position.p || !tokens.p ||
      !prepared.p) {
    return false;
  }
  if (!to_int(tid.p, t.tid, "tid", "TaskId") || !to_int(sid.p, t.input.sid, "sid", "SessionId")) {
    return false;
  }
  unsigned long long n = PyLong_AsUnsignedLongLong(size.p);
  if (PyErr_Occurred()) return false;
  t.cancelled = false;
  t.is_decode = kind.p == g_decode;
  t.input.produce_output = output.p == Py_True;
  t.input.offset = 0;
  t.input.size = static_cast<std::size_t>(n);
  // An opaque task's (backing size, offset): the slice is [offset, offset + size) of a
  // backing whose base position is position - offset, the Position that crosses.
  std::size_t backing = 0;
  const bool opaque = tokens.p == Py_None && prepared.p != Py_None;
  if (opaque) {
    if (!PyTuple_CheckExact(prepared.p) || PyTuple_GET_SIZE(prepared.p) != 2) {
      PyErr_SetString(PyExc_TypeError, "a task's prepared is a (size, offset) tuple");
      return false;
    }
    if (!to_int(PyTuple_GET_ITEM(prepared.p, 0), backing, "prepared.size", "std::size_t") ||
        !to_int(PyTuple_GET_ITEM(prepared.p, 1), t.input.offset, "prepared.offset",
                "std::size_t")) {
      return false;
    }
  }
  if (position.p == Py_None) {
    t.input.position = -1;
  } else if (opaque) {
    Ref base(PyNumber_Subtract(position.p, PyTuple_GET_ITEM(prepared.p, 1)));
    if (!base.p || !to_int(base.p, t.input.position, "position - prepared.offset", "Position")) {
      return false;
    }
  } else if (!to_int(position.p, t.input.position, "position", "Position")) {
    return false;
  }
  if (tokens.p != Py_None) {
    auto held = std::make_shared<std::vector<et::Token>>();
    const Py_ssize_t len = PyList_GET_SIZE(tokens.p);
    held->reserve(static_cast<std::size_t>(len));
    for (Py_ssize_t i = 0; i < len; ++i) {
      et::Token token;
      if (!to_int(PyList_GET_ITEM(tokens.p, i), token, "token", "Token")) return false;
      held->push_back(token);
    }
    shape::set_tokens(t.input, std::move(held));
  } else if (opaque) {
    shape::set_prepared(t.input, backing);
  }
  return true;
}

using Tokens = shape::Tokens;

// The first field of `got` that differs from `sent` (the task as it went in): its name and
// both values, written to `out`; false when every field is as it went in.
template <class T>
void show(char* out, std::size_t n, const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    std::snprintf(out, n, "%s", v ? "true" : "false");
  } else if constexpr (std::is_signed_v<T>) {
    std::snprintf(out, n, "%lld", static_cast<long long>(v));
  } else {
    std::snprintf(out, n, "%llu", static_cast<unsigned long long>(v));
  }
}

// A task's token slice, its first few tokens: "none", "[1, 2, 3]", "[1, 2, 3, 4, ...]".
void show_tokens(char* out, std::size_t n, const et::Input& in) {
  const Tokens* held = shape::tokens_of(in);
  if (held == nullptr || !*held) {
    std::snprintf(out, n, "none");
    return;
  }
  const std::vector<et::Token>& tokens = **held;
  std::size_t used = static_cast<std::size_t>(std::snprintf(out, n, "["));
  for (std::size_t i = 0; i < in.size && used < n; ++i) {
    const std::size_t at = in.offset + i;
    const char* sep = i ? ", " : "";
    if (i == 4 || at >= tokens.size()) {
      used += static_cast<std::size_t>(
          std::snprintf(out + used, n - used, "%s%s", sep, i == 4 ? "..." : "out of range"));
      break;
    }
    used += static_cast<std::size_t>(std::snprintf(out + used, n - used, "%s%lld", sep,
                                                   static_cast<long long>(tokens[at])));
  }
  if (used < n) std::snprintf(out + used, n - used, "]");
}

// Whether `a` carries `b`'s work: the same token slice, or an opaque prepared input of the
// same size (the very one, or a stand-in for it: a scheduler cannot see inside it).
bool same_tokens(const et::Input& a, const et::Input& b) {
  std::size_t pa = 0, pb = 0;
  const bool opaque_a = shape::prepared_of(a, pa), opaque_b = shape::prepared_of(b, pb);
  if (opaque_a || opaque_b) return opaque_a && opaque_b && pa == pb;
  const Tokens* ta = shape::tokens_of(a);
  const Tokens* tb = shape::tokens_of(b);
  const bool none_a = ta == nullptr || !*ta, none_b = tb == nullptr || !*tb;
  if (none_a || none_b) return none_a && none_b;
  if (*ta == *tb) return true;
  const std::vector<et::Token>& x = **ta;
  const std::vector<et::Token>& y = **tb;
  const std::size_t end = b.offset + b.size;
  if (x.size() < end || y.size() < end) return false;
  for (std::size_t i = b.offset; i < end; ++i) {
    if (x[i] != y[i]) return false;
  }
  return true;
}

// A payload-shape task's work: "tokens [1, 2]", "no tokens", "a prepared input of 512
// positions".
void show_work(char* out, std::size_t n, const et::Input& in) {
  std::size_t backing = 0;
  if (shape::prepared_of(in, backing)) {
    std::snprintf(out, n, "a prepared input of %zu position%s", backing, backing == 1 ? "" : "s");
    return;
  }
  const Tokens* held = shape::tokens_of(in);
  if (held == nullptr || !*held) {
    std::snprintf(out, n, "no tokens");
    return;
  }
  const int used = std::snprintf(out, n, "tokens ");
  if (used > 0 && static_cast<std::size_t>(used) < n) {
    show_tokens(out + used, n - static_cast<std::size_t>(used), in);
  }
}

bool changed(const et::Task& got, const et::Task& sent, const char*& field, char* was,
             char* now, std::size_t n) {
#define SCHEDCLI_FIELD(name, expr)       \
  if (got.expr != sent.expr) {           \
    field = name;                        \
    show(was, n, sent.expr);             \
    show(now, n, got.expr);              \
    return true;                         \
  }
  SCHEDCLI_FIELD("sid", input.sid)
  SCHEDCLI_FIELD("size", input.size)
  if (got.is_decode != sent.is_decode) {
    field = "kind";
    std::snprintf(was, n, "%s", sent.is_decode ? "decode" : "prefill");
    std::snprintf(now, n, "%s", got.is_decode ? "decode" : "prefill");
    return true;
  }
  SCHEDCLI_FIELD("produce_output", input.produce_output)
  SCHEDCLI_FIELD("position", input.position)
  SCHEDCLI_FIELD("offset", input.offset)
#undef SCHEDCLI_FIELD
  if (!same_tokens(got.input, sent.input)) {
    if constexpr (shape::kPayload) {  // tokens or a prepared input: the payload differs
      field = "payload";
      show_work(was, n, sent.input);
      show_work(now, n, got.input);
    } else {
      field = "tokens";
      show_tokens(was, n, sent.input);
      show_tokens(now, n, got.input);
    }
    return true;
  }
  return false;
}

template <class A, class B>
bool same_owner(const A& a, const B& b) {
  return !a.owner_before(b) && !b.owner_before(a);
}

// The input's work pointer (tokens, or a prepared input) shares `a`'s owner.
template <class A>
bool owned_like(const A& a, const et::Input& in) {
  return shape::with_owner(in, [&](const auto& p) { return same_owner(a, p); });
}

bool same_owner_inputs(const et::Input& a, const et::Input& b) {
  return shape::with_owner(a, [&](const auto& p) { return owned_like(p, b); });
}

long owners(const et::Input& in) {
  return shape::with_owner(in, [](const auto& p) { return static_cast<long>(p.use_count()); });
}

std::weak_ptr<const void> owner_of(const et::Input& in) {
  return shape::with_owner(
      in, [](const auto& p) { return std::weak_ptr<const void>(p); });
}

// The task remembered as handed back before whose identity `got` carries, if any.
const Returned* earlier(const Handle* h, const et::Task& got) {
  for (const Returned& r : h->recent) {
    if (r.tid == got.tid && owned_like(r.owner, got.input)) return &r;
  }
  return nullptr;
}

// Whether `got`, its fields as `sent`'s, is that very task rather than another that had
// its tid: submit marks every task by its tokens pointer's owner. A pointer the scheduler
// copied keeps the owner; a vector it copied into a new pointer is a copy of the task too,
// unless that owner is an earlier task's; a pointer moved out or reset (no owner) is not.
bool same_task(const Handle* h, const et::Task& got, const et::Task& sent) {
  if (same_owner_inputs(got.input, sent.input)) return true;
  return owners(got.input) != 0 && earlier(h, got) == nullptr;
}

// `got`'s tid is queued, but what came back is another task that had that tid: one handed
// back or dropped before, which the scheduler kept; or one without its identity.
PyObject* stale(Handle* h, const et::Task& got, const char* what) {
  const Returned* last = earlier(h, got);
  const long long id = static_cast<long long>(got.tid);
  if (last == nullptr) {
    return PyErr_Format(g_aborted,
                        "the C++ scheduler returned from %s a task with tid %lld whose tokens (or "
                        "prepared input) pointer was moved out or reset: an earlier task with "
                        "that tid that it kept (not the one queued under that tid now), or the "
                        "task rebuilt; a "
                        "scheduler carries each task through, that pointer included (a "
                        "copy of it is fine)",
                        what, id);
  }
  const unsigned long long ago = h->calls - last->serial;
  return PyErr_Format(g_aborted,
                      "the C++ scheduler returned from %s an earlier task with tid %lld, not "
                      "the one queued under that tid now (its %s had returned that one, %llu "
                      "call%s before this one)",
                      what, id, last->call, ago, ago == 1 ? "" : "s");
}

// Why `tid`, handed back by this call (`what`), is not queued: handed back before (by which
// call), or never held.
PyObject* not_queued(Handle* h, et::TaskId tid, const char* what) {
  const Returned* first = nullptr;
  for (const Returned& r : h->recent) {
    if (r.tid == tid && (first == nullptr || r.serial > first->serial)) first = &r;
  }
  const long long id = static_cast<long long>(tid);
  if (first == nullptr) {
    return PyErr_Format(g_aborted,
                        "the C++ scheduler returned tid %lld, which is not queued: it was never "
                        "given, or was returned more than %zu tasks ago",
                        id, kRecent);
  }
  if (first->serial == h->calls) {
    return PyErr_Format(g_aborted, "the C++ scheduler returned tid %lld twice in one %s", id,
                        what);
  }
  const unsigned long long ago = h->calls - first->serial;
  return PyErr_Format(g_aborted,
                      "the C++ scheduler returned tid %lld twice: its %s had returned it "
                      "already, %llu call%s before this one, and it was not submitted again",
                      id, first->call, ago, ago == 1 ? "" : "s");
}

// Where the weak reference `w` keeps its control block, as a hint for a prefetch only:
// libstdc++ and libc++ both lay a weak_ptr out as {pointer, control block}, and a prefetch
// of a wrong address does nothing (it cannot fault).
const void* block_hint(const std::weak_ptr<const void>& w) {
  static_assert(sizeof(w) == 2 * sizeof(void*), "a weak_ptr is two pointers");
  const void* words[2];
  std::memcpy(words, reinterpret_cast<const unsigned char*>(&w), sizeof words);
  return words[1];
}

// The Python tasks behind what the scheduler handed back, taken out of `queued`;
// `dropped` marks them cancelled. A tid that is not queued, or a task that is not as it
// went in, breaks the contract.
PyObject* matched(Handle* h, const std::vector<et::Task>& tasks, const char* what, bool dropped) {
  ++h->calls;
  PyObject* out = PyList_New(static_cast<Py_ssize_t>(tasks.size()));
  if (out == nullptr) return nullptr;
  // Each task handed back pushes the oldest of the full history out, releasing its weak
  // reference: that control block was last touched thousands of tasks ago. Fetched now, the
  // releases below do not each wait on memory.
  if (h->recent.size() == kRecent) {
    const std::size_t ahead = tasks.size() < 64 ? tasks.size() : 64;
    for (std::size_t i = 0; i < ahead; ++i) {
      __builtin_prefetch(block_hint(h->recent[(h->next + i) % kRecent].owner), 1);
    }
  }
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    Entry* it = h->queued.find(tasks[i].tid);
    if (it == nullptr) {
      // What was matched so far is out of `queued`; the run ends here anyway.
      Py_DECREF(out);
      return not_queued(h, tasks[i].tid, what);
    }
    const char* field = nullptr;
    char was[160], now[160];
    if (changed(tasks[i], it->sent, field, was, now, sizeof was)) {
      Py_DECREF(out);
      return PyErr_Format(g_aborted,
                          "the C++ scheduler returned task %lld with %s %s, but it was "
                          "submitted with %s %s",
                          static_cast<long long>(tasks[i].tid), field, now, field, was);
    }
    if (!same_task(h, tasks[i], it->sent)) {  // every field alike, another task
      Py_DECREF(out);
      return stale(h, tasks[i], what);
    }
    PyObject* task = it->task;
    // Remembered before the entry goes: `it` is invalid after the erase.
    Returned back{tasks[i].tid, what, h->calls, owner_of(it->sent.input)};
    h->queued.erase(it);
    if (h->recent.size() < kRecent) {
      h->recent.push_back(std::move(back));
    } else {
      h->recent[h->next] = std::move(back);
      h->next = (h->next + 1) % kRecent;
    }
    if (dropped && PyObject_SetAttr(task, g_cancelled_name, Py_True) < 0) {
      Py_DECREF(task);
      Py_DECREF(out);
      return nullptr;
    }
    PyList_SET_ITEM(out, static_cast<Py_ssize_t>(i), task);  // the reference `queued` held
  }
  return out;
}

// --- the calls -------------------------------------------------------------------------------

const char* kCapsule = "schedcli.cxx.Scheduler";

Handle* handle(PyObject* capsule) {
  auto* h = static_cast<Handle*>(PyCapsule_GetPointer(capsule, kCapsule));
  if (h != nullptr && h->abandoned) {
    PyErr_SetString(g_aborted, "the C++ scheduler was abandoned after it died in a call");
    return nullptr;
  }
  return h;
}

extern "C" void release(PyObject* capsule) {
  auto* h = static_cast<Handle*>(PyCapsule_GetPointer(capsule, kCapsule));
  if (h == nullptr) return;
  if (h->abandoned) {
    new std::shared_ptr<Sched>(std::move(h->s));  // never destroyed: its state is unknown
    return;  // nor the tasks it may still point into
  }
  h->queued.each([](Entry& e) { Py_DECREF(e.task); });
  delete h;
}

// One call into the scheduler: sigsetjmp in this frame (a crash inside comes back here,
// and the call returns with the scheduler abandoned), then `work`.
template <class Work>
PyObject* guarded(Handle* h, Call call, Work&& work) {
  if (h == nullptr) return nullptr;
  const int code = sigsetjmp(g_jump, 0);
  if (code != 0) return abandoned(h, code, kCalls[call]);
  enter(call);
  PyObject* out = work();
  leave();
  return out;
}

__attribute__((noinline)) std::shared_ptr<Sched> make(const std::vector<std::size_t>& p) {
  return own(schedcli_factory(p.data()));
}

PyObject* create(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  std::vector<std::size_t> params;
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    params.push_back(static_cast<std::size_t>(PyLong_AsUnsignedLongLong(args[i])));
    if (PyErr_Occurred()) return nullptr;
  }
  install_all();
  auto* h = new Handle();
  const int code = sigsetjmp(g_jump, 0);
  if (code != 0) {
    return abandoned(h, code, "its factory");  // h is kept, like the scheduler
  }
  enter(FACTORY);
  h->s = make(params);
  leave();
  if (!h->s) {
    delete h;
    Py_RETURN_NONE;
  }
  return PyCapsule_New(h, kCapsule, release);
}

// The group (a list of tasks) submitted: True, False (refused), or null with the error.
PyObject* submit_list(Handle* h, PyObject* list) {
  const Py_ssize_t n = PyList_GET_SIZE(list);
  std::vector<et::Task> tasks(static_cast<std::size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!to_task(PyList_GET_ITEM(list, i), tasks[static_cast<std::size_t>(i)])) {
      return nullptr;
    }
  }
  // Each task goes in marked as this very task: its token slice or prepared input, or
  // (without either) a null token pointer sharing ownership of this submit's mark, which a
  // copy of the task keeps (one mark per submit, taken when a task needs it).
  std::shared_ptr<const void> mark;
  for (et::Task& t : tasks) {
    std::size_t backing = 0;
    const Tokens* held = shape::tokens_of(t.input);
    if (!shape::prepared_of(t.input, backing) && (held == nullptr || !*held)) {
      if (!mark) mark = std::allocate_shared<char>(MarkAlloc<char>{}, '\0');
      shape::set_tokens(t.input, Tokens(mark, nullptr));
    }
  }
  // As they went in (what comes back must match), in the handle's own buffer: one
  // allocation fewer per submit. Empty again before this returns.
  std::vector<et::Task>& sent = h->sent;
  sent.assign(tasks.begin(), tasks.end());
  PyObject* ok = guarded(h, SUBMIT, [&] { return PyBool_FromLong(h->s->submit(std::move(tasks))); });
  if (ok != Py_True) {  // refused, or died
    sent.clear();
    return ok;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* task = PyList_GET_ITEM(list, i);
    const et::TaskId id = sent[static_cast<std::size_t>(i)].tid;
    if (!h->queued.insert(task, std::move(sent[static_cast<std::size_t>(i)]))) {
      sent.clear();
      Py_DECREF(ok);
      return PyErr_Format(g_aborted, "submit accepted tid %lld, which was queued",
                          static_cast<long long>(id));
    }
    Py_INCREF(task);
  }
  sent.clear();
  return ok;
}

PyObject* submit(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyList_CheckExact(args[1])) {
    PyErr_SetString(PyExc_TypeError, "submit(scheduler, list of tasks)");
    return nullptr;
  }
  Handle* h = handle(args[0]);
  if (h == nullptr) return nullptr;
  return submit_list(h, args[1]);
}

PyObject* get_work(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Handle* h = nargs == 1 ? handle(args[0]) : nullptr;
  return guarded(h, GET_WORK, [h] { return matched(h, h->s->get_work(), "get_work", false); });
}

PyObject* has_work(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Handle* h = nargs == 1 ? handle(args[0]) : nullptr;
  return guarded(h, HAS_WORK, [h] { return PyBool_FromLong(h->s->has_work()); });
}

PyObject* cancel(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Handle* h = nargs == 2 ? handle(args[0]) : nullptr;
  et::SessionId sid;
  if (h == nullptr || !to_int(args[1], sid, "sid", "SessionId")) return nullptr;
  return guarded(h, CANCEL, [h, sid] { return matched(h, h->s->cancel(sid), "cancel", true); });
}

PyObject* clear(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Handle* h = nargs == 1 ? handle(args[0]) : nullptr;
  return guarded(h, CLEAR, [h] { return matched(h, h->s->clear(), "clear", true); });
}

template <class S = Sched>
std::size_t chunk_limit(const S& s) {
  if constexpr (HasChunkLimit<S>::value) {
    return s.max_prefill_chunk_size();
  } else {
    return 0;
  }
}

PyObject* max_prefill_chunk_size(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Handle* h = nargs == 1 ? handle(args[0]) : nullptr;
  if (h != nullptr && !HasChunkLimit<Sched>::value) Py_RETURN_NONE;
  return guarded(h, CHUNK,
                 [h] { return PyLong_FromSize_t(chunk_limit(*h->s)); });
}

// --- the calls, bound ---------------------------------------------------------------------
//
// One scheduler's call, bound to its handle: policy.py puts these on the policy instance as
// try_submit, has_work, get_work, cancel and clear, where they shadow the class's methods.
// The engine's call then reaches the C++ with no Python frame in between and no capsule
// lookup, and answers exactly as the class's methods would (which stay, as the reference:
// tests check the two agree).

enum Bind { B_TRY_SUBMIT, B_HAS_WORK, B_GET_WORK, B_CANCEL, B_CLEAR, BINDS };
const char* const kBindNames[BINDS] = {"try_submit", "has_work", "get_work", "cancel", "clear"};
const Py_ssize_t kBindArgs[BINDS] = {1, 0, 0, 1, 0};

PyObject* g_settle = nullptr;   // schedcli.model.task.settle_outputs
PyObject* g_refused = nullptr;  // try_submit's answer to a refused group

struct Bound {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* capsule;  // a strong reference: the handle lives while this does
  Handle* h;
  Bind which;
};

// settle_outputs for the common group, one task of the type the reader knows, done here
// as it does it (a task alone with produce_output None produces output); false, and
// nothing done, for any other group, which settle_outputs itself settles.
bool settled_alone(PyObject* list) {
  if (!PyList_CheckExact(list) || PyList_GET_SIZE(list) != 1) return false;
  PyObject* obj = PyList_GET_ITEM(list, 0);
  learn(Py_TYPE(obj));
  PyObject* d = g_reader.descr[OUTPUT];
  if (d == nullptr) return false;
  Ref output(read(obj, OUTPUT));
  if (output.p == nullptr) {
    PyErr_Clear();  // settle_outputs raises it again
    return false;
  }
  if (output.p != Py_None) return true;
  int failed;
  if (Py_IS_TYPE(d, &PyGetSetDescr_Type)) {
    PyGetSetDef* def = reinterpret_cast<PyGetSetDescrObject*>(d)->d_getset;
    failed = def->set == nullptr ? -1 : def->set(obj, Py_True, def->closure);
  } else {
    failed = PyMember_SetOne(reinterpret_cast<char*>(obj),
                             reinterpret_cast<PyMemberDescrObject*>(d)->d_member, Py_True);
  }
  if (failed != 0) {
    PyErr_Clear();
    return false;
  }
  return true;
}

PyObject* bound_call(PyObject* self, PyObject* const* args, std::size_t nargsf, PyObject* kwnames) {
  auto* b = reinterpret_cast<Bound*>(self);
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if ((kwnames != nullptr && PyTuple_GET_SIZE(kwnames) != 0) || nargs != kBindArgs[b->which]) {
    return PyErr_Format(PyExc_TypeError, "%s() takes %zd positional argument%s",
                        kBindNames[b->which], kBindArgs[b->which],
                        kBindArgs[b->which] == 1 ? "" : "s");
  }
  Handle* h = b->h;
  if (b->which == B_CANCEL && !PyLong_CheckExact(args[0])) {
    return PyList_New(0);  // no C++ session has this id: nothing of it can be queued
  }
  // In the order the class's methods do things: a group is settled before the handle is
  // looked at.
  Ref group(nullptr);
  if (b->which == B_TRY_SUBMIT) {
    // Any iterable, taken as a list; outputs settled; None when queued, else why not.
    group.p = PyList_Check(args[0]) ? Py_NewRef(args[0]) : PySequence_List(args[0]);
    if (group.p == nullptr) return nullptr;
    if (!settled_alone(group.p)) {
      Ref settled(PyObject_Vectorcall(g_settle, &group.p, 1, nullptr));
      if (settled.p == nullptr) return nullptr;
    }
  }
  if (h->abandoned) {
    PyErr_SetString(g_aborted, "the C++ scheduler was abandoned after it died in a call");
    return nullptr;
  }
  switch (b->which) {
    case B_TRY_SUBMIT: {
      PyObject* ok = submit_list(h, group.p);
      if (ok == nullptr) return nullptr;
      Py_DECREF(ok);
      return Py_NewRef(ok == Py_True ? Py_None : g_refused);
    }
    case B_HAS_WORK:
      return guarded(h, HAS_WORK, [h] { return PyBool_FromLong(h->s->has_work()); });
    case B_GET_WORK:
      return guarded(h, GET_WORK, [h] { return matched(h, h->s->get_work(), "get_work", false); });
    case B_CANCEL: {
      et::SessionId sid;
      if (!to_int(args[0], sid, "sid", "SessionId")) return nullptr;
      return guarded(h, CANCEL, [h, sid] { return matched(h, h->s->cancel(sid), "cancel", true); });
    }
    case B_CLEAR:
      return guarded(h, CLEAR, [h] { return matched(h, h->s->clear(), "clear", true); });
    default:
      break;
  }
  PyErr_SetString(PyExc_SystemError, "schedcli shim: an unknown bound call");
  return nullptr;
}

extern "C" void bound_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  Py_XDECREF(reinterpret_cast<Bound*>(self)->capsule);
  PyObject_Free(self);
  Py_DECREF(type);  // a heap type: each instance holds a reference to it
}

PyTypeObject* g_bound_type = nullptr;

PyMemberDef kBoundMembers[] = {
    {"__vectorcalloffset__", T_PYSSIZET, static_cast<Py_ssize_t>(offsetof(Bound, vectorcall)),
     READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr},
};

PyType_Slot kBoundSlots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(bound_dealloc)},
    {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
    {Py_tp_members, kBoundMembers},
    {0, nullptr},
};

PyType_Spec kBoundSpec = {SCHEDCLI_MODULE ".Bound", static_cast<int>(sizeof(Bound)), 0,
                          Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL, kBoundSlots};

// bind(scheduler): {name: callable} for the five calls.
PyObject* bind(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 1) {
    PyErr_SetString(PyExc_TypeError, "bind(scheduler)");
    return nullptr;
  }
  Handle* h = handle(args[0]);
  if (h == nullptr) return nullptr;
  Ref out(PyDict_New());
  if (out.p == nullptr) return nullptr;
  for (int i = 0; i < BINDS; ++i) {
    Bound* b = PyObject_New(Bound, g_bound_type);
    if (b == nullptr) return nullptr;
    b->vectorcall = bound_call;
    b->capsule = Py_NewRef(args[0]);
    b->h = h;
    b->which = static_cast<Bind>(i);
    Ref call(reinterpret_cast<PyObject*>(b));
    if (PyDict_SetItemString(out.p, kBindNames[i], call.p) < 0) return nullptr;
  }
  return Py_NewRef(out.p);
}

PyObject* setup(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 4) {
    PyErr_SetString(PyExc_TypeError,
                    "setup(PolicyAborted, UnfitTask, TaskKind.DECODE, settle_outputs)");
    return nullptr;
  }
  Py_XSETREF(g_aborted, Py_NewRef(args[0]));
  Py_XSETREF(g_unfit, Py_NewRef(args[1]));
  Py_XSETREF(g_decode, Py_NewRef(args[2]));
  Py_XSETREF(g_settle, Py_NewRef(args[3]));
  Py_RETURN_NONE;
}

// watch(buffer): the supervisor's shared byte (a writable buffer, held from then on), where
// the call in progress is kept.
PyObject* watch(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  static Py_buffer held{};
  if (nargs != 1) {
    PyErr_SetString(PyExc_TypeError, "watch(writable buffer)");
    return nullptr;
  }
  Py_buffer view;
  if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0) return nullptr;
  if (view.len < 1) {
    PyBuffer_Release(&view);
    PyErr_SetString(PyExc_ValueError, "watch: an empty buffer");
    return nullptr;
  }
  if (held.obj != nullptr) PyBuffer_Release(&held);
  held = view;
  g_watch = static_cast<volatile unsigned char*>(held.buf);
  Py_RETURN_NONE;
}

// heap_kept(): the bytes the extension's heap keeps for reuse (Heap), for tests.
PyObject* heap_kept(PyObject*, PyObject* const*, Py_ssize_t nargs) {
  if (nargs != 0) {
    PyErr_SetString(PyExc_TypeError, "heap_kept()");
    return nullptr;
  }
  return PyLong_FromSize_t(g_heap.kept());
}

// A METH_FASTCALL function as the table's type, cast through void(*)() as the compilers
// allow without a warning (CPython calls it by its real type).
PyCFunction fast(PyObject* (*f)(PyObject*, PyObject* const*, Py_ssize_t)) {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(f));
}

PyMethodDef kMethods[] = {
    {"watch", fast(watch), METH_FASTCALL, nullptr},
    {"create", fast(create), METH_FASTCALL, nullptr},
    {"submit", fast(submit), METH_FASTCALL, nullptr},
    {"get_work", fast(get_work), METH_FASTCALL, nullptr},
    {"has_work", fast(has_work), METH_FASTCALL, nullptr},
    {"cancel", fast(cancel), METH_FASTCALL, nullptr},
    {"clear", fast(clear), METH_FASTCALL, nullptr},
    {"max_prefill_chunk_size", fast(max_prefill_chunk_size),
     METH_FASTCALL, nullptr},
    {"setup", fast(setup), METH_FASTCALL, nullptr},
    {"bind", fast(bind), METH_FASTCALL, nullptr},
    {"heap_kept", fast(heap_kept), METH_FASTCALL, nullptr},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, SCHEDCLI_MODULE, nullptr, -1, kMethods,
                       nullptr, nullptr, nullptr, nullptr};

template <class Int>
bool add_range(PyObject* m, const char* name) {
  PyObject* range = Py_BuildValue("(LK)", static_cast<long long>(std::numeric_limits<Int>::min()),
                                  static_cast<unsigned long long>(std::numeric_limits<Int>::max()));
  return range != nullptr && PyModule_AddObject(m, name, range) == 0;
}

}  // namespace schedcli_shim

// The process's exit functions, as the scheduler's code calls them (linked here with
// -Wl,--wrap=NAME): inside a call they abandon it; anywhere else they are the real ones.
extern "C" {
[[noreturn]] void __real_exit(int status);
[[noreturn]] void __real__exit(int status);
[[noreturn]] void __real__Exit(int status);
[[noreturn]] void __real_quick_exit(int status);

// This library's calls of operator new(size_t) and the sized operator delete (see Heap),
// linked here with -Wl,--wrap (undefined references only: another library's calls, and a
// scheduler header's own replacement of them, are untouched). The unsized delete stays the
// process's.
[[gnu::visibility("hidden")]] void* __wrap__Znwm(std::size_t n) {
  return schedcli_shim::g_heap.take(n);
}
[[gnu::visibility("hidden")]] void __wrap__ZdlPvm(void* p, std::size_t n) noexcept {
  schedcli_shim::g_heap.give(p, n);
}

[[noreturn]] void __wrap_exit(int status) {
  if (schedcli_shim::ours()) schedcli_shim::ended(0, status);
  __real_exit(status);
}
[[noreturn]] void __wrap__exit(int status) {
  if (schedcli_shim::ours()) schedcli_shim::ended(1, status);
  __real__exit(status);
}
[[noreturn]] void __wrap__Exit(int status) {
  if (schedcli_shim::ours()) schedcli_shim::ended(2, status);
  __real__Exit(status);
}
[[noreturn]] void __wrap_quick_exit(int status) {
  if (schedcli_shim::ours()) schedcli_shim::ended(3, status);
  __real_quick_exit(status);
}
}

PyMODINIT_FUNC SCHEDCLI_INIT() {  // PyMODINIT_FUNC is extern "C" already
  using namespace schedcli_shim;
  for (int f = 0; f < FIELDS; ++f) g_names[f] = PyUnicode_InternFromString(kFieldNames[f]);
  g_cancelled_name = PyUnicode_InternFromString("cancelled");
  g_aborted = Py_NewRef(PyExc_RuntimeError);
  g_unfit = Py_NewRef(PyExc_ValueError);
  g_refused = PyUnicode_InternFromString(
      "the C++ scheduler refused the group (submit returned false)");
  g_bound_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kBoundSpec));
  if (g_refused == nullptr || g_bound_type == nullptr) return nullptr;
  PyObject* m = PyModule_Create(&kModule);
  if (m == nullptr) return nullptr;
  if (!add_range<et::TaskId>(m, "TASK_ID") || !add_range<et::SessionId>(m, "SESSION_ID") ||
      !add_range<et::Position>(m, "POSITION") ||
      !add_range<et::Token>(m, "TOKEN") ||
      PyModule_AddIntConstant(m, "HAS_CHUNK_LIMIT", HasChunkLimit<Sched>::value ? 1 : 0) < 0 ||
      PyModule_AddIntConstant(m, "PAYLOAD", shape::kPayload ? 1 : 0) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}

#pragma GCC diagnostic pop
