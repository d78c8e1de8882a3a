"""Programs on many devices equal the single-device reference, and their timings are the ones
computed by hand: data parallelism with an explicit allreduce, a pipeline of stages over
micro-batches (GPipe and 1F1B), placement by ``device[i]``, and the ring allreduce's
2(n − 1)(α + S/(nB)) on the toy cluster."""

from __future__ import annotations

import numpy as np
import pytest

import rtgraph
from rtgraph import cluster_api
from rtgraph.cluster.load import parse_cluster
from rtgraph.compiler import CompileOptions
from rtgraph.errors import UsageError
from rtgraph.reports.cluster_summary import bubble_fraction, compute_span

LINEAR = """
program linear(B = 64, D = 16) {
    input  x  : f32[B, D]
    input  dy : f32[B, D]
    param  w  : f32[D, D]
    output y = x @ w
    output g = allreduce(transpose(x, [1, 0]) @ dy)
}
"""


def integers(shape, seed):
    """Small integers as f32: every sum of products of them is exact, in any order."""
    return np.random.default_rng(seed).integers(-3, 4, size=shape).astype(np.float32)


@pytest.mark.parametrize("replicas", [2, 4])
def test_data_parallel_with_an_allreduce_is_bit_exact_when_no_sum_rounds(replicas):
    program = rtgraph.parse(LINEAR)
    compiled = cluster_api.compile_cluster(program, cluster="toy", data_parallel=replicas)
    assert compiled.devices == replicas
    inputs = {"x": integers((64, 16), 1), "dy": integers((64, 16), 2)}
    params = {"w": integers((16, 16), 3)}
    run = cluster_api.run_cluster(compiled, inputs=inputs, params=params)
    assert {c["check"] for c in run.check.values()} == {"bit-exact"}
    np.testing.assert_array_equal(run.outputs["g"], inputs["x"].T @ inputs["dy"])
    # every replica ends with the same sum: the ring's allgather half copies it
    per_rank = [run.result.devices[r].outputs["g"] for r in range(replicas)]
    assert all(np.array_equal(per_rank[0], other) for other in per_rank[1:])


def gamma(n: int, u: float) -> float:
    return n * u / (1 - n * u)


def test_data_parallel_training_step_is_within_the_derived_bound():
    """mlp_train on 4 replicas: y row by row as on one device (bit-exact); each gradient is a
    sum over the B rows, reordered (four partial dot products, then the ring's sum), so
    |got − ref| ≤ 2·γ_B·Σ_rows |a||dy| elementwise (each side within γ_B of the exact sum)."""
    program = rtgraph.load("models/mlp_train.rtg", B=64, D=32, H=64)
    compiled = cluster_api.compile_cluster(program, cluster="toy", data_parallel=4)
    run = cluster_api.run_cluster(compiled, seed=5)
    assert run.check["y"]["check"] == "bit-exact"
    ref = rtgraph.reference(program, seed=5).outputs
    x = rtgraph.ir.data.generate("x", (64, 32), "f32", 5, param=False).astype(np.float64)
    dy = rtgraph.ir.data.generate("dy", (64, 32), "f32", 5, param=False).astype(np.float64)
    w1 = rtgraph.ir.data.generate("w1", (32, 64), "f32", 5, param=True).astype(np.float64)
    w2 = rtgraph.ir.data.generate("w2", (64, 32), "f32", 5, param=True).astype(np.float64)
    a = np.tanh(x @ w1)
    dh = (dy @ w2.T) * (1 - a * a)
    u = float(np.finfo(np.float32).eps) / 2
    bound = {"g1": np.abs(x).T @ np.abs(dh), "g2": np.abs(a).T @ np.abs(dy)}
    for name in ("g1", "g2"):
        err = np.abs(run.outputs[name].astype(np.float64) - ref[name].astype(np.float64))
        # 1.01: dh and a are computed in f32 on both sides; their own rounding is ≪ γ_B
        assert np.all(err <= 2 * gamma(64, u) * bound[name] * 1.01 + 1e-30), name
        assert run.check[name]["max_rel"] < 1e-5


