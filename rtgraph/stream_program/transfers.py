"""The static check of a cluster's transfers: every message sent once and received once, both
ends agreeing on what it carries, and no cycle of cross-device waits.

Reads only the per-rank stream programs (rank r's at index r), so it checks a compiled
cluster and a hand-written one alike. A transfer is a task on the ``link`` unit —
``send``, ``recv`` or ``recv_reduce`` with attrs ``peer`` and ``tag`` (:mod:`rtgraph.ops.comm`) —
and a message is one ``(source, destination, tag)``: one send on the source naming the
destination as its peer, one receive on the destination naming the source.

**Cycles.** Happens-before over the whole cluster is each rank's own — stream order, a wait
after the record whose generation it captured, a host sync after what it waits for and before
everything submitted after it (the per-stream queues :mod:`.tables` derives when a program is
validated) — plus one edge per message from its send to its receive: a receive completes only
after its send started, and a send needs nothing from its receiver. A cycle in that graph is a
set of waits no run can satisfy; it is found with Kahn's algorithm (linear in entries and
edges) and reported by walking predecessors among what Kahn could not order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rtgraph.dtypes import DTYPES
from rtgraph.errors import StreamProgramError
from rtgraph.stream_program.commands import HOST_ONLY, Sync
from rtgraph.stream_program.program import StreamProgram, Task, stream_tables
from rtgraph.stream_program.tables import LAUNCH, WAIT, StreamTables

#: The transfer ops, each at one end of a message.
SENDS = ("send",)
RECEIVES = ("recv", "recv_reduce")

Key = tuple[int, int, object]  # (source rank, destination rank, tag)


@dataclass(frozen=True)
class End:
    """One end of a message: ``rank``'s task ``task``."""

    rank: int
    task: Task

    @property
    def where(self) -> str:
        return f"rank {self.rank}'s task {self.task.id} '{self.task.name}' ({self.task.op})"


def check_transfers(programs: Sequence[StreamProgram]) -> None:
    """Refuse, as a located :class:`StreamProgramError`, a receive with no send, a send no one
    receives, a message tag used twice, two ends that disagree on bytes or dtype, and a cycle
    of cross-device waits."""
    sends, recvs = _ends(programs)
    for key, recv in recvs.items():
        if key not in sends:
            src, dst, tag = key
            raise StreamProgramError(
                f"{recv.where} receives from rank {src} with tag {tag!r}, but rank {src} sends "
                f"no message to rank {dst} with that tag{_collective(recv.task)}",
                span=recv.task.span,
                hint=f"rank {src} needs a send with peer {dst} and tag {tag!r}",
            )
    for key, send in sends.items():
        if key not in recvs:
            src, dst, tag = key
            raise StreamProgramError(
                f"{send.where} sends to rank {dst} with tag {tag!r}, but rank {dst} receives "
                f"no message from rank {src} with that tag{_collective(send.task)}",
                span=send.task.span,
                hint=f"rank {dst} needs a recv (or recv_reduce) with peer {src} and tag {tag!r}",
            )
        _agree(key, send, recvs[key])
    _no_wait_cycle(programs, sends, recvs)


def _ends(programs: Sequence[StreamProgram]) -> tuple[dict[Key, End], dict[Key, End]]:
    """Every message's send and receive, by ``(source, destination, tag)``."""
    n = len(programs)
    sends: dict[Key, End] = {}
    recvs: dict[Key, End] = {}
    for rank, program in enumerate(programs):
        for task in program.tasks:
            if task.op not in SENDS and task.op not in RECEIVES:
                continue
            end = End(rank, task)
            peer, tag = task.attrs.get("peer"), task.attrs.get("tag")
            if not isinstance(peer, int) or not 0 <= peer < n or peer == rank or tag is None:
                raise StreamProgramError(
                    f"{end.where} needs a 'peer' among the other ranks (0..{n - 1}) and a "
                    f"'tag', got peer {peer!r}, tag {tag!r}",
                    span=task.span,
                )
            sending = task.op in SENDS
            key = (rank, peer, tag) if sending else (peer, rank, tag)
            table = sends if sending else recvs
            if key in table:
                first = table[key]
                raise StreamProgramError(
                    f"tag {tag!r} is used twice for messages from rank {key[0]} to rank "
                    f"{key[1]}: by {first.where} and by {end.where}",
                    span=task.span,
                    hint="each (source, destination, tag) must name one message",
                )
            table[key] = end
    return sends, recvs


