"""Playing the runner: a workload becomes scheduler traffic, simulated time and latencies.

Closed loop: a request's prompt is submitted (as chunks, one group) when it arrives;
dispatching its last chunk yields the first token; each further token is one decode,
submitted once the previous one was dispatched. Simulated time advances by a cost
model per batch and jumps over idle gaps to the next arrival.
"""

from __future__ import annotations

import heapq
import sys
from collections.abc import Callable, Iterable
from typing import Any

from mypy_extensions import mypyc_attr

from ..formats.workload import Request
from ..formats.writer import TraceWriter
from ..model.errors import InvariantError, PolicyAborted, Said, SchedcliError, UsageError
from ..model.scheduler import Scheduler
from ..model.task import DECODE, PREFILL, Id, Task
from .cost import CostModel
from .ledger import Ledger
from .replay import WARNINGS_SHOWN, PolicyCrashed
from .results import Live, SimResult
from .stall import Watch, idle_or_stop, tasks_stuck

DEFAULT_CHUNK_SIZE = 256
# Prompt chunks submitted per group; a longer prompt is submitted a window at a time,
# each when the one before has been dispatched (at the default chunk size, 16,384 tokens).
WINDOW = 64


def chunk_size_for(policy: Scheduler) -> int:
    """How the runner chunks prompts for ``policy``: its own chunk limit, if it has one."""
    limit = policy.prefill_chunk_limit
    return limit if limit is not None else DEFAULT_CHUNK_SIZE


@mypyc_attr(allow_interpreted_subclasses=True)
class Runner:
    """One level's side of a simulation. The one loop (``run``) admits each request when it
    arrives, cancels those whose client gave up, and steps while the policy has work; a
    level says how a request is offered (``offer``) and dropped (``drop``), whether the
    policy has work, and what one step is (``run_step``)."""

    def __init__(self, policy_name: str, result: SimResult) -> None:
        self.policy_name = policy_name
        self.result = result
        self.live: dict[Id, Live] = {}
        self.deadlines: list[tuple[float, int, Id]] = []
        self.t = 0.0
        self.step = 0

    def broken(self, *message: Said) -> InvariantError:
        """The contract broken now: ``message``, its words and the options it names."""
        return InvariantError(
            f"policy {self.policy_name!r} broke the Scheduler contract at step {self.step} "
            f"(simulated time {self.t:.6f} s): ",
            *message,
        )

    def crashed(self, call: str, e: Exception) -> SchedcliError:
        if isinstance(e, PolicyAborted):
            return self.broken(f"{call}: {e}")
        return PolicyCrashed(
            f"policy {self.policy_name!r} raised in {call} at step {self.step} "
            f"(simulated time {self.t:.6f} s): {type(e).__name__}: {e}"
        )

    def admit(self, req: Request) -> None:
        """A request arrives: offered to the policy, then live unless refused."""
        result = self.result
        result.requests += 1
        live = Live(req, self.step)
        reason = self.offer(req, live)
        if reason is not None:
            result.rejected += 1
            result.rejected_by_reason[reason] = result.rejected_by_reason.get(reason, 0) + 1
            return
        self.live[req.sid] = live
        if req.cancel_after is not None:
            deadlines = self.deadlines
            heapq.heappush(deadlines, (req.arrival + req.cancel_after, req.line, req.sid))
            if len(deadlines) > 2 * len(self.live) + 64:
                # Those of requests already ended go (a sid never comes back, and no two
                # deadlines tie: (time, line) orders them as before): memory follows the
                # requests in flight, not those whose patience has yet to run out.
                held = self.live
                self.deadlines = [d for d in deadlines if d[2] in held]
                heapq.heapify(self.deadlines)

    def cancel_due(self) -> bool:
        """Clients whose patience ran out by now give up; whether any did."""
        deadlines = self.deadlines
        gave_up = False
        while deadlines and deadlines[0][0] <= self.t:
            _, _, sid = heapq.heappop(deadlines)
            victim = self.live.pop(sid, None)
            if victim is None:
                continue  # finished in time
            self.drop(sid)
            victim.cancelled = True
            self.result.cancelled += 1
            gave_up = True
        return gave_up

    def offer(self, req: Request, live: Live) -> str | None:
        """Hand the arriving request to the policy (and the trace); why it was refused."""
        raise NotImplementedError

    def drop(self, sid: Id) -> None:
        """Withdraw a live request from the policy (and say so in the trace)."""
        raise NotImplementedError

    def has_work(self) -> bool:
        raise NotImplementedError

    def run_step(self, cost: CostModel) -> bool:
        raise NotImplementedError  # one step at ``self.t``: whether it ran anything

    preempted_last = False  # the last step preempted (a request-level policy's may)
    forget_on_work = True  # a step that ran something is progress (engine/stall.py)

    def idle_until(self, when: float, cost: CostModel, stalled: bool) -> bool:
        """The policy idles (``stalled``: its state unchanged across an empty step): let
        time pass towards ``when``, the next arrival or cancel, as this level's steps
        would; False if no time can pass."""
        raise NotImplementedError

    def watched(self) -> object:
        raise NotImplementedError  # the policy whose state the stall watch samples

    def stuck(self) -> str:
        """What is stuck and why, for the stall's error."""
        raise NotImplementedError

    def done(self) -> None:
        """After the last step: the level's own totals into the result."""


