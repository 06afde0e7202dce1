"""The scheduler seam: the interface every policy implements, and the shared bookkeeping.

A scheduler is bookkeeping only. It never runs caller code, does no I/O and never
blocks on anything but its own lock; it hands tasks back and the caller completes them.
"""

from __future__ import annotations

import abc
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

from mypy_extensions import mypyc_attr

from .errors import SnapshotUnsupported
from .limits import INT_MAX, INT_MIN
from .task import DECODE, Id, Task, settle_outputs, show_id


class Param(NamedTuple):
    """One constructor parameter a policy declares (name, type, default, one-line help).

    A ``str`` parameter takes one of ``choices``; numbers may have a ``minimum`` and a
    ``maximum`` (an integer is never past 64 bits either).
    (A named tuple: a value, made at a third of a frozen dataclass's start-up cost.)
    """

    name: str
    type: type[int] | type[float] | type[str]
    default: int | float | str
    help: str
    minimum: int | float | None = None
    choices: tuple[str, ...] = ()
    maximum: int | float | None = None

    def check(self, value: object) -> int | float | str:
        """The value in its declared type (an integer given for a ``float`` parameter comes
        back a float, in either core); ValueError naming the rule if it does not fit."""
        if self.type is str:
            if not isinstance(value, str) or value not in self.choices:
                raise ValueError(
                    f"{self.name} must be one of {', '.join(self.choices)}, not {value!r}"
                )
            return value
        if self.type is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{self.name} must be an integer, not {value!r}")
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{self.name} must be a number, not {value!r}")
        elif value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{self.name} must be a finite number, not {value!r}")
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"{self.name} must be >= {self.minimum}, not {value!r}")
        if self.maximum is not None and value > self.maximum:
            raise ValueError(f"{self.name} must be <= {self.maximum:,}, not {value!r}")
        if self.type is int:
            if not INT_MIN <= value <= INT_MAX:
                raise ValueError(
                    f"{self.name} must fit in 64 bits (at most {INT_MAX}), not {value!r}"
                )
            return value
        try:
            return float(value)
        except OverflowError:
            raise ValueError(f"{self.name} must be a finite number, not {value!r}") from None


def check_params(declared: Sequence[Param], values: dict[str, Any]) -> None:
    """Check each given declared parameter's type and bound, and put it in its declared type
    in ``values`` (cross-parameter rules are the policy's)."""
    for p in declared:
        if p.name in values:
            values[p.name] = p.check(values[p.name])


