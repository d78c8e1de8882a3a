"""The bundled models as an end-to-end corpus: each checks, compiles under every stream policy,
runs bit-equal to the reference interpreter, computes the layer it says it is, and (for the
pipelined ones) really overlaps the Cube and Vector units under ``by-unit`` streams.

Numeric runs use small parameters (-D) to keep the file fast; the default shapes are compiled
and run timing-only under every policy.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import MODELS

import rtgraph
from rtgraph.ir.interpreter import host_values

POLICIES = ("single", "by-unit", "by-unit:2", "list")
DEVICE = "ascend-910b"

#: Small parameters per model for numeric runs; every loop still runs at least once.
SMALL: dict[str, dict[str, int]] = {
    "attention": {"S": 32, "D": 192, "H": 12},
    "transformer_block": {"S": 32, "D": 192, "H": 12, "F": 768},
    "llm_decode": {"L": 2, "D": 128, "H": 4, "T": 32, "F": 256, "V": 512},
    "llm_decode_loop": {"L": 2, "D": 128, "H": 4, "T": 32, "F": 256, "V": 512, "STEPS": 4},
    "llm_prefill": {"B": 2, "S": 16, "T": 16, "L": 2, "D": 128, "H": 4, "F": 256, "V": 512},
    "resnet_bottleneck": {"N": 1, "C": 64, "M": 16, "HW": 8},
    "unet_block": {"N": 1, "C": 64, "HW": 4, "T": 32, "groups": 8, "heads": 4},
    "mlp": {"B": 32, "D": 64, "F": 128},
    "attention_naive": {"S": 32, "D": 192, "H": 12},
    "transformer_naive": {"S": 32, "D": 192, "H": 12, "F": 768},
    "bert_encoder": {"S": 32, "D": 192, "H": 12, "F": 768},
}
ALL_MODELS = sorted(p.stem for p in MODELS.glob("*.rtg"))
NEW_MODELS = ("attention", "transformer_block", "llm_decode", "resnet_bottleneck", "unet_block")
#: The naive models (issue 16): layers as their papers write them, for the graph optimizer.
NAIVE_MODELS = ("attention_naive", "transformer_naive", "bert_encoder")
#: The models that take seconds a run under every policy; `pytest -m "not slow"` leaves them out.
LARGE_MODELS = ("attention", "transformer_block", "attention_naive", "transformer_naive")


def marked_by_size(names: tuple[str, ...] | list[str]) -> list:
    """Each model name as a test parameter, the large ones marked ``slow``."""
    return [pytest.param(n, marks=pytest.mark.slow) if n in LARGE_MODELS else n for n in names]


def load(name: str, **params: int) -> rtgraph.ir.Program:
    return rtgraph.load(MODELS / f"{name}.rtg", params or None, device=DEVICE)


def test_the_corpus_has_every_model_the_issue_names():
    for name in (*NEW_MODELS, *NAIVE_MODELS, "mlp"):
        assert name in ALL_MODELS


@pytest.mark.parametrize("name", ALL_MODELS)
def test_model_says_what_it_is_in_its_header(name):
    first = (MODELS / f"{name}.rtg").read_text().splitlines()[0]
    assert first.startswith(f"# models/{name}.rtg — ")
    assert len(first.split("— ", 1)[1]) > 10


@pytest.mark.parametrize("name", marked_by_size(ALL_MODELS))
def test_model_compiles_under_every_policy_and_runs_bit_equal(name):
    program = load(name, **SMALL.get(name, {}))
    reference = rtgraph.evaluate(rtgraph.as_checked(program, device=DEVICE), seed=3)
    assert not any(np.isnan(v).any() for v in reference.values())  # NaN == NaN hides nothing
    for policy in POLICIES:
        compiled = rtgraph.compile(program, device=DEVICE, streams=policy, check=True)
        result = rtgraph.run(compiled, device=DEVICE, seed=3)
        assert not result.races, (policy, result.races[:1])
        assert set(result.outputs) == set(reference)
        for out, report in rtgraph.compare(result.outputs, reference).items():
            assert report["equal"], (policy, out, report)


@pytest.mark.parametrize("name", marked_by_size(NEW_MODELS + NAIVE_MODELS))
def test_default_shapes_compile_and_run_race_free_under_every_policy(name):
    program = load(name)
    for memory in ("greedy", "none"):
        for policy in POLICIES:
            compiled = rtgraph.compile(program, device=DEVICE, streams=policy, memory=memory)
            result = rtgraph.run(compiled, device=DEVICE, numerics=False)
            assert not result.races and result.makespan_us > 0, (policy, memory)


# --- the models compute the layers they name ---------------------------------------------------


def f64(values: dict[str, np.ndarray], name: str) -> np.ndarray:
    return np.asarray(values[name], dtype=np.float64)


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def layernorm(x, g, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def full_weights(values, name: str, groups: int) -> np.ndarray:
    """W [D, D] from per-group [G, D, E] blocks: head-major columns."""
    blocks = [f64(values, f"{name}[{g}]") for g in range(groups)]  # each [G, D, E]
    return np.concatenate([np.concatenate(list(b), axis=1) for b in blocks], axis=1)


def textbook_mha(x, values, H, groups):
    """softmax(Q Kᵀ / √E) V per head, heads concatenated, times W_o."""
    wq, wk, wv = (full_weights(values, n, groups) for n in ("wq", "wk", "wv"))
    wo = np.concatenate([f64(values, f"wo[{g}]") for g in range(groups)], axis=0)
    D = x.shape[1]
    E = D // H
    heads = []
    for h in range(H):
        cols = slice(h * E, (h + 1) * E)
        q, k, v = x @ wq[:, cols], x @ wk[:, cols], x @ wv[:, cols]
        heads.append(softmax(q @ k.T / math.sqrt(E)) @ v)
    return np.concatenate(heads, axis=1) @ wo


def close(got: np.ndarray, want: np.ndarray, tol: float = 3e-2) -> bool:
    """Within f16 rounding of every step: error small against the output's scale."""
    got = np.asarray(got, dtype=np.float64)
    scale = max(float(np.abs(want).max()), 1e-6)
    return float(np.abs(got - want).max()) <= tol * scale


