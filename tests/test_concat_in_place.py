"""Concatenations computed in place: each part written straight into its slice of the result,
and never a part that has no task of its own to write there (a concat nested in a concat —
DenseNet's blocks — found by the ONNX conformance run: the outer result missed the inner one)."""

from __future__ import annotations

import pytest

import rtgraph
from rtgraph.compiler.optimizer.rewrite import concats_in_place

NESTED = """
program nested() {
    input  x : f32[1, 2, 2, 2]
    a = relu(x)
    c1 = concat(a, sigmoid(a), axis = 1)
    d = reduce_sum(c1, axis = 1, keepdims = true)
    c2 = concat(c1, d, axis = 1)
    output c2
}
"""


def test_a_concat_is_not_a_part_made_in_place_but_its_own_parts_are():
    program = rtgraph.parse(NESTED, "nested.rtg")
    found = concats_in_place(program)
    assert "c1" not in found  # c2 is assembled by a copy task
    inner = [name for name, (whole, _) in found.items() if whole == "c1"]
    assert len(inner) == 2  # relu(x) and sigmoid(a) are written into c1's storage


@pytest.mark.parametrize("streams", ["single", "by-unit", "list"])
@pytest.mark.parametrize("level", [0, 2])
@pytest.mark.parametrize("memory", ["none", "greedy", "stream-ordered"])
def test_nested_concats_run_to_the_reference(streams, level, memory):
    program = rtgraph.parse(NESTED, "nested.rtg")
    spec = rtgraph.device("toy")
    compiled = rtgraph.compile(
        program, device=spec, streams=streams, opt_level=level, memory=memory, check=True
    )
    result = rtgraph.run(compiled, device=spec, seed=5)
    report = rtgraph.compare(result.outputs, rtgraph.reference(program, seed=5))
    assert all(r["equal"] for r in report.values()), report
    assert not result.races
