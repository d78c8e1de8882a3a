"""The compiler's one task representation (issue 14, item 2): what makes it fast stays exact.

The passes share one index-based :class:`~rtgraph.compiler.taskgraph.Dag` (no networkx on the
compile path), build their records without the frozen constructor
(:func:`~rtgraph.compiler.taskgraph.build`), keep the hazards when a memory re-plan moved no
byte, and the provisional plan runs no planner. Each shortcut must give what the long way
gives; the timings themselves are benchmarks' business (``benchmarks/simulate_speed.py``).
"""

from __future__ import annotations

import heapq
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rtgraph
from rtgraph.compiler.optimizer.pipeline import optimize
from rtgraph.compiler.optimizer.rewrite import mentioned, movable_ops, pinned, rebuilt, uses
from rtgraph.compiler.options import CompileOptions
from rtgraph.compiler.passes import plan_memory as plan_memory_module
from rtgraph.compiler.passes.assign_streams import assign_streams
from rtgraph.compiler.passes.event_ids import colour_ids
from rtgraph.compiler.passes.find_hazards import find_hazards
from rtgraph.compiler.passes.lower import lower
from rtgraph.compiler.passes.plan_memory import plan_memory, plan_provisional_memory, plan_with
from rtgraph.compiler.scheduling.policies import Assignment
from rtgraph.compiler.taskgraph import Dag, DagTask, Hazard, build, slotted_constructor
from rtgraph.errors import UsageError
from rtgraph.stream_program.program import Launch, Operand, Record, StreamInfo, Task, Wait

MODELS = Path(__file__).resolve().parent.parent / "models"


@pytest.mark.parametrize(
    ("cls", "values"),
    [
        (
            DagTask,
            {"id": 3, "name": "t", "op": "kernel", "unit": "cube", "inputs": ()}
            | {"output": None, "reads": ("a",), "writes": ("b",), "duration_us": 1.5},
        ),
        (Hazard, {"src": 1, "dst": 2, "kind": "WAR", "lo": 0, "hi": 64, "reuse": True}),
        (Hazard, {"src": 1, "dst": 2, "kind": "ORDER"}),
        (
            Operand,
            {"tensor": "x", "offset": 512, "shape": (2, 3), "strides": (12, 4), "dtype": "f32"},
        ),
    ],
)
def test_build_makes_what_the_constructor_makes(cls, values):
    made, built = cls(**values), build(cls, values)
    assert built == made and repr(built) == repr(made) and type(built) is cls
    with pytest.raises(AttributeError):
        built.id = 9  # still frozen


def test_build_refuses_slotted_records():
    # A stream program's tasks and commands are slotted (no ``__dict__`` to fill): they are
    # made by their constructors, and build() says so rather than making a broken record.
    values = {"id": 0, "name": "t", "op": "add", "unit": "vector", "inputs": (), "output": None}
    values |= {"reads": ((0, 8),), "writes": ((8, 16),), "deps": (), "regions": ("a", "b")}
    with pytest.raises(AssertionError):
        build(Task, values)


def test_build_gives_each_record_its_own_default_factory_value():
    values = {"id": 0, "name": "t", "op": "kernel", "unit": "cube", "inputs": ()}
    values |= {"output": None, "reads": (), "writes": ()}
    a, b = build(DagTask, values), build(DagTask, values)
    assert a.attrs == {} and a.attrs is not b.attrs


def _lowered(name: str, **options) -> tuple:
    program = rtgraph.load(MODELS / name)
    bound = CompileOptions(**options).for_device(rtgraph.device())
    return lower(optimize(program, bound), bound), bound


@pytest.mark.parametrize("name", ["transformer_block.rtg", "overlap.rtg", "double_buffer.rtg"])
def test_the_dag_lists_predecessors_in_the_order_the_tasks_were_made(name):
    graph, _ = _lowered(name)
    dag = graph.dag
    assert isinstance(dag, Dag) and len(dag) == len(graph.tasks)
    for t in range(len(dag)):
        for p in dag.predecessors(t):
            assert dag.has_edge(p, t) and t in list(dag.successors(p))
    edges = sorted(dag.edges)
    assert len(edges) == len(set(edges)) == dag.number_of_edges()
    assert all(src < dst for src, dst in edges)  # program order, after renumbering


def test_hazards_are_kept_when_the_re_plan_moves_no_byte_and_found_again_when_it_does():
    graph, options = _lowered("transformer_block.rtg", streams="by-unit")
    found = find_hazards(plan_provisional_memory(graph, options), options)
    assigned = assign_streams(found, options)
    same_bytes = plan_with(assigned, "none")
    assert find_hazards(same_bytes, options) is same_bytes  # nothing to find again
    reused = plan_memory(assigned, replace(options, memory="greedy"))
    again = find_hazards(reused, options)
    assert again is not reused
    assert any(h.reuse for h in again.hazards)  # the reuse the plan made is ordered


def test_the_provisional_plan_runs_no_planner(monkeypatch):
    graph, options = _lowered("attention.rtg")

    def refuse(*args, **kwargs):
        raise AssertionError("the provisional plan needs no placement")

    monkeypatch.setattr(plan_memory_module, "plan", refuse)
    planned = plan_provisional_memory(graph, options)
    assert planned.notes["memory"]["pool_lower_bound"] > 0


