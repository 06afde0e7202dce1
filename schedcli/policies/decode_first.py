"""decode-first: ExecuTorch's batching policy (decode_first_scheduler.h), ported."""

from __future__ import annotations

from typing import Any

from mypy_extensions import mypyc_attr

from ..model.scheduler import QueueScheduler, Scheduler, check_params
from ..model.task import DECODE, Id, Task, show_id
from ._decode_first_reference import COMPAT, FIXED, REFERENCE, ReferenceDecodeFirst
from ._limits import (
    MAX_BATCH_TOKENS,
    MAX_DECODE_SEQUENCES,
    MAX_PREFILL_CHUNK_SIZE,
    decodes_leave_room,
)
from ._queues import Why, chunk_reasons, decode_cap_text, task_state
from ._rotation import Decodes, Rotation


@mypyc_attr(allow_interpreted_subclasses=True)
class DecodeFirstScheduler(QueueScheduler):
    RULE = """Decodes first, in arrival order, one per session, up to max_decode_sequences.
    Then prefill in passes over a rotation of sessions, one chunk per session per pass,
    within max_batch_tokens. A session passed over (its decode is in the batch, its
    chunk does not fit, or its chunk would be the session's second output in the batch)
    keeps its place at the front; a served one goes to the back. compat=reference drops
    the two fixes (one output per session, release by identity) to match the C++ runner.
    """

    name = "decode-first"
    PARAMS = (MAX_BATCH_TOKENS, MAX_DECODE_SEQUENCES, MAX_PREFILL_CHUNK_SIZE, COMPAT)
    VARIANTS = (ReferenceDecodeFirst,)
    max_batch_tokens: int
    max_decode_sequences: int
    max_prefill_chunk_size: int
    compat: str

    def __init__(
        self,
        max_batch_tokens: int = 544,
        max_decode_sequences: int = 32,
        max_prefill_chunk_size: int = 256,
        compat: str = FIXED,
    ) -> None:
        super().__init__(
            max_batch_tokens=max_batch_tokens,
            max_decode_sequences=max_decode_sequences,
            max_prefill_chunk_size=max_prefill_chunk_size,
            compat=compat,
        )
        b, d, c = max_batch_tokens, max_decode_sequences, max_prefill_chunk_size
        decodes_leave_room(d, b)
        # The floor: a saturated decode batch plus one full chunk must fit. Below it a
        # chunk of max_prefill_chunk_size could be admitted and then never fit in any
        # batch, stranded rather than delayed. It also lets the decode loop spend
        # without checking the budget.
        if c > b - d:
            raise ValueError(
                f"max_prefill_chunk_size ({c}) must be <= max_batch_tokens - "
                f"max_decode_sequences ({b - d}): a full chunk must fit beside a full "
                "decode batch"
            )
        self._decodes = Decodes()
        # The rotation of sessions with chunks queued (_rotation.Rotation): _chunks is its
        # sid -> chunks. A session is in the rotation exactly when it has an entry there, so
        # joining is decided by the entry's creation, not by its queue being empty. An entry
        # emptied by cancel() stays until a walk reaches it: the session keeps its place,
        # and rejoining before then cannot give it a second slot.
        self._rotation = Rotation(max_batch_tokens)
        self._chunks = self._rotation.chunks
        if compat == REFERENCE:
            raise ValueError(
                "compat=reference is the reference's own class: build it with "
                "DecodeFirstScheduler.create(..., compat='reference') or build_policy"
            )

    @classmethod
    def create(cls, **params: Any) -> Scheduler:
        """The policy for these parameters: the reference's own bookkeeping, call for call,
        under ``compat=reference``; else this class."""
        if params.get("compat") == REFERENCE:
            check_params(cls.PARAMS, params)  # the same checks as the fixed policy's
            b = params.get("max_batch_tokens", MAX_BATCH_TOKENS.default)
            d = params.get("max_decode_sequences", MAX_DECODE_SEQUENCES.default)
            c = params.get("max_prefill_chunk_size", MAX_PREFILL_CHUNK_SIZE.default)
            cls(b, d, c)  # refuses the same limits
            return ReferenceDecodeFirst(b, d, c)
        return cls(**params)

    # --- compat=fixed ---------------------------------------------------------

    def fingerprint(self) -> object | None:
        """Its parameters, the decodes in order, and the rotation from its head, each
        session with its queued chunks (an entry a cancel emptied included: it holds the
        session's place). The reasons it keeps decide nothing."""
        chunks_of = self._chunks
        rotation = [
            (sid, tuple([task_state(t) for t in chunks_of[sid]])) for sid in self._rotation.order()
        ]
        decodes = tuple([task_state(t) for t in self._decodes.ordered()])
        return (tuple(self.params().values()), decodes, tuple(rotation))

    STATE_FIELDS = ("decodes", "rotation")
    STATE_OPTIONAL = ("emptied",)

    def snapshot_queues(self) -> dict[str, object]:
        """``decodes``: the queued decodes' tids in the order the next batch meets them;
        ``rotation``: the sessions with prefill chunks, from the rotation's head;
        ``emptied`` (when any): those of them a cancel emptied, holding their place until a
        walk reaches them. Each session's chunks are in submit order."""
        chunks_of = self._chunks
        order = self._rotation.order()
        state: dict[str, object] = {
            "decodes": [t.tid for t in self._decodes.ordered()],
            "rotation": order,
        }
        emptied = [sid for sid in order if not chunks_of[sid]]
        if emptied:
            state["emptied"] = emptied
        return state

    def restore_queues(self, fields: dict[str, object], queued: list[Task]) -> None:
        from collections import deque

        from ..model.snapshot import Placed, a_list, an_id, refuse, sessions

        placed = Placed(queued)
        decodes: list[Task] = []
        for i, v in enumerate(a_list(fields["decodes"], "decodes")):
            t = placed.take(an_id(v, f"decodes[{i}]"), f"decodes[{i}]")
            if t.kind is not DECODE:
                raise refuse(f"decodes[{i}]", f"task {show_id(t.tid)} is not a decode")
            decodes.append(t)
        order = sessions(fields["rotation"], "rotation")
        emptied = sessions(fields.get("emptied", []), "emptied")
        chunks_of: dict[Id, deque[Task]] = {sid: deque() for sid in order}
        for t in queued:
            if t.kind is DECODE:
                continue
            placed.take(t.tid, "queued")
            chunks = chunks_of.get(t.sid)
            if chunks is None:
                why = f"session {show_id(t.sid)} has prefill queued (task {show_id(t.tid)})"
                raise refuse("rotation", why + " but is not in the rotation")
            chunks.append(t)
        placed.done("decodes", "not in decodes")
        for j, sid in enumerate(emptied):
            if sid not in chunks_of:
                raise refuse(f"emptied[{j}]", f"session {show_id(sid)} is not in the rotation")
            if chunks_of[sid]:
                raise refuse(f"emptied[{j}]", f"session {show_id(sid)} has prefill queued")
        held = set(emptied)
        for i, sid in enumerate(order):
            if not chunks_of[sid] and sid not in held:
                why = f"session {show_id(sid)} has no prefill queued (and is not in emptied)"
                raise refuse(f"rotation[{i}]", why)
        for t in decodes:
            self._decodes.push(t)
        self._rotation.restore([(sid, chunks_of[sid]) for sid in order])

    def enqueue(self, task: Task) -> None:
        if task.kind is DECODE:
            self._decodes.push(task)
        else:
            self._rotation.add(task)

    def take_batch(self) -> list[Task]:
        taken: list[Task] = []
        decoding: dict[Id, Id] = {}  # sid -> the tid of its decode in this batch
        self._decodes.take(taken, decoding, self.max_decode_sequences, None)
        # Sessions with an output-producing chunk in the batch, and that chunk's tid (a
        # decoding session is passed over anyway, so only chunks add to it).
        outputs: dict[Id, Id] = {}
        # Explaining: each stretch of the rotation a walk passed over, with the tokens it
        # had left; the reasons are worked out from them only if asked.
        walks: list[int] | None = [] if self.explaining else None
        spent = self._rotation.take(
            taken, len(taken), self.max_batch_tokens, decoding, outputs, None, walks
        )
        if walks is not None:
            epoch = self._rotation.epoch
            self._explain_later(lambda: self._reasons(decoding, spent, outputs, walks, epoch))
        return taken

    def _reasons(
        self,
        decoding: dict[Id, Id],
        spent: int,
        outputs: dict[Id, Id],
        walks: list[int],
        epoch: int,
    ) -> dict[int, tuple[str, str]]:
        """Why each task still queued was left out (docs/policies.md, decode-first's codes)."""
        why: Why = {}
        cap = self.max_decode_sequences
        for t in self._decodes.ordered():
            if t.sid in decoding:
                detail = f"decode {show_id(decoding[t.sid])} of its session is in this batch"
                why[id(t)] = ("one_decode_per_session", detail)
            else:
                why[id(t)] = ("decode_cap", decode_cap_text(cap))
        budget = self.max_batch_tokens
        spent_all = ("budget_spent", f"{spent} of {budget} tokens were spent before its turn")
        # The room each session's last turn had (none after the slots were renumbered:
        # reasons are asked for before the next batch).
        rooms = self._rotation.walked(walks) if epoch == self._rotation.epoch else {}

        def front(sid: Id, t: Task) -> tuple[str, str]:
            room = rooms.get(sid)
            if room is None:
                return spent_all
            if t.size > room:
                return ("no_room", f"{t.size} tokens, {room} left")
            # Its turn came and it fitted: only fix 2 passes such a chunk over.
            detail = f"chunk {show_id(outputs[sid])} of its session produces output"
            return ("second_output", detail)

        chunk_reasons(why, self._chunks, decoding, front)
        return why

    def remove_session(self, sid: Id) -> list[Task]:
        dropped: list[Task] = []
        chunks = self._chunks.get(sid)
        if chunks:
            dropped.extend(chunks)
            chunks.clear()
            self._rotation.emptied(sid)
        dropped.extend(self._decodes.remove_session(sid))
        return dropped

    def reset(self) -> None:
        self._decodes.clear()
        self._rotation.clear()