@mypyc_attr(allow_interpreted_subclasses=True)
class Policy(ABC):  # noqa: B024 (its seams, Scheduler and RequestScheduler, are abstract)
    """What every policy is, at either level: a name, declared parameters, a rule, and
    how to build, describe and release one. ``level`` says which seam it implements:
    ``"task"`` (``Scheduler``: handed tasks) or ``"request"`` (``RequestScheduler``:
    handed whole requests); the registry finds and builds both alike."""

    name: ClassVar[str] = ""
    """The name the policy is registered under."""
    PARAMS: ClassVar[tuple[Param, ...]] = ()
    """Constructor parameters, validated when the policy is built."""
    RULE: ClassVar[str] = ""
    """The policy's rule in a paragraph, as ``schedcli policies`` shows it; without one, the
    class docstring is shown (a compiled class keeps no docstrings)."""
    level: ClassVar[str] = "task"
    # ``schedcli debug`` copies a replay by forking the process at checkpoints; a policy
    # whose state lives outside the process (a socket, a server) says False, and the
    # debugger re-runs from the start instead (docs/debug.md).
    forkable: ClassVar[bool] = True

    @classmethod
    def create(cls, **params: Any) -> Policy:
        """The policy these parameters ask for: an instance of this class, unless the
        policy builds another for some of them (decode-first's ``compat=reference``).
        ``build_policy`` builds through it."""
        return cls(**params)

    VARIANTS: ClassVar[tuple[type[Policy], ...]] = ()
    """Other classes ``create`` may build under this policy's name (a recording of one
    names this policy, with the parameters that pick it)."""

    @classmethod
    def settle(cls, **params: Any) -> dict[str, Any]:
        """Every declared parameter's value as a policy built with ``params`` (checked
        against ``PARAMS``) would hold it: by default, built, asked and released."""
        built = cls.create(**params)
        try:
            return built.params()
        finally:
            built.close()

    @classmethod
    def available(cls) -> str | None:
        """What building this policy here would refuse, said without building it (a
        runtime not installed); None when nothing."""
        return None

    @classmethod
    def runtime(cls) -> str | None:
        """The outside runtime the policy drives and its installed version
        (``vllm==0.33.0``), which its results depend on besides its own source."""
        return None

    @classmethod
    def made_by(cls) -> dict[str, str]:
        """The outside runtime's version, as a trace's header meta records it (the key its
        recorder writes: ``{"vllm": "0.33.0"}``): ``simulate -o`` writes it, and a replay
        under a policy that says another value for a key the header holds says so in a
        note. Read whenever a trace is opened: cheap. Nothing by default."""
        return {}

    @classmethod
    def worker_env(cls) -> dict[str, str]:
        """Environment variables a worker process (a sweep's) needs to build this policy
        as this process would (a C++ policy's resolved spec); none by default."""
        return {}

    @property
    def token_budget(self) -> int | None:
        """Tokens one batch may hold, if the policy has such a limit."""
        return None

    def promise_serial_calls(self) -> None:
        """The caller's promise that from now on no two calls to this policy overlap:
        one thread uses it, or its callers hold a lock of the caller's own around every
        call (a replay drives the policy it built alone; a recorder serializes its callers).
        A policy may then skip its own locking; the default ignores the promise."""
        return None

    def fingerprint(self) -> object | None:
        """What the policy's answers depend on, as a value the engine compares
        (engine/stall.py): two states whose fingerprints are equal answer any run of
        ``get_work`` (``step``) calls alike and pass through equal fingerprints again. Equal
        before and after an empty batch: a stall, it will never schedule again; a state
        seen before with no call from outside in between: a cycle.

        It counts only where the policy's own class defines it (a subclass may keep state
        its parent's cannot know). By default None: the policy is opaque, and the engine
        says only what it saw (no batch for N steps with work queued), never "never".
        Each built-in declares exactly what it decides from; a plugin may
        (docs/plugins.md), with plain values (``model/state.py``)."""
        return None

    def snapshot(self) -> dict[str, object]:
        """The policy's state as JSON (dicts, lists, str, int, float, bool, None), versioned:
        what a freshly built instance with the same parameters needs, handed to
        ``restore``, to go on exactly as this one would (docs/policies.md, "Snapshots").
        By default the policy cannot: SnapshotUnsupported, which a policy whose state it
        cannot hand over (outside code, a server) raises too, saying why."""
        raise SnapshotUnsupported(self.name, "it does not implement snapshot() and restore()")

    def restore(self, state: Mapping[str, object]) -> None:
        """Take ``state`` (a ``snapshot()``, read from a trace: untrusted) into this freshly
        built instance; BadSnapshot naming the field where it is wrong. By default
        SnapshotUnsupported, as ``snapshot``."""
        raise SnapshotUnsupported(self.name, "it does not implement snapshot() and restore()")

    def params(self) -> dict[str, Any]:
        """The values of the declared parameters this instance was built with."""
        return {p.name: getattr(self, p.name) for p in self.PARAMS}

    def close(self) -> None:  # noqa: B027 (optional: most hold nothing)
        """Release what the policy holds (a process-wide engine, say)."""