def run(
    requests: Iterable[Request],
    runner: Runner,
    cost: CostModel,
    on_progress: Callable[[int, float], None] | None = None,
) -> SimResult:
    """The one simulation loop, for a runner of either level: time jumps over idle gaps to
    the next arrival; a policy that can make no more progress is found as it shows
    (engine/stall.py) and is the policy's fault."""
    result = runner.result
    arrivals = iter(requests)
    pending = next(arrivals, None)
    if pending is not None:
        result.start = pending.arrival
    runner.t = result.start
    watch = Watch(runner.watched(), runner.forget_on_work, runner.policy_name)
    while True:
        outside = False
        while pending is not None and pending.arrival <= runner.t:
            runner.admit(pending)
            pending = next(arrivals, None)
            outside = True
        if runner.cancel_due() or outside:
            watch.reset()
        if not runner.has_work():
            if runner.live:
                raise InvariantError(
                    f"policy {runner.policy_name!r} reports no work while "
                    f"{len(runner.live)} requests wait"
                )
            if pending is None:
                break
            runner.t = pending.arrival
            continue
        ran = runner.run_step(cost)
        if ran and not runner.preempted_last:
            watch.busy()
            if on_progress is not None and runner.step % 4096 == 0:
                on_progress(result.requests, runner.t)
            continue
        found = watch.quiet(runner.step - 1, not ran, runner.t)
        if found is None and not watch.given_up():
            continue
        idle_or_stop(runner, cost, watch, found, _next_event(runner, pending))
    result.steps = runner.step
    result.end = runner.t
    runner.done()
    return result


def _next_event(runner: Runner, pending: Request | None) -> float | None:
    """When the next arrival or cancel comes, if any is still to come."""
    times = [pending.arrival] if pending is not None else []
    if runner.deadlines:
        times.append(runner.deadlines[0][0])
    return min(times) if times else None


