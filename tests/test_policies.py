"""Stream-assignment policies: the built-ins, and the interface a user implements."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import MODELS

import rtgraph
from rtgraph.compiler.scheduling.policies import Assignment, StreamPolicy
from rtgraph.device import DeviceSpec
from rtgraph.errors import UsageError
from rtgraph.stream_program import StreamInfo
from rtgraph.stream_program.races import check_races


class RoundRobin:
    """A user's policy: tasks dealt to two streams in program order, whatever their unit."""

    name = "round-robin"

    def assign(self, graph):
        streams = (StreamInfo(0, "even"), StreamInfo(1, "odd"))
        return Assignment(streams, {t.id: t.id % 2 for t in graph.tasks})


class Backwards:
    """A broken policy: submits in reverse program order."""

    name = "backwards"

    def assign(self, graph):
        order = tuple(reversed([i for i in graph.script if isinstance(i, int)]))
        return Assignment((StreamInfo(0, "s"),), {t.id: 0 for t in graph.tasks}, order)


def _mlp():
    return rtgraph.load(MODELS / "mlp.rtg", device="toy")


def test_a_user_policy_plugs_in_and_the_compiler_keeps_it_correct():
    assert isinstance(RoundRobin(), StreamPolicy)
    program = _mlp()
    compiled = rtgraph.compile(program, device="toy", streams=RoundRobin(), check=True)
    assert [s.name for s in compiled.streams] == ["even", "odd"]
    assert {compiled.task_stream()[t.id] for t in compiled.tasks} == {0, 1}
    assert compiled.meta["policy"] == "round-robin"
    # Every hand-off between the two streams got an event; the result is race-free and exact.
    assert compiled.meta["barriers"]["waits"] > 0
    assert check_races(compiled).ok
    result = rtgraph.run(compiled, device="toy")
    reference = rtgraph.evaluate(program)
    assert all(v["equal"] for v in rtgraph.compare(result.outputs, reference).values())


def test_a_policy_that_breaks_dependencies_is_refused():
    with pytest.raises(UsageError, match="before task"):
        rtgraph.compile(_mlp(), device="toy", streams=Backwards())


@pytest.mark.parametrize("name", ["single", "by-unit", "by-unit:3", "list"])
def test_builtin_policies(name):
    compiled = rtgraph.compile(_mlp(), device="toy", streams=name, check=True)
    units = {}
    for t in compiled.tasks:
        units.setdefault(compiled.task_stream()[t.id], set()).add(t.unit)
    if name == "single":
        assert len(compiled.streams) == 1
    else:  # every other built-in keeps each stream to one unit type
        assert all(len(u) == 1 for u in units.values())
    if name == "by-unit":
        assert len(compiled.streams) == len({t.unit for t in compiled.tasks})


def test_by_unit_n_validates_its_count():
    with pytest.raises(UsageError):
        rtgraph.compile(_mlp(), device="toy", streams="by-unit:0")
    with pytest.raises(UsageError):
        rtgraph.compile(_mlp(), device="toy", streams="by-unit:x")


def test_list_maps_a_host_bound_decode_step_onto_dependency_chains():
    # One decode step is a long dependent chain of short tasks: a stream per unit would cost
    # an event and an ioctl at every Cube↔Vector hop, so list keeps chains on one stream.
    device = rtgraph.device("ascend-910b")
    program = rtgraph.load(MODELS / "llm_decode.rtg")
    by_unit = rtgraph.compile(program, device=device, streams="by-unit")
    listed = rtgraph.compile(program, device=device, streams="list")
    assert all(s.name.startswith("chain.") for s in listed.streams)
    assert listed.meta["barriers"]["waits"] < by_unit.meta["barriers"]["waits"] / 2
    fast = rtgraph.run(listed, device=device, numerics=False)
    slow = rtgraph.run(by_unit, device=device, numerics=False)
    assert fast.host.ioctls < slow.host.ioctls
    assert fast.makespan_us < slow.makespan_us


def test_list_keeps_unit_lanes_where_the_device_is_the_bottleneck():
    device = rtgraph.device("ascend-910b")
    program = rtgraph.load(MODELS / "transformer_block.rtg")  # long tasks: device-bound
    listed = rtgraph.compile(program, device=device, streams="list")
    names = {s.name.split(".")[0] for s in listed.streams}
    assert names == {"cube", "vector", "dma"}


def two_core_toy(folder: Path) -> DeviceSpec:
    """The toy device with two Vector cores and every overhead zero: a makespan is the
    schedule's own."""
    lines = []
    section = ""
    for line in (Path(rtgraph.__file__).parent / "device/specs/toy.toml").read_text().splitlines():
        key = line.split("#")[0].split("=")[0].strip()
        section = key if key.startswith("[") else section
        if key.endswith("_us"):
            line = f"{key} = 0.0"
        elif section == "[units.vector]" and key == "cores":
            line = "cores = 2"
        lines.append(line.replace('name = "toy"', 'name = "two-cores"'))
    path = Path(folder) / "two-cores.toml"
    path.write_text("\n".join(lines) + "\n")
    return rtgraph.device(str(path))


# Two short independent kernels written first, then a chain of two long ones. Dealt in program
# order to the stream that can start each earliest, the short ones take both cores at 0 and the
# chain starts at 1 (makespan 9); by bottom level the chain starts at 0 beside them (8, optimal).
SHORTS_THEN_CHAIN = """
program p() {
    a = kernel(unit = vector, us = 1)
    b = kernel(unit = vector, us = 1)
    x = kernel(unit = vector, us = 4)
    y = kernel(unit = vector, us = 4, after = [x])
}
"""


def test_by_unit_n_deals_tasks_by_bottom_level_not_program_order(tmp_path):
    device = two_core_toy(tmp_path)
    program = rtgraph.parse(SHORTS_THEN_CHAIN, device=device)
    compiled = rtgraph.compile(program, device=device, streams="by-unit:2", check=True)
    result = rtgraph.run(compiled, device=device, numerics=False)
    assert result.makespan_us == 8.0
    # x and y share a stream (no event), a and b the other one
    stream = compiled.task_stream()
    names = {t.name: stream[t.id] for t in compiled.tasks}
    assert names["x"] == names["y"] != names["a"] == names["b"]
    assert compiled.meta["barriers"]["waits"] == 0