@mypyc_attr(allow_interpreted_subclasses=True)
class Scheduler(Policy):
    """What a task-level policy promises its caller.

    - ``submit(tasks)`` is all or nothing: False means nothing was queued.
      A tid is unique among queued tasks (the group included) and free again
      once its task was dispatched or cancelled.
    - ``get_work()`` returns the next batch, which the caller then owns. A session
      appears more than once only as consecutive prefill chunks, at most one of its
      tasks produces output, and a decode never shares a batch with another task of
      its session.
    - ``cancel(sid)`` / ``clear()`` drop queued tasks and return them, marked cancelled.
      Tasks already handed out belong to the caller and are never returned again.
    - Every method is safe to call from any thread, unless the caller has promised
      otherwise with ``promise_serial_calls``.
    """

    level: ClassVar[str] = "task"

    # The interface is five calls: submit, has_work, get_work, cancel, clear. A policy
    # implements submit or try_submit (which can say why it refused); each has the other
    # as its default, so a class must define at least one (the registry checks it).

    def submit(self, tasks: Iterable[Task]) -> bool:
        """Queue the whole group and return True, or queue nothing and return False."""
        return self.try_submit(tasks) is None

    def try_submit(self, tasks: Iterable[Task]) -> str | None:
        """Queue the group and return None, or queue nothing and return why."""
        return None if self.submit(tasks) else "the policy refused the group"

    @abstractmethod
    def has_work(self) -> bool:
        """Some task is queued. A hint, not a reservation."""

    @abstractmethod
    def get_work(self) -> list[Task]:
        """The next batch, possibly empty."""

    @abstractmethod
    def cancel(self, sid: Id) -> list[Task]:
        """Drop and return the session's queued tasks."""

    @abstractmethod
    def clear(self) -> list[Task]:
        """Drop and return every queued task."""

    @property
    def prefill_chunk_limit(self) -> int | None:
        """The largest prefill chunk the policy admits, if it has a limit (a runner splits
        prompts to fit it)."""
        return None

    def left_behind(self) -> list[tuple[Task, str, str]] | None:
        """Why each still-queued task was left out of the last batch: (task, reason code,
        detail), in queue order; None when the policy gives no reasons.

        Optional. Reasons are collected only while ``explaining`` is True, so the hot path
        of a replay pays nothing for them (docs/policies.md lists each policy's codes).
        """
        return None

    _explaining: bool = False

    @property
    def explaining(self) -> bool:
        """Set by the caller that wants ``left_behind``; policies that give reasons read it.

        A property, so that a wrapper (the recorder) can pass it to the scheduler it wraps.
        """
        return self._explaining

    @explaining.setter
    def explaining(self, on: bool) -> None:
        self._explaining = on

    @property
    def one_output_per_session(self) -> bool:
        """Whether every batch keeps the interface's one-output-per-session promise.

        A policy that reproduces a flawed original (decode-first compat=reference)
        says False; the replay engine then reports two outputs as a warning.
        """
        return True

    @classmethod
    def create(cls, **params: Any) -> Scheduler:
        return cls(**params)


