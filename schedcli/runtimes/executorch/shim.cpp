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
// - Tasks go in with offset 0, position as the trace gives it (-1 for none) and, when the
//   trace has tokens, the slice's own tokens; what comes back is matched by tid to the
//   Python tasks submitted (Handle::queued), which are what Python gets.

#include <Python.h>
#include <structmember.h>

#include <pthread.h>
#include <sys/time.h>

#include <csetjmp>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#pragma GCC diagnostic push
// Later upstream marks the interface ET_EXPERIMENTAL, a [[deprecated]] attribute.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace schedcli_shim {

namespace et = ::executorch::extension::llm::batching;
using Sched = et::Scheduler;

constexpr long GRACE_MS = 500;
constexpr int STOPPED = 1000;  // sigsetjmp's value for a stop: STOPPED + signum

template <class T, class = void>
struct HasChunkLimit : std::false_type {};
template <class T>
struct HasChunkLimit<T, std::void_t<decltype(std::declval<const T&>().max_prefill_chunk_size())>>
    : std::true_type {};

// The scheduler, and the Python task behind each tid it holds (a strong reference): what
// it hands back is matched here by tid, so Python sees the very tasks it submitted.
struct Handle {
  std::shared_ptr<Sched> s;
  std::unordered_map<et::TaskId, PyObject*> queued;
  bool abandoned = false;
};

inline std::shared_ptr<Sched> own(std::shared_ptr<Sched> p) { return p; }
template <class T>
std::shared_ptr<Sched> own(T* p) { return std::shared_ptr<Sched>(p); }

// --- the guard ----------------------------------------------------------------------------

sigjmp_buf g_jump;
volatile sig_atomic_t g_in_call = 0;
volatile sig_atomic_t g_stop = 0;
pthread_t g_thread;
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

extern "C" void on_crash(int sig, siginfo_t* info, void* ctx) {
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

extern "C" void on_stop(int sig, siginfo_t* info, void* ctx) {
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

void enter() {
  g_thread = pthread_self();
  g_in_call = 1;
}

void leave() {
  g_in_call = 0;
  if (g_stop != 0) {  // the call returned within the grace: Python raises the stop
    arm(0);
    g_stop = 0;
  }
}

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

enum Field { TID, SID, SIZE, KIND, OUTPUT, POSITION, TOKENS, FIELDS };
const char* const kFieldNames[FIELDS] = {"tid",  "sid",      "size",  "kind",
                                         "produce_output", "position", "tokens"};
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
  if (!tid.p || !sid.p || !size.p || !kind.p || !output.p || !position.p || !tokens.p) {
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
  if (position.p == Py_None) {
    t.input.position = -1;
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
    t.input.tokens = std::move(held);
  }
  return true;
}

// The Python tasks behind what the scheduler handed back, taken out of `queued`;
// `dropped` marks them cancelled. A tid that is not queued breaks the contract.
PyObject* matched(Handle* h, const std::vector<et::Task>& tasks, const char* what, bool dropped) {
  PyObject* out = PyList_New(static_cast<Py_ssize_t>(tasks.size()));
  if (out == nullptr) return nullptr;
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    auto it = h->queued.find(tasks[i].tid);
    if (it == h->queued.end()) {
      // What was matched so far is out of `queued`; the run ends here anyway.
      Py_DECREF(out);
      return PyErr_Format(g_aborted, "%s returned tid %lld, which is not queued", what,
                          static_cast<long long>(tasks[i].tid));
    }
    PyObject* task = it->second;
    h->queued.erase(it);
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
  for (auto& entry : h->queued) Py_DECREF(entry.second);
  delete h;
}

// One call into the scheduler: sigsetjmp in this frame (a crash inside comes back here,
// and the call returns with the scheduler abandoned), then `work`.
template <class Work>
PyObject* guarded(Handle* h, const char* what, Work&& work) {
  if (h == nullptr) return nullptr;
  const int code = sigsetjmp(g_jump, 0);
  if (code != 0) return abandoned(h, code, what);
  enter();
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
  enter();
  h->s = make(params);
  leave();
  if (!h->s) {
    delete h;
    Py_RETURN_NONE;
  }
  return PyCapsule_New(h, kCapsule, release);
}

PyObject* submit(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyList_CheckExact(args[1])) {
    PyErr_SetString(PyExc_TypeError, "submit(scheduler, list of tasks)");
    return nullptr;
  }
  Handle* h = handle(args[0]);
  if (h == nullptr) return nullptr;
  const Py_ssize_t n = PyList_GET_SIZE(args[1]);
  std::vector<et::Task> tasks(static_cast<std::size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!to_task(PyList_GET_ITEM(args[1], i), tasks[static_cast<std::size_t>(i)])) {
      return nullptr;
    }
  }
  PyObject* ok = guarded(h, "submit", [&] { return PyBool_FromLong(h->s->submit(std::move(tasks))); });
  if (ok != Py_True) return ok;  // refused, or died
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* task = PyList_GET_ITEM(args[1], i);
    Ref tid(read(task, TID));
    et::TaskId id;
    if (tid.p == nullptr || !to_int(tid.p, id, "tid", "TaskId")) return nullptr;
    if (!h->queued.emplace(id, task).second) {
      Py_DECREF(ok);
      return PyErr_Format(g_aborted, "submit accepted tid %lld, which was queued",
                          static_cast<long long>(id));
    }
    Py_INCREF(task);
  }
  return ok;
}