STACK = """
program stack(B = 64, D = 16, L = 4) {
    input  x    : f32[B, D]
    param  w[L] : f32[D, D]
    t = x
    for l in 0..L {
        t = relu(t @ w[l])
    }
    output y = t
}
"""


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_a_four_stage_pipeline_of_eight_micro_batches_equals_the_reference(schedule):
    program = rtgraph.parse(STACK)
    compiled = cluster_api.compile_cluster(
        program, cluster="toy", pipeline=4, micro_batches=8, schedule=schedule
    )
    assert compiled.meta["stages"]["ops"] == [2, 2, 2, 2]  # balanced: one layer a stage
    inputs = {"x": integers((64, 16), 7)}
    params = {f"w[{l}]": integers((16, 16), 10 + l) // 2 for l in range(4)}
    run = cluster_api.run_cluster(compiled, inputs=inputs, params=params)
    assert {c["check"] for c in run.check.values()} == {"bit-exact"}
    # each stage only sends forward: 8 micro-batches × 3 stage boundaries
    assert len(run.result.transfers) == 24


def free_links_cluster(n: int) -> str:
    """A toy cluster whose transfers cost (almost) nothing: stage times are compute alone."""
    return f"""
[cluster]
name = "free-links"
description = "toy devices joined by links of no latency and unbounded bandwidth"
device = "toy"
devices = {n}
devices_per_node = {n}
comm_queues = 8
comm_launch_us = 0.0

[links.hccs]
topology = "all-to-all"
bandwidth = 1e18
latency_us = 0.0
"""


@pytest.mark.parametrize("p, m", [(4, 8), (2, 8), (4, 4), (8, 16)])
def test_gpipe_bubble_with_equal_stages_is_p_minus_1_over_m_plus_p_minus_1(p, m):
    spec = parse_cluster(free_links_cluster(p), "free.toml")
    # D = 64: a stage's matmul (32 kflop a row block) outweighs the host's 1 µs a command
    program = rtgraph.parse(STACK.replace("L = 4", f"L = {p}").replace("D = 16", "D = 64"))
    compiled = cluster_api.compile_cluster(
        program, cluster=spec, pipeline=p, micro_batches=m, schedule="gpipe"
    )
    run = cluster_api.run_cluster(compiled, numerics=False)
    assert bubble_fraction(run.result) == pytest.approx((p - 1) / (m + p - 1), abs=1e-9)
    lo, hi = compute_span(run.result)
    stage = (hi - lo) / (m + p - 1)  # one stage's time, by hand: every stage is one layer
    assert stage > 0


TRAIN = """
program train(B = 64, D = 32) {
    input  x  : f32[B, D]
    input  dy : f32[B, D]
    param  w[4] : f32[D, D]
    device[0] { h1 = relu(x @ w[0]) }
    device[1] { h2 = relu(h1 @ w[1]) }
    device[2] { h3 = relu(h2 @ w[2]) }
    device[3] {
        output y = h3 @ w[3]
        output g3 = allreduce(transpose(h3, [1, 0]) @ dy)
        d3 = where(h3, dy @ transpose(w[3], [1, 0]), 0.0)
    }
    device[2] {
        output g2 = allreduce(transpose(h2, [1, 0]) @ d3)
        d2 = where(h2, d3 @ transpose(w[2], [1, 0]), 0.0)
    }
    device[1] {
        output g1 = allreduce(transpose(h1, [1, 0]) @ d2)
        d1 = where(h1, d2 @ transpose(w[1], [1, 0]), 0.0)
    }
    device[0] { output g0 = allreduce(transpose(x, [1, 0]) @ d1) }
}
"""


def in_flight(program, names=("x", "h1", "h2", "h3")) -> int:
    """The most micro-batches whose activations (``name@j`` regions) are live at once in
    ``program``'s memory plan (program-order lifetimes: first write to last read)."""
    events = []
    for r in program.memory.regions.values():
        base, _, j = r.tensor.partition("@")
        if base in names and j.isdigit():
            events += [(r.first, 1, int(j)), (r.last + 1, -1, int(j))]
    live: dict[int, int] = {}
    most = 0
    for _, step, j in sorted(events, key=lambda e: (e[0], e[1])):
        live[j] = live.get(j, 0) + step
        if not live[j]:
            del live[j]
        most = max(most, len(live))
    return most


def test_training_pipelines_equal_the_reference_and_1f1b_keeps_p_micro_batches_not_m():
    """A 4-stage training pipeline (forward and hand-written backward per stage) over 8
    micro-batches: both schedules equal the reference bit for bit (integer data: every sum is
    exact), and the activations a stage keeps for its backward are those of all M = 8
    micro-batches under GPipe but of at most P − s under 1F1B (stage s: warm-up of P − s − 1
    forwards, then one forward, one backward)."""
    program = rtgraph.parse(TRAIN)
    inputs = {"x": integers((64, 32), 1), "dy": integers((64, 32), 2)}
    params = {f"w[{l}]": integers((32, 32), 3 + l) // 2 for l in range(4)}
    flights = {}
    for schedule in ("gpipe", "1f1b"):
        compiled = cluster_api.compile_cluster(
            program,
            cluster="toy",
            pipeline=4,
            micro_batches=8,
            schedule=schedule,
            options=CompileOptions(memory="greedy"),
        )
        assert compiled.meta["stages"]["named"]
        run = cluster_api.run_cluster(compiled, inputs=inputs, params=params)
        assert {c["check"] for c in run.check.values()} == {"bit-exact"}, run.check
        flights[schedule] = [in_flight(p) for p in compiled.programs]
    assert flights["gpipe"][:3] == [8, 8, 8]
    assert flights["1f1b"] == [4, 3, 2, 1]


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_allreduce_takes_2_n_minus_1_alpha_plus_s_over_nb(n):
    """On the toy cluster (α = 1 µs, B = 1e9 B/s, no launch cost), n replicas each summing
    their own S = rows × 8 × 4 bytes: from the first send's start to the last receive's end,
    2(n − 1)(α + S/(nB)) — the ring's 2(n − 1) steps, each one chunk over every link at once."""
    rows = 250 * n
    text = (
        f"program ar(B = {rows * n}) {{\n    input x : f32[B, 8]\n    output s = allreduce(x)\n}}"
    )
    compiled = cluster_api.compile_cluster(rtgraph.parse(text), cluster="toy", data_parallel=n)
    run = cluster_api.run_cluster(compiled, numerics=False)
    links = [t for d in run.result.devices for t in d.tasks if t.unit == "link"]
    assert len(links) == n * 2 * 2 * (n - 1)  # per rank and step: one send, one receive
    start = min(t.start for t in links if t.op == "send")
    end = max(t.end for t in links)
    alpha_us, bandwidth, nbytes = 1.0, 1e9, rows * 8 * 4
    assert end - start == pytest.approx(2 * (n - 1) * (alpha_us + nbytes / n / bandwidth * 1e6))


def test_cluster_options_are_checked_before_any_work():
    program = rtgraph.parse(LINEAR)
    with pytest.raises(UsageError, match="does not split into 3 equal parts"):
        cluster_api.compile_cluster(program, cluster="toy", data_parallel=3)
    with pytest.raises(UsageError, match="has 8 devices"):
        cluster_api.compile_cluster(program, cluster="toy", data_parallel=16)
    with pytest.raises(UsageError, match="batch parameter 'N'"):
        cluster_api.compile_cluster(program, cluster="toy", data_parallel=2, batch="N")
    with pytest.raises(UsageError, match="pipeline"):
        cluster_api.compile_cluster(program, cluster="toy", pipeline=2, data_parallel=2)


@pytest.mark.parametrize(
    "how",
    [{"data_parallel": 4}, {"pipeline": 4, "micro_batches": 8}, {"tensor_parallel": 2}],
    ids=["data4", "pipeline4x8", "tensor2"],
)
def test_the_transformer_stack_on_many_devices_equals_its_single_device_reference(how):
    """Four GPT-2 blocks over 8 sequences: cut by sequences (data, pipeline) every sequence's
    arithmetic is one device's — bit-exact; cut by heads and feed-forward width (tensor), the
    row-parallel sums are reordered: each of the 8 allreduces rounds its f16 sum anew, a few
    units of f16 roundoff (2⁻¹¹) relative to the output at most."""
    program = rtgraph.load("models/transformer_stack.rtg", B=8, S=16, D=64, H=4, F=128, L=4)
    compiled = cluster_api.compile_cluster(program, cluster="toy", **how)
    run = cluster_api.run_cluster(compiled, seed=2)
    (check,) = run.check.values()
    if "tensor_parallel" in how:
        assert compiled.meta["tensor"]["whole"] == []  # every weight matrix cut
        assert check["max_rel"] <= 16 * 2.0**-11, check
    else:
        assert check["check"] == "bit-exact", check


def test_balanced_stages_cut_where_the_fewest_bytes_cross():
    """A residual layer's boundary after its add sends the residual alone; one after the next
    layer's norm would send the residual and the norm's output. Within 2 % of the best
    balance, the cut sends one tensor a hop: B/M × D × 2 bytes a micro-batch."""
    program = rtgraph.load("models/layer_stack.rtg", B=64, D=32, F=128)
    compiled = cluster_api.compile_cluster(program, cluster="toy", pipeline=4, micro_batches=8)
    run = cluster_api.run_cluster(compiled, numerics=False)
    per_hop = 64 // 8 * 32 * 2
    assert {t.bytes for t in run.result.transfers} == {per_hop}
    assert len(run.result.transfers) == 3 * 8
