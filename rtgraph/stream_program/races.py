"""The static race checker: is every conflicting pair of tasks ordered by happens-before?

Reads only the stream program (so it checks compiled programs, hand-written explicit-stream
programs, and JSON files from anywhere alike). Happens-before is computed with vector clocks
as the runtimes define it: stream order (unless the device reorders, where only fences order a
stream), a wait takes the clock of the latest record of its event submitted before it, and a
host sync orders everything submitted before it before everything submitted after. Conflicts
come from an :class:`~rtgraph.stream_program.hazards.AccessTracker` over the tasks' byte ranges in
submission
order — each new access is checked against the last writer and the readers since, the scheme
of PyTorch's stream sanitizer.

A race is then *named* in program order — the order of task ids, which is the order of the
source (loops unrolled) and the order the reference interpreter computes in — not in the order the
compiler happened to submit the two launches: a read that the program places before a write is a
WAR even when the write's launch was submitted first. The fix :func:`fix_hint` gives orders the
two tasks the way the program means them, and says how to place it when the later task stands
above the earlier one in the source (a later iteration of a loop).
"""

from __future__ import annotations

from dataclasses import dataclass

from rtgraph.errors import Span
from rtgraph.stream_program.hazards import AccessTracker
from rtgraph.stream_program.program import (
    Barrier,
    Callback,
    Launch,
    Record,
    StreamProgram,
    Sync,
    Task,
    Wait,
)

#: A conflict's kind seen from the other end: the earlier access becomes the later one.
_FLIPPED = {"RAW": "WAR", "WAR": "RAW", "WAW": "WAW"}


@dataclass(frozen=True)
class Race:
    """Two tasks that touch ``[lo, hi)`` — at least one writing — with nothing ordering them.

    ``first`` comes before ``second`` in program order (task ids), and ``kind`` names the two
    accesses in that order: RAW — ``first`` writes, ``second`` reads; WAR — ``first`` reads,
    ``second`` writes; WAW — both write.
    """

    first: int
    second: int
    kind: str
    lo: int
    hi: int
    first_stream: int
    second_stream: int


@dataclass(frozen=True)
class BadWait:
    """A wait on an event that was never recorded (an error under ``cann`` semantics)."""

    stream: int
    event: int
    span: Span | None


@dataclass(frozen=True)
class RaceReport:
    races: tuple[Race, ...]
    bad_waits: tuple[BadWait, ...]

    @property
    def ok(self) -> bool:
        return not self.races and not self.bad_waits


def check_races(
    program: StreamProgram, *, reorder: bool = False, event_mode: str = "cann"
) -> RaceReport:
    """Every unordered conflicting pair of ``program``, and every wait on a never-recorded event."""
    n = len(program.streams)
    clock = [[0] * n for _ in range(n)]
    count = [0] * n
    event_clock: dict[int, tuple[int, ...]] = {}
    stream_of: dict[int, int] = {}
    seq: dict[int, int] = {}
    tracker = AccessTracker()
    races: list[Race] = []
    bad: list[BadWait] = []

    def fence(q: int) -> None:
        clock[q][q] = max(clock[q][q], count[q])

    def snapshot(q: int) -> tuple[int, ...]:
        c = list(clock[q])
        c[q] = count[q]
        return tuple(c)

    def merge(q: int, other: tuple[int, ...]) -> None:
        mine = clock[q]
        for p, v in enumerate(other):
            if v > mine[p]:
                mine[p] = v

    for cmd in program.commands:
        if isinstance(cmd, Launch):
            q, t = cmd.stream, cmd.task
            task = program.tasks[t]
            for c in tracker.access(t, task.reads, task.writes):
                p = stream_of[c.src]
                if clock[q][p] < seq[c.src]:
                    races.append(_in_program_order(Race(c.src, t, c.kind, c.lo, c.hi, p, q)))
            count[q] += 1
            if not reorder:
                clock[q][q] = count[q]
            stream_of[t] = q
            seq[t] = count[q]
        elif isinstance(cmd, Record):
            event_clock[cmd.event] = snapshot(cmd.stream)
            fence(cmd.stream)
        elif isinstance(cmd, Wait):
            if cmd.event in event_clock:
                merge(cmd.stream, event_clock[cmd.event])
            elif event_mode == "cann":
                bad.append(BadWait(cmd.stream, cmd.event, cmd.span))
            fence(cmd.stream)
        elif isinstance(cmd, Barrier | Callback):
            fence(cmd.stream)
        elif isinstance(cmd, Sync):
            if cmd.kind == "event":
                done = event_clock.get(cmd.target, tuple([0] * n))
            elif cmd.kind == "stream":
                done = snapshot(cmd.target)
            else:
                done = tuple(count)
            for q in range(n):
                merge(q, done)
    return RaceReport(tuple(races), tuple(bad))


def _in_program_order(race: Race) -> Race:
    """``race`` with its tasks in program order (the tracker sees them in submission order)."""
    if race.first < race.second:
        return race
    return Race(
        race.second,
        race.first,
        _FLIPPED[race.kind],
        race.lo,
        race.hi,
        race.second_stream,
        race.first_stream,
    )


def _where(task: Task) -> str:
    return f"line {task.span.line}" if task.span is not None else "no source line"


def describe_race(program: StreamProgram, race: Race) -> str:
    """One race in words: both tasks, streams, bytes, access kinds, lines, and the fix."""
    a, b = program.tasks[race.first], program.tasks[race.second]
    sa, sb = program.streams[race.first_stream], program.streams[race.second_stream]
    what = {"RAW": "reads what", "WAR": "overwrites what", "WAW": "overwrites what"}[race.kind]
    done = {"RAW": "wrote", "WAR": "reads", "WAW": "wrote"}[race.kind]
    return (
        f"{race.kind} race on bytes [{race.lo:#x}, {race.hi:#x}): task {b.id} '{b.name}' "
        f"({b.op}, stream {sb.name}, {_where(b)}) {what} task {a.id} '{a.name}' "
        f"({a.op}, stream {sa.name}, {_where(a)}) {done}, with nothing ordering them"
    )


def _above(later: Task, earlier: Task) -> bool:
    """Whether ``later`` (second in program order) stands above ``earlier`` in the source."""
    if later.span is None or earlier.span is None:
        return False
    return (later.span.line, later.span.col) <= (earlier.span.line, earlier.span.col)


def fix_hint(program: StreamProgram, race: Race) -> str:
    """A fix that orders the two tasks the way the program means them, valid where they stand.

    The event is recorded after the first task and waited on before the second. When the
    second task stands above the first in the source — it comes later only by going round a
    loop — the wait would run before any record in the first iteration, so the hint adds the
    record that must precede the loop (the double-buffering pattern).
    """
    a, b = program.tasks[race.first], program.tasks[race.second]
    sa, sb = program.streams[race.first_stream], program.streams[race.second_stream]
    if race.first_stream == race.second_stream:
        return f"put a `barrier` on stream {sa.name} after '{a.name}' ({_where(a)})"
    hint = (
        f"`record` an event on stream {sa.name} after '{a.name}' ({_where(a)}) and `wait` "
        f"for it on stream {sb.name} before '{b.name}' ({_where(b)})"
    )
    if _above(b, a):
        hint += (
            f"; '{b.name}' comes after '{a.name}' only in a later iteration, so also record "
            f"the event once on stream {sa.name} before the loop, for the first iteration's wait"
        )
    return hint