def test_compiling_does_not_import_networkx():
    code = (
        "import sys, rtgraph\n"
        f"rtgraph.compile(rtgraph.load({str(MODELS / 'mlp.rtg')!r}))\n"
        "print('networkx' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


KERNELS = """
device "toy"
program k(N = 4) {
    a = kernel(unit = cube, us = 2)
    for i in 0..N {
        a = kernel(unit = vector, us = 1, after = [a])
    }
}
"""


def test_the_optimizer_returns_a_program_of_synthetic_kernels_untouched():
    # nothing a pass may move: every pass hands the same object on, at any level
    program = rtgraph.parse(KERNELS, "k.rtg")
    assert movable_ops(program) == frozenset()
    for level in (0, 1, 2):
        bound = CompileOptions(opt_level=level).for_device(rtgraph.device("toy"))
        assert optimize(program, bound) is program


def test_analyses_are_shared_by_the_passes_that_see_one_program_and_redone_for_another():
    program = rtgraph.load(MODELS / "transformer_naive.rtg", {"S": 64, "D": 96, "F": 128})
    assert pinned(program) is pinned(program) and uses(program) is uses(program)
    assert "matmul" in movable_ops(program)
    # a rebuilt program (new nodes) gets its own analyses, not the old one's
    fewer = rebuilt(program, program.nodes[:-1])
    assert uses(fewer) is not uses(program)
    assert uses(fewer) == _count_uses(fewer)
    # a caller that edits a node list in place is not served a stale answer
    program.nodes.pop()
    assert uses(program) == _count_uses(program)


def _count_uses(program) -> dict[str, int]:
    count: dict[str, int] = {}
    for name in mentioned(program):
        count[name] = count.get(name, 0) + 1
    return count


def test_the_slotted_constructor_makes_what_the_constructor_makes():
    # The barrier pass makes the stream program's tasks with it (18 slots, once per task).
    values = {"id": 4, "name": "t", "op": "kernel", "unit": "cube", "inputs": (), "output": None}
    values |= {"reads": ((0, 8),), "writes": ((8, 16),), "flops": 3, "bytes_read": 8}
    values |= {"bytes_written": 8, "block_dim": 2, "attrs": {"k": 1}, "duration_us": 1.5}
    values |= {"host": None, "deps": (1, 2), "span": None, "regions": ("a", "b")}
    made, fast = Task(**values), slotted_constructor(Task)(*values.values())
    assert fast == made and repr(fast) == repr(made)
    with pytest.raises(AttributeError):
        fast.id = 9  # still frozen
    with pytest.raises(AssertionError):
        slotted_constructor(Operand)  # not slotted: build() fills those


def colour_events(commands, first_id):
    """colour_ids applied to a list of commands: its compiler records and waits recoloured."""
    places = [
        pos
        for pos, c in enumerate(commands)
        if (type(c) is Record or type(c) is Wait) and c.event >= first_id
    ]
    events = [commands[pos].event for pos in places]
    is_record = [type(commands[pos]) is Record for pos in places]
    device_ids, num_events, peak = colour_ids(events, is_record, first_id)
    out = list(commands)
    for pos, record, device_id in zip(places, is_record, device_ids, strict=True):
        out[pos] = (Record if record else Wait)(out[pos].stream, device_id, out[pos].span)
    return out, num_events, peak


def _colour_by_walking(commands, first_id):
    """The colouring as first written, command by command: the specification of colour_ids."""
    last_use = {}
    for pos, c in enumerate(commands):
        if isinstance(c, (Record, Wait)) and c.event >= first_id:
            last_use[c.event] = pos
    free, live, ids, out, next_id, peak = [], [], {}, [], first_id, 0
    for pos, c in enumerate(commands):
        while live and live[0][0] < pos:
            heapq.heappush(free, heapq.heappop(live)[1])
        if isinstance(c, Record) and c.event >= first_id:
            ev = heapq.heappop(free) if free else next_id
            next_id += ev == next_id
            ids[c.event] = ev
            heapq.heappush(live, (last_use[c.event], ev))
            peak = max(peak, len(live))
            c = Record(c.stream, ev)
        elif isinstance(c, Wait) and c.event >= first_id:
            c = Wait(c.stream, ids[c.event])
        out.append(c)
    return out, next_id, peak


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 5), st.integers(0, 3)), max_size=60))
def test_colouring_on_integers_gives_what_the_command_walk_gives(steps):
    # Random streams of launches, compiler records (each a fresh logical id), waits on a
    # recorded id, and user events below first_id, which are left alone.
    first_id, commands, recorded, task = 2, [], [], 0
    for stream, action, pick in steps:
        if action <= 1:
            commands.append(Launch(stream, task))
            task += 1
        elif action <= 3:
            recorded.append(first_id + 10 + len(recorded))
            commands.append(Record(stream, recorded[-1]))
        elif action == 4 and recorded:
            commands.append(Wait(stream, recorded[pick % len(recorded)]))
        else:
            commands.append((Record if pick % 2 else Wait)(stream, pick % first_id))
    assert colour_events(commands, first_id) == _colour_by_walking(commands, first_id)


class _LateConsumer:
    """A broken policy: submits one consumer before its producer. It notes the edge the
    compiler should name: the first, in the DAG's edge order, that its order breaks."""

    name = "late-consumer"
    broken: tuple[int, int] | None = None

    def assign(self, graph):
        order = [i for i in graph.script if isinstance(i, int)]
        src, dst = list(graph.dag.edges)[-1]
        order.remove(dst)
        order.insert(order.index(src), dst)
        position = {t: k for k, t in enumerate(order)}
        self.broken = next((s, d) for s, d in graph.dag.edges if position[s] > position[d])
        return Assignment((StreamInfo(0, "s"),), {t.id: 0 for t in graph.tasks}, tuple(order))


def test_a_policy_breaking_an_edge_is_told_which_edge():
    policy = _LateConsumer()
    with pytest.raises(UsageError, match="before task") as refused:
        rtgraph.compile(rtgraph.load(MODELS / "transformer_block.rtg"), streams=policy)
    src, dst = policy.broken
    assert f"submits task {dst} before task {src}," in str(refused.value)