class TaskRunner(Runner):
    """The runner of a task-level policy: prompts submitted as chunk groups, a decode
    submitted after each token; every answer checked by the ledger, as in a replay."""

    def __init__(
        self,
        policy: Scheduler,
        result: SimResult,
        policy_name: str,
        trace: TraceWriter | None,
        on_batch: Callable[[int, float, float, list[Task], int], None] | None,
    ) -> None:
        super().__init__(policy_name, result)
        self.policy = policy
        self.trace = trace
        self.on_batch = on_batch
        self.next_tid = 0
        # Every answer of the policy is checked against the contract, as in a replay.
        self.ledger = Ledger(
            self.broken,
            self._two_outputs,
            budget=policy.token_budget,
            two_outputs_fatal=policy.one_output_per_session,
        )
        self.two_output_batches = 0

    @property
    def queued(self) -> int:
        """Tasks accepted and not yet dispatched or cancelled."""
        return len(self.ledger.queued)

    def try_submit(self, tasks: list[Task]) -> str | None:
        try:
            return self.policy.try_submit(tasks)
        except Exception as e:
            raise self.crashed("submit", e) from e

    def _two_outputs(self, message: str) -> None:
        self.two_output_batches += 1
        if self.two_output_batches <= WARNINGS_SHOWN:
            print(
                f"warning: step {self.step}: {message} "
                f"(policy {self.policy_name!r} keeps the reference's behaviour)",
                file=sys.stderr,
            )

    def _window(self, req: Live) -> list[Task]:
        """The request's next prompt chunks, at most WINDOW of them: a prompt is built as
        it goes, so memory follows what is in flight, not what was asked."""
        tasks: list[Task] = []
        pos = req.submitted
        prompt = req.prompt
        chunk = self.result.chunk_size
        while pos < prompt and len(tasks) < WINDOW:
            size = min(chunk, prompt - pos)
            last = pos + size == prompt
            tid = self.next_tid
            self.next_tid += 1
            task = Task(tid, req.sid, PREFILL, size, position=pos, produce_output=last)
            task.priority = req.priority
            tasks.append(task)
            pos += size
        req.submitted = pos
        req.window_left = len(tasks)
        return tasks

    def offer(self, req: Request, live: Live) -> str | None:
        """Its prompt as one group of chunks (a window at a time for a prompt longer than
        WINDOW chunks)."""
        tasks = self._window(live)
        reason = self.try_submit(tasks)
        if self.trace is not None:
            # The workload's meta rides on the submit, carried through.
            self.trace.submit(tasks, t=self.t, inline=False, meta=req.meta)
        if reason is None:
            self.ledger.accept(tasks)
        return reason

    def _submit_window(self, req: Live) -> None:
        tasks = self._window(req)
        reason = self.try_submit(tasks)
        if self.trace is not None:
            self.trace.submit(tasks, t=self.t, inline=False)
        if reason is not None:
            raise self.broken(f"rejected the rest of a prompt it accepted: {reason}")
        self.ledger.accept(tasks)

    def drop(self, sid: Id) -> None:
        try:
            dropped = self.policy.cancel(sid)
        except Exception as e:
            raise self.crashed("cancel", e) from e
        self.ledger.cancelled(sid, dropped)
        if self.trace is not None:
            self.trace.cancel(sid, t=self.t)

    def has_work(self) -> bool:
        try:
            working = self.policy.has_work()
        except Exception as e:
            raise self.crashed("has_work", e) from e
        if working != bool(self.ledger.queued):
            raise self.broken(
                f"has_work() is {working} but {self.queued} accepted tasks are queued"
            )
        return working

    def run_step(self, cost: CostModel) -> bool:
        try:
            batch = self.policy.get_work()
        except Exception as e:
            raise self.crashed("get_work", e) from e
        if self.trace is not None:
            self.trace.get_work([x.tid for x in batch], step=self.step, t=self.t)
        self.ledger.dispatched(batch, listing=False)
        if not batch:
            self.step += 1
            return False
        self.run_batch(batch, cost)
        return True

    def idle_until(self, when: float, cost: CostModel, stalled: bool) -> bool:
        self.t = when  # an empty batch takes no time: the next event is where time goes
        return True

    def watched(self) -> object:
        return self.policy

    def stuck(self) -> str:
        return tasks_stuck(self.policy, list(self.ledger.queued))

    def run_batch(self, batch: list[Task], cost: CostModel) -> None:
        """Dispatch a non-empty batch: time advances, tokens are produced, decodes follow."""
        result = self.result
        tokens = 0
        decodes = 0
        for x in batch:
            tokens += x.size
            if x.kind is DECODE:
                decodes += 1
        start = self.t
        end = start + cost.a + cost.b * tokens + cost.c * decodes
        if cost.d:
            end += cost.d * self._context(batch)
        if self.on_batch is not None:
            self.on_batch(self.step, start, end, batch, self.queued)
        result.batch_tokens += tokens
        result.decode_tokens += decodes
        result.prefill_tokens += tokens - decodes
        continuing, prompting = self._produce(batch, start, end)
        self.t = end
        self.step += 1
        for req in prompting:
            self._submit_window(req)
        for req in continuing:
            self._submit_decode(req)

    def _context(self, batch: list[Task]) -> int:
        """Tokens of context the batch attends over: each slice's end position."""
        total = 0
        for x in batch:
            if x.kind is DECODE:
                req = self.live.get(x.sid)
                total += req.prompt + req.produced if req is not None else 1
            else:
                total += (x.position or 0) + x.size
        return total

    def _produce(
        self, batch: list[Task], start: float, end: float
    ) -> tuple[list[Live], list[Live]]:
        """Account the batch's outputs; returns the requests that go on decoding, and those
        whose prompt window was dispatched with more of the prompt to submit."""
        result, live, step = self.result, self.live, self.step
        continuing: list[Live] = []
        prompting: list[Live] = []
        produced_now = 0
        for x in batch:
            req = live.get(x.sid)
            if req is None:
                raise InvariantError(
                    f"policy {self.policy_name!r} dispatched task {x.tid} of no live request"
                )
            if req.first_dispatch_step < 0:
                req.first_dispatch_step = step
                result.queue_delay.add(start - req.arrival)
                result.queue_delay_steps.add(step - req.arrival_step)
            if not x.produce_output:
                req.window_left -= 1
                if req.window_left == 0 and req.submitted < req.prompt:
                    prompting.append(req)
                continue
            produced_now += 1
            req.produced += 1
            req.last_token = end
            req.last_token_step = step + 1
            if req.produced == 1:
                req.first_token = end
                req.first_token_step = step + 1
                result.ttft.add(end - req.arrival)
                result.ttft_steps.add(step + 1 - req.arrival_step)
            if req.produced >= req.output:
                del live[x.sid]
                result.finished += 1
                result.finish(req)
            else:
                continuing.append(req)
        result.output_tokens += produced_now
        return continuing, prompting

    def _submit_decode(self, req: Live) -> None:
        tid = self.next_tid
        self.next_tid += 1
        task = Task(tid, req.sid, DECODE, 1, produce_output=True)
        reason = self.try_submit([task])
        if self.trace is not None:
            self.trace.submit([task], t=self.t)
        if reason is not None:
            raise self.broken(f"rejected decode {tid}: {reason}")
        self.ledger.accept([task])


def simulate(
    requests: Iterable[Request],
    policy: Scheduler,
    *,
    policy_name: str,
    params: dict[str, Any],
    chunk_size: int,
    cost: CostModel,
    trace: TraceWriter | None = None,
    slo_ttft: float | None = None,
    slo_tpot: float | None = None,
    on_progress: Callable[[int, float], None] | None = None,
    on_batch: Callable[[int, float, float, list[Task], int], None] | None = None,
    keep_values: bool = False,
) -> SimResult:
    """Run the workload through ``policy``; ``trace`` receives the explicit-mode trace.

    ``on_batch(step, start, end, batch, queued)`` sees every dispatched batch in time;
    ``keep_values`` keeps every request's figures (SimResult.keep_values).
    """
    if chunk_size < 1:
        raise UsageError("chunk size must be >= 1")
    result = SimResult(policy_name, params, cost, chunk_size, budget=policy.token_budget)
    result.slo_ttft, result.slo_tpot = slo_ttft, slo_tpot
    if keep_values:
        result.keep_values()
    return run(
        requests, TaskRunner(policy, result, policy_name, trace, on_batch), cost, on_progress
    )
