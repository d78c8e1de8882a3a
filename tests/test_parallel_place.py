"""Placement (``device[i] { … }``) and the per-device programs it makes: one transfer per value
and reading rank, sends and receives paired by tag, each rank's program in the whole one's
order; data-parallel layouts; collectives run by one device are the identity."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rtgraph
from rtgraph.compiler.parallel.group_of_one import group_of_one
from rtgraph.compiler.parallel.place import place, placed_ranks
from rtgraph.compiler.parallel.replicate import data_parallel
from rtgraph.errors import CheckError, RtgError
from rtgraph.ir.graph import OpNode

CHAIN = """device "toy"
program chain(N = 8) {
    input x : f32[N, N]
    param w : f32[N, N]
    device[0] { h = x @ w }
    device[1] { a = relu(h) }
    device[2] { y = a @ w
                z = h + a }
    output y
    output z
}
"""


def ops(program, op=None):
    return [n for n in program.nodes if isinstance(n, OpNode) and (op is None or n.op == op)]


def test_device_blocks_place_every_op_made_inside_them():
    p = rtgraph.parse(CHAIN)
    assert [(n.op, n.device) for n in ops(p)] == [
        ("matmul", 0),
        ("relu", 1),
        ("matmul", 2),
        ("add", 2),
    ]
    assert placed_ranks(p) == 3


def test_placement_sends_each_value_once_per_reading_rank():
    p = rtgraph.parse(CHAIN)
    ranks = place(p, 3)
    sends = [
        (r, n.inputs[0], n.attrs["peer"], n.attrs["tag"])
        for r, q in enumerate(ranks)
        for n in ops(q, "send")
    ]
    recvs = [
        (r, n.output, n.attrs["peer"], n.attrs["tag"])
        for r, q in enumerate(ranks)
        for n in ops(q, "recv")
    ]
    # h goes 0 → 1 and 0 → 2 (rank 2 reads it twice, gets it once), a goes 1 → 2
    assert sorted((s[0], s[1], s[2]) for s in sends) == [(0, "h", 1), (0, "h", 2), (1, "a", 2)]
    assert len(recvs) == 3
    by_tag = {tag: (src, name, dst) for src, name, dst, tag in sends}
    for dst, name, src, tag in recvs:
        assert by_tag[tag] == (src, name, dst)
    assert ranks[2].outputs == ["y", "z"] and ranks[0].outputs == ranks[1].outputs == []
    # each rank receives before it reads
    order = [n.op for n in ops(ranks[2])]
    assert order.index("recv") < order.index("matmul")


def test_placed_program_on_one_device_equals_the_reference():
    p = rtgraph.parse(CHAIN)
    result = rtgraph.run(rtgraph.compile(p), device="toy")
    for name, report in rtgraph.compare(result.outputs, rtgraph.reference(p)).items():
        assert report["equal"], name


@pytest.mark.parametrize(
    "body, message",
    [
        ("device[0] { device[1] { y = x } }", "cannot be nested"),
        ("device[-1] { y = relu(x) }", "not between 0"),
        ("device[x] { y = relu(x) }", "compile-time integer"),
    ],
)
def test_bad_device_blocks_are_located_errors(body, message):
    text = f"program p() {{\n    input x : f32[4]\n    {body}\n    output y = relu(x)\n}}\n"
    with pytest.raises(RtgError) as err:
        rtgraph.parse(text)
    assert message in str(err.value)
    assert ":3:" in str(err.value)


def test_a_rank_past_the_cluster_is_a_located_error():
    p = rtgraph.parse(CHAIN)
    with pytest.raises(CheckError) as err:
        place(p, 2, "toy")
    assert "device[2]" in err.value.message and err.value.span.line == 7


def test_explicit_streams_do_not_mix_with_placement():
    text = """program p() {
    input x : f32[4]
    stream s
    on s { a = relu(x) }
    device[1] { y = relu(a) }
    output y
}"""
    with pytest.raises(CheckError) as err:
        place(rtgraph.parse(text), 2)
    assert "belong to one device" in err.value.message


def test_collectives_of_one_device_are_the_identity():
    text = """program p(B = 4) {
    input x : f32[B, 4]
    g = allreduce(x @ transpose(x, [1, 0]))
    output y = g + 1.0
    output h = broadcast(relu(x), root = 0)
}"""
    p = rtgraph.parse(text)
    alone = group_of_one(p)
    assert not ops(alone, "allreduce")  # read through: no task
    assert [n.op for n in ops(alone, "copy")] == ["copy"]  # an output made by one keeps its name
    result = rtgraph.run(rtgraph.compile(p, device="toy"), device="toy")
    for name, report in rtgraph.compare(result.outputs, rtgraph.reference(p)).items():
        assert report["equal"], name


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=8))
def test_any_placement_of_a_chain_pairs_every_transfer(devices):
    """Random placements of a chain of ops: every send has one receive with its tag, on the
    rank it names, and the data a rank reads is on it before it reads it."""
    lines = ["program p() {", "    input x : f32[4, 4]", "    t0 = relu(x)"]
    for k, d in enumerate(devices):
        lines.append(f"    device[{d}] {{ t{k + 1} = t{k} @ t{k} + t{k // 2} }}")
    lines += [f"    output y = t{len(devices)}", "}"]
    p = rtgraph.parse("\n".join(lines))
    ranks = place(p, 4)
    sends = {
        n.attrs["tag"]: (r, n.attrs["peer"]) for r, q in enumerate(ranks) for n in ops(q, "send")
    }
    recvs = {
        n.attrs["tag"]: (n.attrs["peer"], r) for r, q in enumerate(ranks) for n in ops(q, "recv")
    }
    assert sends == recvs
    for q in ranks:
        have = {t.name for t in q.tensors.values() if t.kind in ("input", "param", "const")}
        for n in ops(q):
            assert set(n.inputs) <= have, (n, have)
            have.add(n.output)


DP = """program dp(B = 8, D = 4) {
    input x : f32[B, D]
    input v : f32[D]
    param w : f32[D, D]
    h = x @ w + v
    output y = h
    output g = allreduce(transpose(x, [1, 0]) @ h)
}"""


def test_data_parallel_layouts_cut_rows_and_keep_the_rest_whole():
    whole = rtgraph.parse(DP)
    replica = rtgraph.parse(DP, params={"B": 2})
    _, inputs, outputs = data_parallel(whole, replica, 4)
    assert {k: v.layout for k, v in inputs.items()} == {"x": "rows", "v": "whole"}
    assert {k: v.layout for k, v in outputs.items()} == {"h": "rows", "g": "whole"}  # y is h


def test_data_parallel_refuses_a_shape_it_cannot_cut():
    text = "program p(B = 8) {\n    input x : f32[4, B]\n    output y = relu(x)\n}"
    with pytest.raises(CheckError) as err:
        data_parallel(rtgraph.parse(text), rtgraph.parse(text, params={"B": 2}), 4)
    assert "cuts only the first dimension" in err.value.message