def _carried(task: Task) -> tuple[int, str] | None:
    """The bytes and dtype one end of a message carries: a send's operand, a receive's result."""
    operand = task.inputs[0] if task.op in SENDS and task.inputs else task.output
    if operand is None or operand.dtype not in DTYPES:
        return None
    return math.prod(operand.shape) * DTYPES[operand.dtype].itemsize, operand.dtype


def _agree(key: Key, send: End, recv: End) -> None:
    a, b = _carried(send.task), _carried(recv.task)
    if a is None or b is None or a == b:
        return
    src, dst, tag = key
    what = "dtype" if a[1] != b[1] else "size"
    raise StreamProgramError(
        f"the message from rank {src} to rank {dst} (tag {tag!r}) disagrees on its {what}"
        f"{_collective(recv.task) or _collective(send.task)}: {send.where} sends "
        f"{a[0]} bytes of {a[1]}, {recv.where} receives {b[0]} bytes of {b[1]}",
        span=recv.task.span or send.task.span,
        hint="both ends of a message must carry the same bytes and dtype",
    )


def _collective(task: Task) -> str:
    """`` in the collective that makes 'g1' (step 0)`` for a collective's step, else ``""``.

    Collectives expand into tasks named after the collective's result: a receive is
    ``<result>%s<step>c<chunk>``, a send reads a chunk ``<result>%c<chunk>`` or
    ``<result>%s<step>c<chunk>`` (:mod:`rtgraph.compiler.parallel.expand_collectives`)."""
    names = [task.name] + ([task.inputs[0].tensor] if task.op in SENDS and task.inputs else [])
    for name in names:
        base, sep, part = name.partition("%")
        if sep and base and part[:1] in ("s", "c"):
            step = part[1:].split("c")[0] if part.startswith("s") else ""
            at = f" (step {step})" if step.isdigit() and task.op in RECEIVES else ""
            return f" in the collective that makes '{base}'{at}"
    return ""


# --- cycles of cross-device waits ----------------------------------------------------------
def _no_wait_cycle(
    programs: Sequence[StreamProgram], sends: dict[Key, End], recvs: dict[Key, End]
) -> None:
    succ: list[list[int]] = []
    what: list[tuple[int, Task | None]] = []  # per node: its rank and task (None: not a launch)
    node_of: list[dict[int, int]] = []  # per rank: task id → node
    for rank, program in enumerate(programs):
        node_of.append(_rank_graph(rank, program, succ, what))
    for key, send in sends.items():
        recv = recvs[key]
        succ[node_of[send.rank][send.task.id]].append(node_of[recv.rank][recv.task.id])
    cycle = _cycle(succ)
    if not cycle:
        return
    steps = [(rank, task) for rank, task in (what[v] for v in cycle) if task is not None]
    ranks = sorted({rank for rank, _ in steps})
    listed = " → ".join(f"rank {rank}'s task {t.id} '{t.name}' ({t.op})" for rank, t in steps)
    first = next((t.span for _, t in steps if t.span is not None), None)
    raise StreamProgramError(
        f"a cycle of cross-device waits over ranks {', '.join(map(str, ranks))}: {listed} → "
        f"back to rank {steps[0][0]}'s task {steps[0][1].id}; no run can finish",
        span=first,
        hint="order each rank's transfers so that no two ranks wait on each other (a rank's "
        "sends of a step before its receives)",
    )