PyObject* get_work(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Handle* h = nargs == 1 ? handle(args[0]) : nullptr;
  return guarded(h, "get_work", [h] { return matched(h, h->s->get_work(), "get_work", false); });
}

PyObject* has_work(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Handle* h = nargs == 1 ? handle(args[0]) : nullptr;
  return guarded(h, "has_work", [h] { return PyBool_FromLong(h->s->has_work()); });
}

PyObject* cancel(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Handle* h = nargs == 2 ? handle(args[0]) : nullptr;
  et::SessionId sid;
  if (h == nullptr || !to_int(args[1], sid, "sid", "SessionId")) return nullptr;
  return guarded(h, "cancel", [h, sid] { return matched(h, h->s->cancel(sid), "cancel", true); });
}

PyObject* clear(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Handle* h = nargs == 1 ? handle(args[0]) : nullptr;
  return guarded(h, "clear", [h] { return matched(h, h->s->clear(), "clear", true); });
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
  return guarded(h, "max_prefill_chunk_size",
                 [h] { return PyLong_FromSize_t(chunk_limit(*h->s)); });
}

PyObject* setup(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "setup(PolicyAborted, UnfitTask, TaskKind.DECODE)");
    return nullptr;
  }
  Py_XSETREF(g_aborted, Py_NewRef(args[0]));
  Py_XSETREF(g_unfit, Py_NewRef(args[1]));
  Py_XSETREF(g_decode, Py_NewRef(args[2]));
  Py_RETURN_NONE;
}

PyMethodDef kMethods[] = {
    {"create", reinterpret_cast<PyCFunction>(create), METH_FASTCALL, nullptr},
    {"submit", reinterpret_cast<PyCFunction>(submit), METH_FASTCALL, nullptr},
    {"get_work", reinterpret_cast<PyCFunction>(get_work), METH_FASTCALL, nullptr},
    {"has_work", reinterpret_cast<PyCFunction>(has_work), METH_FASTCALL, nullptr},
    {"cancel", reinterpret_cast<PyCFunction>(cancel), METH_FASTCALL, nullptr},
    {"clear", reinterpret_cast<PyCFunction>(clear), METH_FASTCALL, nullptr},
    {"max_prefill_chunk_size", reinterpret_cast<PyCFunction>(max_prefill_chunk_size),
     METH_FASTCALL, nullptr},
    {"setup", reinterpret_cast<PyCFunction>(setup), METH_FASTCALL, nullptr},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, SCHEDCLI_MODULE, nullptr, -1, kMethods};

template <class Int>
bool add_range(PyObject* m, const char* name) {
  PyObject* range = Py_BuildValue("(LK)", static_cast<long long>(std::numeric_limits<Int>::min()),
                                  static_cast<unsigned long long>(std::numeric_limits<Int>::max()));
  return range != nullptr && PyModule_AddObject(m, name, range) == 0;
}

}  // namespace schedcli_shim

extern "C" PyMODINIT_FUNC SCHEDCLI_INIT() {
  using namespace schedcli_shim;
  for (int f = 0; f < FIELDS; ++f) g_names[f] = PyUnicode_InternFromString(kFieldNames[f]);
  g_cancelled_name = PyUnicode_InternFromString("cancelled");
  g_aborted = Py_NewRef(PyExc_RuntimeError);
  g_unfit = Py_NewRef(PyExc_ValueError);
  PyObject* m = PyModule_Create(&kModule);
  if (m == nullptr) return nullptr;
  if (!add_range<et::TaskId>(m, "TASK_ID") || !add_range<et::SessionId>(m, "SESSION_ID") ||
      !add_range<et::Position>(m, "POSITION") ||
      PyModule_AddIntConstant(m, "HAS_CHUNK_LIMIT", HasChunkLimit<Sched>::value ? 1 : 0) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}

#pragma GCC diagnostic pop