def test_attention_is_textbook_multi_head_attention():
    params = SMALL["attention"]
    program = load("attention", **params)
    values = host_values(program, None, None, 5)
    out = rtgraph.evaluate(program, seed=5)
    groups = sum(1 for t in program.tensors if t.startswith("wq["))
    assert groups == 3  # H = 12 heads in groups of G = 4
    for r in range(4):
        want = textbook_mha(f64(values, f"x{r}"), values, params["H"], groups)
        assert close(out[f"y{r}"], want)


def test_transformer_block_is_pre_norm_attention_plus_gelu_feed_forward():
    params = SMALL["transformer_block"]
    program = load("transformer_block", **params)
    values = host_values(program, None, None, 7)
    out = rtgraph.evaluate(program, seed=7)
    groups = sum(1 for t in program.tensors if t.startswith("wq["))
    chunks = sum(1 for t in program.tensors if t.startswith("w1["))
    assert chunks == 2
    w1 = np.concatenate([f64(values, f"w1[{f}]") for f in range(chunks)], axis=1)
    c1 = np.concatenate([f64(values, f"c1[{f}]") for f in range(chunks)])
    w2 = np.concatenate([f64(values, f"w2[{f}]") for f in range(chunks)], axis=0)
    ln = {n: f64(values, n) for n in ("ln1_g", "ln1_b", "ln2_g", "ln2_b", "c2")}
    for r in range(2):
        x = f64(values, f"x{r}")
        h = x + textbook_mha(layernorm(x, ln["ln1_g"], ln["ln1_b"]), values, params["H"], groups)
        want = h + gelu(layernorm(h, ln["ln2_g"], ln["ln2_b"]) @ w1 + c1) @ w2 + ln["c2"]
        assert close(out[f"y{r}"], want)