def _rank_graph(
    rank: int, program: StreamProgram, succ: list[list[int]], what: list[tuple[int, Task | None]]
) -> dict[int, int]:
    """Add ``program``'s happens-before to ``succ`` (a node per queue entry and per host
    sync); return each task's node."""
    tables = stream_tables(program)
    base: dict[int, int] = {}
    for sid, kinds in tables.kind.items():
        base[sid] = len(succ)
        for slot, kind in enumerate(kinds):
            task = program.tasks[tables.ref[sid][slot]] if kind == LAUNCH else None
            what.append((rank, task))
            succ.append([base[sid] + slot + 1] if slot + 1 < len(kinds) else [])
    for sid, kinds in tables.kind.items():
        for slot, kind in enumerate(kinds):
            gen = tables.gen[sid][slot]
            if kind == WAIT and gen:
                at_sid, at_slot = tables.record_at[(tables.ref[sid][slot], gen)]
                succ[base[at_sid] + at_slot].append(base[sid] + slot)
    _syncs(program, tables, base, succ, what, rank)
    return {t: base[tables.task_stream[t]] + tables.task_slot[t] for t in range(len(program.tasks))}


def _syncs(
    program: StreamProgram,
    tables: StreamTables,
    base: dict[int, int],
    succ: list[list[int]],
    what: list[tuple[int, Task | None]],
    rank: int,
) -> None:
    """A host sync: after what it waits for, before every entry submitted after it."""
    last: dict[int, int] = {}  # stream → its latest entry's node so far, in host order
    seen: dict[int, int] = {}  # stream → entries submitted so far
    latest_sync: int | None = None
    joined: dict[int, int | None] = {}  # stream → the sync its next entry must follow
    for i, cmd in enumerate(program.commands):
        if isinstance(cmd, Sync):
            node = len(succ)
            succ.append([])
            what.append((rank, None))
            if cmd.kind == "device":
                before = list(last.values())
            elif cmd.kind == "stream":
                before = [last[cmd.target]] if cmd.target in last else []
            else:
                gen = tables.sync_gen.get(i, 0)
                at = tables.record_at.get((cmd.target, gen)) if gen else None
                before = [base[at[0]] + at[1]] if at else []
            for v in before:
                succ[v].append(node)
            if latest_sync is not None:
                succ[latest_sync].append(node)
            latest_sync = node
            joined = dict.fromkeys(base, node)
            continue
        if isinstance(cmd, HOST_ONLY):
            continue  # an Alloc or Free: host work, no queue entry
        sid = cmd.stream
        node = base[sid] + seen.get(sid, 0)
        seen[sid] = seen.get(sid, 0) + 1
        after = joined.get(sid)
        if after is not None:
            succ[after].append(node)
            joined[sid] = None
        last[sid] = node


def _cycle(succ: list[list[int]]) -> list[int]:
    """A cycle of ``succ`` in edge order, or ``[]``: Kahn's algorithm removes every node
    with no predecessor left; each node it leaves has a predecessor it also left, so walking
    predecessors from one must come round."""
    n = len(succ)
    indegree = [0] * n
    pred: list[list[int]] = [[] for _ in range(n)]
    for v, out in enumerate(succ):
        for w in out:
            indegree[w] += 1
            pred[w].append(v)
    ready = [v for v in range(n) if not indegree[v]]
    while ready:
        v = ready.pop()
        for w in succ[v]:
            indegree[w] -= 1
            if not indegree[w]:
                ready.append(w)
    left = [v for v in range(n) if indegree[v]]
    if not left:
        return []
    order: dict[int, int] = {}
    v = left[0]
    while v not in order:
        order[v] = len(order)
        v = next(p for p in pred[v] if indegree[p])
    walked = list(order)[order[v] :]
    return walked[::-1]