@mypyc_attr(allow_interpreted_subclasses=True)
class QueueScheduler(Scheduler):
    """The bookkeeping every built-in policy shares; a policy supplies the queues.

    This class owns the lock, the record of queued tasks, admission of tids, and
    marking of dropped tasks. A subclass implements:

    - ``refuse(task)``: the policy's own admission rule for one task (None = fine);
    - ``enqueue(task)``: put an admitted task in the policy's queues;
    - ``take_batch()``: remove and return the next batch from the queues;
    - ``remove_session(sid)``: remove and return the session's queued tasks;
    - ``reset()``: empty the queues.

    Removal is eager: a queue never holds a task that is no longer queued, so a tid
    reused after a cancel can never be confused with a stale entry.
    """

    #: Largest prefill chunk admitted, and the parameter that sets it (for the reason).
    _chunk_limit: int | None = None
    _chunk_limit_name: str = ""
    #: The fields a policy's state holds besides the common ones (``snapshot_queues``),
    #: and those it may leave out.
    STATE_FIELDS: ClassVar[tuple[str, ...]] = ()
    STATE_OPTIONAL: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **params: Any) -> None:
        """``params``: the declared parameters' values, checked and kept as attributes.

        A ``max_prefill_chunk_size`` among them is also the admission limit on chunks.
        """
        check_params(self.PARAMS, params)
        for name, value in params.items():
            setattr(self, name, value)
        if "max_prefill_chunk_size" in params:
            self._limit_chunks(params["max_prefill_chunk_size"], "max_prefill_chunk_size")
        self._lock = threading.Lock()
        # False once calls are promised not to overlap: the hot calls then skip the lock,
        # which costs more than many a policy's whole answer.
        self._locking = True
        # tid -> the queued task, in submission order. Membership is what
        # "queued" means; clear() returns these values in this order.
        self._queued: dict[Id, Task] = {}
        # Subclasses that add an admission rule pay for the call; the rest do not.
        self._extra_rule = type(self).refuse is not QueueScheduler.refuse
        # While explaining, take_batch leaves here each queued task's reason, by object
        # id; a policy that never does gives no reasons.
        self._left: dict[int, tuple[str, str]] | None = None
        # ...or, instead, how to work them out: called only if someone asks, before the
        # queue changes again (the next submit, cancel or clear forgets it).
        self._left_later: Callable[[], dict[int, tuple[str, str]]] | None = None
        # tid -> (its group's number, the task), for a task submitted in a group of two or
        # more: a snapshot's groups. An entry whose task is no longer the queued one of its
        # tid is spent; spent entries are dropped once they are most of the dict.
        self._grouped: dict[Id, tuple[int, Task]] = {}
        self._groups = 0

    def left_behind(self) -> list[tuple[Task, str, str]] | None:
        with self._lock:
            if not self.explaining:
                return None
            left = self._left
            if left is None:
                later = self._left_later
                if later is None:
                    return None
                left = self._left = later()
                self._left_later = None
            return [(t, *left[id(t)]) for t in self._queued.values() if id(t) in left]

    def _explain_later(self, reasons: Callable[[], dict[int, tuple[str, str]]]) -> None:
        """From take_batch, while explaining: the batch's reasons, worked out only if asked."""
        self._left = None
        self._left_later = reasons

    @property
    def token_budget(self) -> int | None:
        budget: int | None = getattr(self, "max_batch_tokens", None)
        return budget

    @property
    def prefill_chunk_limit(self) -> int | None:
        return self._chunk_limit

    def _limit_chunks(self, limit: int, param: str) -> None:
        """Refuse prefill chunks over ``limit`` tokens, naming ``param`` in the reason."""
        self._chunk_limit = limit
        self._chunk_limit_name = param

    def refuse(self, task: Task) -> str | None:
        """A policy's own admission rule for one task, beyond the shared ones."""
        return None

    @abstractmethod
    def enqueue(self, task: Task) -> None: ...

    @abstractmethod
    def take_batch(self) -> list[Task]: ...

    @abstractmethod
    def remove_session(self, sid: Id) -> list[Task]: ...

    @abstractmethod
    def reset(self) -> None: ...

    def _admission_problem(self, group: list[Task]) -> str | None:
        """The single place that decides whether a group is accepted, and why not."""
        queued = self._queued
        limit = self._chunk_limit
        seen: set[Id] | None = set() if len(group) > 1 else None
        for t in group:
            size = t.size
            if size <= 0:
                return f"task {show_id(t.tid)} has size {size}"
            if t.kind is DECODE:
                if size != 1:
                    return f"decode {show_id(t.tid)} has size {size}; a decode is 1 token"
            elif limit is not None and size > limit:
                return f"prefill chunk of {size} tokens exceeds {self._chunk_limit_name} {limit}"
            if self._extra_rule:
                reason = self.refuse(t)
                if reason is not None:
                    return reason
            tid = t.tid
            if tid in queued:
                return f"tid {show_id(tid)} is already queued"
            if seen is not None:
                if tid in seen:
                    return f"tid {show_id(tid)} appears twice in the group"
                seen.add(tid)
        return None

    def promise_serial_calls(self) -> None:
        self._locking = False

    def try_submit(self, tasks: Iterable[Task]) -> str | None:
        group = tasks if isinstance(tasks, list) else list(tasks)
        if not self._locking:
            return self._admit(group)
        # acquire/release rather than ``with``: compiled, about 0.1 µs less a call.
        self._lock.acquire()
        try:
            return self._admit(group)
        finally:
            self._lock.release()

    def _admit(self, group: list[Task]) -> str | None:
        reason = self._admission_problem(group)
        if reason is not None:
            return reason
        self._left_later = None  # the queue changes: the last batch's reasons can't be had
        settle_outputs(group)
        queued = self._queued
        for t in group:
            t.cancelled = False
            queued[t.tid] = t
            self.enqueue(t)
        if len(group) > 1:
            self._groups += 1
            self._grouped = note_group(self._grouped, self._groups, group, queued)
        return None

    # --- snapshots (docs/policies.md, "Snapshots") ------------------------------------

    def snapshot(self) -> dict[str, object]:
        """The common fields (``version``, ``policy``, ``queued`` by group in submit order)
        and the policy's own, from ``snapshot_queues``."""
        from .snapshot import VERSION, grouped

        with self._lock:
            own = self.snapshot_queues()
            state: dict[str, object] = {
                "version": VERSION,
                "policy": self.name,
                "queued": grouped(self._queued.values(), self._grouped),
            }
            state.update(own)
            return state

    def restore(self, state: Mapping[str, object]) -> None:
        """Admit ``queued``'s groups as submit would (the same refusals, named by group),
        then hand the policy's own fields to ``restore_queues``."""
        from .snapshot import read_state, refuse

        with self._lock:
            if type(self).restore_queues is QueueScheduler.restore_queues:
                self.restore_queues({}, [])  # refuses: the policy has no snapshots
            if self._queued:
                raise refuse("", "a state is restored into a freshly built policy only")
            groups, fields = read_state(state, self.name, self.STATE_FIELDS, self.STATE_OPTIONAL)
            queued = self._queued
            for i, group in enumerate(groups):
                reason = self._admission_problem(group)
                if reason is not None:
                    raise refuse(f"queued[{i}]", reason)
                for t in group:
                    queued[t.tid] = t
                if len(group) > 1:
                    self._groups += 1
                    self._grouped = note_group(self._grouped, self._groups, group, queued)
            self.restore_queues(fields, list(queued.values()))

    def snapshot_queues(self) -> dict[str, object]:
        """The policy's own fields of its state: what its decisions depend on beyond the
        queued tasks in submit order (a plugin declares their names in STATE_FIELDS)."""
        raise SnapshotUnsupported(
            self.name, "it does not implement snapshot_queues() and restore_queues()"
        )

    def restore_queues(self, fields: dict[str, object], queued: list[Task]) -> None:
        """Build the policy's queues from its own ``fields`` (untrusted: check each, and
        raise ``model.snapshot.refuse(field, why)``) and the ``queued`` tasks, admitted and
        in submit order."""
        raise SnapshotUnsupported(
            self.name, "it does not implement snapshot_queues() and restore_queues()"
        )

    def has_work(self) -> bool:
        if not self._locking:
            return bool(self._queued)
        with self._lock:
            return bool(self._queued)

    def get_work(self) -> list[Task]:
        if not self._locking:
            return self._take()
        with self._lock:
            return self._take()

    def _take(self) -> list[Task]:
        batch = self.take_batch()
        queued = self._queued
        for t in batch:
            del queued[t.tid]
        return batch

    def cancel(self, sid: Id) -> list[Task]:
        with self._lock:
            self._left_later = None
            dropped = self.remove_session(sid)
            queued = self._queued
            for t in dropped:
                del queued[t.tid]
                t.cancelled = True
            return dropped

    def clear(self) -> list[Task]:
        with self._lock:
            self._left_later = None
            dropped = list(self._queued.values())
            self._queued.clear()
            self.reset()
            for t in dropped:
                t.cancelled = True
            return dropped


def note_group(
    grouped: dict[Id, tuple[int, Task]], number: int, group: list[Task], queued: dict[Id, Task]
) -> dict[Id, tuple[int, Task]]:
    """Note ``group`` (two or more tasks, now queued) as group ``number`` in ``grouped``
    (tid -> (group, task)); returns it, or a new dict without the spent entries (whose task
    is no longer the one ``queued`` holds for the tid) once they are most of it."""
    for t in group:
        grouped[t.tid] = (number, t)
    if len(grouped) > 2 * len(queued) + 1024:
        return {tid: e for tid, e in grouped.items() if queued.get(tid) is e[1]}
    return grouped


def own_subclass_cache(*classes: type) -> None:
    """Give each class its own isinstance/issubclass cache. A compiled class is made
    without ABCMeta's set-up, so it would answer from its nearest interpreted ABC's cache
    (abc.ABC's, shared by every compiled policy: a "no" cached for one class is then read
    as the answer for another). An interpreted class has its own already."""
    init = getattr(abc, "_abc_init")  # noqa: B009 (private to abc, absent from its stubs)
    for cls in classes:
        if "_abc_impl" not in vars(cls):
            init(cls)


own_subclass_cache(Policy, Scheduler, QueueScheduler)
