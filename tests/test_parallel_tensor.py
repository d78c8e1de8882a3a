"""Tensor parallelism (Megatron-style): which weights are cut and how, and the numbers — the
column-parallel half exact, the row-parallel sum within the derived bound of the reference."""

from __future__ import annotations

import numpy as np
import pytest

import rtgraph
from rtgraph import cluster_api
from rtgraph.compiler.parallel.tensor_parallel import tensor_parallel
from rtgraph.ir.data import generate
from rtgraph.ir.graph import OpNode

MLP = """
program mlp(S = 32, D = 16, F = 64) {
    input  x  : f32[S, D]
    param  w1 : f32[D, F]
    param  b1 : f32[F]
    param  w2 : f32[F, D]
    param  b2 : f32[D]
    g = gelu(x @ w1 + b1)
    output y = g @ w2 + b2
}
"""


def gamma(n: int, u: float) -> float:
    return n * u / (1 - n * u)


@pytest.mark.parametrize("n", [2, 4])
def test_an_mlp_is_column_then_row_parallel_with_one_allreduce(n):
    program = rtgraph.parse(MLP)
    ranks, params, plan = tensor_parallel(program, n)
    assert plan.cut == {"w1": 1, "b1": 0, "w2": 0}  # b2 is added after the sum: whole
    assert plan.allreduces == 1 and plan.whole == ()
    assert params["w1"].axis == 1 and params["w2"].axis == 0 and params["b2"].layout == "whole"
    assert ranks[0].tensors["w1"].type.shape == (16, 64 // n)
    sends = [x for x in ranks[0].nodes if isinstance(x, OpNode) and x.op == "send"]
    assert len(sends) == 2 * (n - 1)  # one ring allreduce: 2(n − 1) steps


@pytest.mark.parametrize("n", [2, 4])
def test_tensor_parallel_mlp_is_within_the_bound_of_its_reordered_sum(n):
    """g = gelu(x W1 + b1) is computed whole-row by each rank on its columns: the same
    arithmetic as one device. y's products over F are summed as n partial sums over F/n, then
    by the ring: |y − ref| ≤ 2·γ_F·Σ_f |g||W2| (each side within γ_F of the exact sum)."""
    program = rtgraph.parse(MLP)
    compiled = cluster_api.compile_cluster(program, cluster="toy", tensor_parallel=n)
    run = cluster_api.run_cluster(compiled, seed=3)
    ref = rtgraph.reference(program, seed=3).outputs["y"].astype(np.float64)
    val = {
        t.name: generate(t.name, t.type.shape, "f32", 3, param=t.kind == "param").astype(np.float64)
        for t in (*program.inputs(), *program.params_())
    }
    h = val["x"] @ val["w1"] + val["b1"]
    g = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))
    u = float(np.finfo(np.float32).eps) / 2
    bound = 2 * gamma(64, u) * (np.abs(g) @ np.abs(val["w2"])) * 1.01 + u * np.abs(ref)
    err = np.abs(run.outputs["y"].astype(np.float64) - ref)
    assert np.all(err <= bound)
    assert run.check["y"]["max_rel"] < 1e-5


def test_a_transformer_block_split_two_ways_cuts_heads_and_the_feed_forward():
    program = rtgraph.load("models/transformer_naive.rtg", S=64, D=64, H=4, F=128)
    compiled = cluster_api.compile_cluster(program, cluster="toy", tensor_parallel=2)
    cut = compiled.meta["tensor"]["cut"]
    assert cut == {"wq": 1, "wk": 1, "wv": 1, "wo": 0, "w1": 1, "c1": 0, "w2": 0}
    assert compiled.meta["tensor"]["allreduces"] == 4  # attention and FFN, for each request
    run = cluster_api.run_cluster(compiled, seed=1)
    one = cluster_api.run_cluster(cluster_api.compile_cluster(program, cluster="toy"), seed=1)
    assert run.makespan_us < one.makespan_us
    u16 = 2.0**-11
    for name, check in run.check.items():
        # four f16 sums reordered per output (two per request's block): each ≤ a few ulps
        assert check["max_rel"] <= 4 * u16, (name, check)
        got = run.outputs[name].astype(np.float64).ravel()
        want = one.outputs[name].astype(np.float64).ravel()
        assert got @ want / (np.linalg.norm(got) * np.linalg.norm(want)) > 0.99999


def test_a_weight_that_cannot_stay_cut_is_kept_whole():
    """w feeds a matmul (it would be cut by columns) and then a reduction over its columns —
    which needs all of it: the walk gives up cutting w and the program still runs right."""
    text = """program p(S = 8, D = 8) {
    input x : f32[S, D]
    param w : f32[D, D]
    h = x @ w
    output y = reduce_sum(h, axis = [1], keepdims = true)
}"""
    program = rtgraph.parse(text)
    _, _, plan = tensor_parallel(program, 2)
    assert plan.cut == {} and plan.whole == ("w",)
    compiled = cluster_api.compile_cluster(program, cluster="toy", tensor_parallel=2)
    run = cluster_api.run_cluster(compiled)
    assert run.check["y"]["check"] == "bit-exact"


def test_a_dimension_that_does_not_divide_is_not_cut():
    program = rtgraph.parse(MLP.replace("F = 64", "F = 30"))
    _, _, plan = tensor_parallel(program, 4)
    assert "w1" not in plan.cut


def test_a_collective_the_program_writes_is_the_identity_under_tensor_parallelism():
    """mlp_train's allreduces sum over data-parallel replicas; split 2 ways by tensors alone
    there is one replica, so the gradients are the single device's — not twice them."""
    program = rtgraph.load("models/mlp_train.rtg", B=16, D=8, H=16)
    compiled = cluster_api.compile_cluster(program, cluster="toy", tensor_parallel=2)
    run = cluster_api.run_cluster(compiled, seed=4)
    for name in ("g1", "g2"):
        assert run.check[name]["max_rel"] < 1e-5, run.check