def test_llm_decode_attends_over_the_cache_plus_the_new_token():
    params = SMALL["llm_decode"]
    program = load("llm_decode", **params)
    values = host_values(program, None, None, 11)
    (logits,) = rtgraph.evaluate(program, seed=11).values()
    H, D = params["H"], params["D"]
    E = D // H

    def rms(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * g

    h = f64(values, "x")
    for layer in range(params["L"]):
        w = {n: f64(values, f"{n}[{layer}]") for n in ("wq", "wk", "wv", "wo")}
        a = rms(h, f64(values, f"norm1[{layer}]"))
        q, k, v = (a @ w[n] for n in ("wq", "wk", "wv"))
        heads = []
        for i in range(H):
            keys = np.vstack([f64(values, f"k_cache[{layer}]")[i], k[:, i * E : (i + 1) * E]])
            vals = np.vstack([f64(values, f"v_cache[{layer}]")[i], v[:, i * E : (i + 1) * E]])
            assert keys.shape == (params["T"] + 1, E)
            heads.append(softmax(q[:, i * E : (i + 1) * E] @ keys.T / math.sqrt(E)) @ vals)
        r = h + np.concatenate(heads, axis=1) @ w["wo"]
        n = rms(r, f64(values, f"norm2[{layer}]"))
        gate = n @ f64(values, f"w_gate[{layer}]")
        up = n @ f64(values, f"w_up[{layer}]")
        h = r + (gate / (1 + np.exp(-gate)) * up) @ f64(values, f"w_down[{layer}]")
    want = rms(h, f64(values, "norm_out")) @ f64(values, "w_vocab")
    assert logits.shape == (1, params["V"])
    assert close(logits, want)


def test_resnet_bottleneck_is_reduce_conv_expand_with_identity_shortcut():
    params = SMALL["resnet_bottleneck"]
    program = load("resnet_bottleneck", **params)
    values = host_values(program, None, None, 13)
    out = rtgraph.evaluate(program, seed=13)

    def conv(x, w, pad):
        xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        _, _, kh, kw = w.shape
        hw = x.shape[2]
        taps = [
            np.einsum("nchw,oc->nohw", xp[:, :, i : i + hw, j : j + hw], w[:, :, i, j])
            for i in range(kh)
            for j in range(kw)
        ]
        return np.sum(taps, axis=0)

    def bn(x, k):
        return x * f64(values, f"s{k}") + f64(values, f"t{k}")

    relu = lambda z: np.maximum(z, 0)  # noqa: E731
    for r in range(2):
        x = f64(values, f"x{r}")
        a = relu(bn(conv(x, f64(values, "w1"), 0), 1))
        b = relu(bn(conv(a, f64(values, "w2"), 1), 2))
        want = relu(bn(conv(b, f64(values, "w3"), 0), 3) + x)
        assert out[f"y{r}"].shape == x.shape
        assert close(out[f"y{r}"], want)


def test_unet_block_keeps_its_nchw_shape_and_attends_over_positions():
    params = SMALL["unet_block"]
    program = load("unet_block", **params)
    ops = [n.op for n in program.op_nodes()]
    assert ops.count("conv2d") == 2 and ops.count("groupnorm") == 3 and "softmax" in ops
    (y,) = rtgraph.evaluate(program, seed=2).values()
    assert y.shape == (params["N"], params["C"], params["HW"], params["HW"])
    assert np.isfinite(np.asarray(y, dtype=np.float64)).all()


# --- the pipelined models overlap the units -----------------------------------------------------


def cube_vector_overlap(result) -> float:
    """Time during which some Cube task and some Vector task run at once."""
    spans = {u: [(t.start, t.end) for t in result.tasks if t.unit == u] for u in ("cube", "vector")}
    total = 0.0
    for a0, a1 in spans["cube"]:
        for b0, b1 in spans["vector"]:
            total += max(0.0, min(a1, b1) - max(a0, b0))
    return total


@pytest.mark.parametrize("name", ["attention", "transformer_block"])
def test_by_unit_streams_overlap_cube_and_vector_on_the_pipelined_models(name):
    program = load(name)
    runs = {}
    for policy in ("single", "by-unit"):
        compiled = rtgraph.compile(program, device=DEVICE, streams=policy, memory="none")
        runs[policy] = rtgraph.run(compiled, device=DEVICE, numerics=False)
    single, by_unit = runs["single"], runs["by-unit"]
    assert cube_vector_overlap(single) == 0.0
    assert cube_vector_overlap(by_unit) > 0.2 * by_unit.makespan_us
    busy = {k: r.utilization["cube"] + r.utilization["vector"] for k, r in runs.items()}
    assert busy["by-unit"] > 1.5 * busy["single"]
    assert by_unit.makespan_us < 0.75 * single.makespan_us


# --- the naive models (issue 16): the paper's layer, and the pipelined model's numbers ----------


def f32(values: dict[str, np.ndarray], name: str) -> np.ndarray:
    return np.asarray(values[name], dtype=np.float32)


def paper_attention(x: np.ndarray, w: dict[str, np.ndarray], H: int) -> np.ndarray:
    """Concat(head_1, …, head_H) Wo with head_i = softmax(Q_i K_iᵀ / √E) V_i, one head at a time
    (columns iE … iE+E-1 of Q = x Wq, K, V); ``w`` holds wq, wk, wv, wo and any biases bq … bo."""
    q, k, v = (x @ w[f"w{n}"] + w.get(f"b{n}", 0) for n in "qkv")
    E = x.shape[1] // H
    heads = []
    for i in range(H):
        cols = slice(i * E, (i + 1) * E)
        heads.append(softmax(q[:, cols] @ k[:, cols].T / math.sqrt(E)) @ v[:, cols])
    return np.concatenate(heads, axis=1) @ w["wo"] + w.get("bo", 0)


def run_naive(name: str, seed: int):
    """The model at its small parameters: the program, its input and param values, its outputs."""
    program = load(name, **SMALL[name])
    return program, host_values(program, None, None, seed), rtgraph.evaluate(program, seed=seed)


def params_of(program: rtgraph.ir.Program) -> dict[str, tuple[int, ...]]:
    return {n: t.type.shape for n, t in program.tensors.items() if t.kind == "param"}


def assert_all_heads_at_once(program: rtgraph.ir.Program, sequences: int) -> None:
    """One softmax per sequence, over every head's scores at once: [H, S, S]."""
    p = SMALL[program.name]
    softmaxes = [program.tensors[n.output] for n in program.op_nodes() if n.op == "softmax"]
    assert [t.type.shape for t in softmaxes] == [(p["H"], p["S"], p["S"])] * sequences


def per_head_group(values: dict[str, np.ndarray], H: int, groups: int) -> dict[str, np.ndarray]:
    """attention.rtg's weights made from whole [D, D] ones: wq[g] is Wq's heads gG … gG+G-1 as
    [G, D, E] (likewise wk, wv) and wo[g] the rows of Wo those heads' outputs meet."""
    D = values["wq"].shape[0]
    G, E = H // groups, D // H
    params = {}
    for g in range(groups):
        block = slice(g * G * E, (g + 1) * G * E)
        for n in ("wq", "wk", "wv"):
            heads = values[n][:, block].reshape(D, G, E).transpose(1, 0, 2)
            params[f"{n}[{g}]"] = np.ascontiguousarray(heads)
        params[f"wo[{g}]"] = np.ascontiguousarray(values["wo"][block])
    return params


def test_attention_naive_is_the_papers_multi_head_attention_all_heads_at_once():
    program, values, out = run_naive("attention_naive", 17)
    D = SMALL["attention_naive"]["D"]
    assert params_of(program) == {n: (D, D) for n in ("wq", "wk", "wv", "wo")}
    assert_all_heads_at_once(program, sequences=4)
    w = {n: f32(values, n) for n in params_of(program)}
    for r in range(4):
        want = paper_attention(f32(values, f"x{r}"), w, SMALL["attention_naive"]["H"])
        assert close(out[f"y{r}"], want)


def test_attention_naive_equals_the_pipelined_attention_on_the_same_weights():
    _, values, naive = run_naive("attention_naive", 19)
    pipelined = load("attention", **SMALL["attention"])
    groups = sum(1 for t in pipelined.tensors if t.startswith("wq["))
    assert groups == 3 and SMALL["attention"] == SMALL["attention_naive"]
    inputs = {f"x{r}": values[f"x{r}"] for r in range(4)}
    params = per_head_group(values, SMALL["attention"]["H"], groups)
    out = rtgraph.evaluate(pipelined, inputs, params=params)
    for r in range(4):
        assert close(out[f"y{r}"], f64(naive, f"y{r}"))


def test_transformer_naive_is_a_pre_norm_gpt2_block_with_the_feed_forward_whole():
    program, values, out = run_naive("transformer_naive", 23)
    p = SMALL["transformer_naive"]
    D, F = p["D"], p["F"]
    assert params_of(program)["w1"] == (D, F) and params_of(program)["w2"] == (F, D)
    assert_all_heads_at_once(program, sequences=2)
    w = {n: f32(values, n) for n in params_of(program)}
    for r in range(2):
        x = f32(values, f"x{r}")
        h = x + paper_attention(layernorm(x, w["ln1_g"], w["ln1_b"]), w, p["H"])
        ffn = gelu(layernorm(h, w["ln2_g"], w["ln2_b"]) @ w["w1"] + w["c1"]) @ w["w2"] + w["c2"]
        assert close(out[f"y{r}"], h + ffn)


def test_transformer_naive_equals_the_pipelined_block_on_the_same_weights():
    _, values, naive = run_naive("transformer_naive", 29)
    pipelined = load("transformer_block", **SMALL["transformer_block"])
    groups = sum(1 for t in pipelined.tensors if t.startswith("wq["))
    chunks = sum(1 for t in pipelined.tensors if t.startswith("w1["))
    assert (groups, chunks) == (3, 2) and SMALL["transformer_block"] == SMALL["transformer_naive"]
    params = per_head_group(values, SMALL["transformer_block"]["H"], groups)
    half = SMALL["transformer_block"]["F"] // chunks
    for f in range(chunks):
        cols = slice(f * half, (f + 1) * half)
        params[f"w1[{f}]"] = np.ascontiguousarray(values["w1"][:, cols])
        params[f"c1[{f}]"] = np.ascontiguousarray(values["c1"][cols])
        params[f"w2[{f}]"] = np.ascontiguousarray(values["w2"][cols])
    for n in ("ln1_g", "ln1_b", "ln2_g", "ln2_b", "c2"):
        params[n] = values[n]
    inputs = {f"x{r}": values[f"x{r}"] for r in range(2)}
    out = rtgraph.evaluate(pipelined, inputs, params=params)
    for r in range(2):
        assert close(out[f"y{r}"], f64(naive, f"y{r}"))


def test_bert_encoder_is_a_post_norm_layer_with_a_bias_on_every_projection():
    program, values, out = run_naive("bert_encoder", 31)
    p = SMALL["bert_encoder"]
    D, F = p["D"], p["F"]
    shapes = params_of(program)
    assert {n: shapes[n] for n in ("bq", "bk", "bv", "bo", "b1", "b2")} == {
        **{n: (D,) for n in ("bq", "bk", "bv", "bo", "b2")},
        "b1": (F,),
    }
    assert_all_heads_at_once(program, sequences=2)
    w = {n: f32(values, n) for n in shapes}
    for r in range(2):
        x = f32(values, f"x{r}")
        h = layernorm(x + paper_attention(x, w, p["H"]), w["ln1_g"], w["ln1_b"], eps=1e-12)
        ffn = gelu(h @ w["w1"] + w["b1"]) @ w["w2"] + w["b2"]
        want = layernorm(h + ffn, w["ln2_g"], w["ln2_b"], eps=1e-12)
        assert out[f"y{r}"].shape == (p["S"], D)
        assert close(out[f"y{r}"], want)
