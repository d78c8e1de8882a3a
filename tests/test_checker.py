"""The checker: what the IR of each model and each construct looks like.

The IR contract is :mod:`rtgraph.ir`; these tests read like the language reference: a
construct, and the tensors and nodes it becomes.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import rtgraph
from rtgraph.errors import CapacityError, RtgError
from rtgraph.frontend import checker, emit, load, parse
from rtgraph.ir import BarrierNode, CallbackNode, OpNode, RecordNode, SyncNode, TensorType, WaitNode

MODELS = Path(__file__).resolve().parent.parent / "models"


def ops(program) -> list[str]:
    return [n.op for n in program.op_nodes()]


def ty(program, name: str) -> TensorType:
    return program.tensors[name].type


# --- the models ----------------------------------------------------------------------------


def test_attention_model() -> None:
    p = load(MODELS / "attention.rtg")
    assert p.name == "attention" and p.device == "ascend-910b"
    assert p.params == {"S": 1024, "D": 768, "H": 12}
    assert [t.name for t in p.inputs()] == ["x0", "x1", "x2", "x3"]
    assert all(ty(p, f"x{b}") == TensorType((1024, 768), "f16") for b in range(4))
    groups = [f"{w}[{g}]" for w in ("wq", "wk", "wv", "wo") for g in range(3)]
    assert {t.name: t.alloc for t in p.params_()} == dict.fromkeys(groups, "direct")
    assert ty(p, "wq[0]") == TensorType((4, 768, 64), "f16")  # 4 heads of width 64 per group
    assert ty(p, "wo[2]") == TensorType((256, 768), "f16")
    # Per sequence and head group: 4 projections, scores, P·V and the output projection on the
    # Cube; scale and softmax on the Vector; the groups' shares of y summed.
    counts = Counter(ops(p))
    assert counts["matmul"] == 4 * 3 * 6
    assert counts["softmax"] == counts["mul"] == 4 * 3
    assert counts["add"] == 4 * 2
    for b in range(4):
        assert ty(p, f"y{b}") == TensorType((1024, 768), "f16")
    assert p.outputs == ["y0", "y1", "y2", "y3"] and not p.streams


def test_attention_parameters_can_be_overridden() -> None:
    p = load(MODELS / "attention.rtg", {"S": 128, "H": 8})
    assert ty(p, "wq[0]") == TensorType((4, 768, 96), "f16")  # G = 4 heads of width 768/8
    assert sum(1 for n in p.tensors if n.startswith("wq[")) == 2
    assert ty(p, "y0") == TensorType((128, 768), "f16")


def test_mlp_model() -> None:
    p = load(MODELS / "mlp.rtg")
    L = p.params["L"]
    assert Counter(ops(p))["matmul"] == L + 2
    assert Counter(ops(p))["gelu"] == L + 1
    assert [t.name for t in p.params_() if t.name.startswith("w_hid")] == ["w_hid[0]", "w_hid[1]"]
    # The residual is the loop-carried value: one h per iteration, each the sum of the last.
    carried = [n for n in p.op_nodes() if p.tensors[n.output].label == "h"]
    assert [n.output for n in carried] == ["h", "l=0/h", "l=1/h"]
    assert carried[2].op == "add" and carried[2].inputs[0] == "l=0/h"
    assert ty(p, "y") == TensorType((256, 16), "f16")
    assert p.outputs == ["y"]


def test_overlap_model() -> None:
    p = load(MODELS / "overlap.rtg")
    assert p.streams == ["s_copy", "s_mm", "s_vec"]
    assert p.stream_priorities == {"s_mm": 0, "s_vec": 1}
    assert p.events == ["copied", "multiplied"]
    streams = {n.op: n.stream for n in p.op_nodes()}
    assert streams == {"copy": "s_copy", "matmul": "s_mm", "add": "s_vec", "relu": "s_vec"}
    kinds = [type(n).__name__ for n in p.nodes]
    assert kinds == [
        "OpNode", "RecordNode", "WaitNode", "OpNode", "RecordNode", "WaitNode", "OpNode",
        "OpNode", "CallbackNode", "SyncNode",
    ]  # fmt: skip
    callback = p.nodes[8]
    assert isinstance(callback, CallbackNode) and callback.after == "y" and not callback.blocking
    assert p.nodes[9] == SyncNode("device", None, p.nodes[9].span)


def test_overlap_model_is_race_free_as_written() -> None:
    """Each use of data produced on another stream waits for an event recorded after it."""
    p = load(MODELS / "overlap.rtg")
    producer_stream: dict[str, str | None] = {}
    recorded_covers: dict[str, set[str]] = {}  # event -> tensors finished when recorded
    done_on: dict[str, set[str]] = {s: set() for s in p.streams}
    visible: dict[str, set[str]] = {s: set() for s in p.streams}
    for node in p.nodes:
        if isinstance(node, OpNode):
            for name in node.inputs:
                src = producer_stream.get(name)
                if src is not None and src != node.stream:
                    assert name in visible[node.stream], f"{node.output} races on {name}"
            producer_stream[node.output] = node.stream
            done_on[node.stream].add(node.output)
            visible[node.stream].add(node.output)
        elif isinstance(node, RecordNode):
            recorded_covers[node.event] = set(done_on[node.stream])
        elif isinstance(node, WaitNode):
            visible[node.stream] |= recorded_covers[node.event]


def test_address_conflict_model() -> None:
    p = load(MODELS / "address_conflict.rtg")
    buffers = {t.name: (t.address, t.type) for t in p.tensors.values() if t.kind == "buffer"}
    assert buffers["X"] == (0x1000, TensorType((4096,), "i8"))
    assert buffers["Y"][0] == 0x2000
    kernels = {n.output: n for n in p.op_nodes()}
    assert set(kernels) == {"a", "b", "c", "d", "e"}
    assert all(n.op == "kernel" for n in kernels.values())
    assert all(p.tensors[name].kind == "token" for name in kernels)
    assert kernels["a"].attrs["writes"] == ("X",) and kernels["a"].attrs["unit"] == "cube"
    assert kernels["a"].attrs["us"] == 12.5
    assert kernels["b"].attrs["reads"] == ("Y",)
    assert kernels["d"].attrs["reads"] == ("X",) and kernels["d"].attrs["writes"] == ("Z",)
    assert kernels["e"].after == ("b", "d") and kernels["e"].attrs["block_dim"] == 1


@pytest.mark.parametrize("path", sorted(MODELS.glob("*.rtg")), ids=lambda p: p.stem)
def test_models_print(path: Path) -> None:
    p = load(path)
    listing = rtgraph.format_program(p)
    assert listing.startswith(f"program {p.name}(")
    for name in p.outputs:
        assert f"  output {name}" in listing
    assert listing.count("\n") >= len(p.nodes)


# --- numerics through the interpreter: the IR means what the source says -------------------


def test_the_ir_computes_what_the_source_says() -> None:
    p = parse(
        """
        fn dense(h, w, b) { return relu(h @ w + b) }
        program p(N = 8) {
            input x : f32[N, N]
            param w : f32[N, N]
            param b : f32[N]
            y1 = dense(x, w, b) * 0.5 - 1.0
            output y = y1 |> transpose([1, 0])
        }
        """
    )
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((8, 8), (8, 8), (8,)))
    out = rtgraph.evaluate(p, inputs={"x": x}, params={"w": w, "b": b})
    product = (x.astype(np.float64) @ w.astype(np.float64)).astype(np.float32)  # f32: f64 sums
    expected = ((np.maximum(product + b, 0) * np.float32(0.5)) - np.float32(1.0)).T
    np.testing.assert_allclose(out["y"], expected, rtol=1e-6)


# --- constructs ----------------------------------------------------------------------------


def test_declarations() -> None:
    p = parse(
        """
        program p(S = 4) {
            input a : f32[S] @pageable
            input b : bf16[S, 2] @pinned
            param w : f16[S] @cached
            param s : f32
            buffer A : bytes[0x100] at 0x1000
            buffer B : bytes[64]
        }
        """
    )
    t = p.tensors
    assert (t["a"].kind, t["a"].pinned, t["b"].pinned) == ("input", False, True)
    assert t["b"].type == TensorType((4, 2), "bf16")
    assert (t["w"].kind, t["w"].alloc, t["s"].type) == ("param", "cached", TensorType((), "f32"))
    assert (t["A"].kind, t["A"].address, t["A"].type) == (
        "buffer",
        0x1000,
        TensorType((256,), "i8"),
    )
    assert t["B"].address is None
    assert t["a"].span.line == 3


def test_compile_time_arithmetic() -> None:
    p = parse(
        """
        program p(D = 768, H = 12, K = D / H * 2) {
            const half = 7 / 2
            input x : f32[D / H, D % 500, min(D, 3), max(H, 5), K, 2 * 3 - 1]
            input y : f32[10 / 4 * 2]
        }
        """
    )
    assert p.params == {"D": 768, "H": 12, "K": 128}
    assert p.tensors["x"].type.shape == (64, 268, 3, 12, 128, 5)
    assert p.tensors["y"].type.shape == (5,)


def test_scalar_operands_become_consts_of_the_tensor_dtype() -> None:
    p = parse(
        """
        program p() {
            const eps = 1e-5
            input x : bf16[4]
            input n : i32[4]
            y = 1.0 - x * sqrt(4.0) + eps
            z = n * 3
        }
        """
    )
    consts = [t for t in p.tensors.values() if t.kind == "const"]
    assert [(c.value, c.type.dtype) for c in consts] == [
        (2.0, "bf16"),
        (1.0, "bf16"),
        (1e-5, "bf16"),
        (3.0, "i32"),
    ]
    assert len({c.name for c in consts}) == 4 and all(c.name.startswith("%c") for c in consts)
    assert all(c.type.shape == () for c in consts)
    assert ops(p) == ["mul", "sub", "add", "mul"]
    assert p.op_nodes()[1].inputs[0] == consts[1].name  # 1.0 - ... keeps the order


def test_unary_minus_and_all_infix_ops() -> None:
    p = parse("program p() {\n input a : f32[2, 2]\n y = -a + a - a * a / a @ a\n}")
    # (-a + a) - (((a * a) / a) @ a), evaluated left to right
    assert ops(p) == ["neg", "add", "mul", "div", "matmul", "sub"]


def test_pipe_is_a_call_with_the_left_side_first() -> None:
    a = parse("program p() { input x : f32[2, 3]\n y = transpose(softmax(x, axis = 0), [1, 0]) }")
    b = parse(
        "program p() { input x : f32[2, 3]\n y = x |> softmax(axis = 0) |> transpose([1, 0]) }"
    )
    assert [(n.op, n.inputs, dict(n.attrs)) for n in a.op_nodes()] == [
        (n.op, n.inputs, dict(n.attrs)) for n in b.op_nodes()
    ]


def test_positional_and_keyword_attributes() -> None:
    p = parse(
        """
        program p() {
            input x : f32[2, 3, 4]
            a = reshape(x, [6, 4])
            b = reshape(x, shape = [4, -1])
            c = transpose(x)
            d = scale(x, 0.5)
            e = reduce_sum(x, axis = [0, 2], keepdims = true)
            f = cast(x, dtype = f16)
            g = matmul(a, transpose(a, [1, 0]), block_dim = 8)
        }
        """
    )
    attrs = {n.output: dict(n.attrs) for n in p.op_nodes()}
    assert attrs["a"] == {"shape": (6, 4)}
    assert attrs["b"] == {"shape": (4, -1)}
    assert attrs["c"] == {"perm": None}
    assert attrs["d"] == {"s": 0.5}
    assert attrs["e"] == {"axis": (0, 2), "keepdims": True}
    assert attrs["f"] == {"dtype": "f16"} and ty(p, "f").dtype == "f16"
    assert attrs["g"] == {"block_dim": 8}
    assert ty(p, "e") == TensorType((1, 3, 1), "f32")


def test_min_and_max_of_tensors_are_ops() -> None:
    p = parse("program p() { input x : f32[4]\n y = max(x, 0.0)\n z = min(x, y) }")
    assert ops(p) == ["maximum", "minimum"]


def test_functions_inline_with_qualified_names() -> None:
    p = parse(
        """
        fn ffn(x, w1, w2) {
            h = gelu(x @ w1)
            return h @ w2
        }
        fn twice(x, w1, w2) { return ffn(ffn(x, w1, w2), w1, w2) }
        program p() {
            input x : f32[4, 8]
            param w1 : f32[8, 16]
            param w2 : f32[16, 8]
            y = twice(x, w1, w2)
            z = ffn(y, w1, w2)
        }
        """
    )
    hs = [t for t in p.tensors.values() if t.label == "h"]
    assert [t.name for t in hs] == ["twice.1/ffn.1/h", "twice.1/ffn.2/h", "ffn.3/h"]
    # The function's result takes the name it is bound to.
    assert "y" in p.tensors and "z" in p.tensors
    assert ty(p, "z") == TensorType((4, 8), "f32")
    assert Counter(ops(p)) == {"matmul": 6, "gelu": 3}


def test_a_returned_loop_carried_name_takes_the_name_it_is_bound_to() -> None:
    # `return acc` makes no tensor of its own: the binding renames the one it returns, and
    # every later use (in the function and after it) follows.
    p = parse(
        """
        fn doubled(x, w) {
            acc = x
            for i in 0..3 {
                acc = acc * 2.0
            }
            t = kernel(unit = vector, us = 1, reads = [acc], after = [acc])
            return acc
        }
        fn same(x) { return x }
        program p() {
            input x : f32[4, 4]
            param w : f32[4, 4]
            output y = doubled(x, w)
            output z = same(y) @ w
            output v = same(x) + 1.0
        }
        """
    )
    assert p.outputs == ["y", "z", "v"]
    assert p.tensors["y"].label == "y" and "doubled.1/i=2/acc" not in p.tensors
    kernel = next(n for n in p.op_nodes() if n.op == "kernel")
    assert tuple(kernel.attrs["reads"]) == ("y",) and kernel.after == ("y",)
    assert next(n for n in p.op_nodes() if n.output == "z").inputs[0] == "y"
    assert p.tensors["x"].kind == "input"  # a returned argument is not renamed


def test_functions_are_shape_polymorphic_and_take_compile_time_values() -> None:
    p = parse(
        """
        fn heads(x, n) { return reshape(x, [n, 4]) }
        program p() {
            input a : f32[8]
            input b : f32[16]
            ya = heads(a, 2)
            yb = heads(b, 4)
        }
        """
    )
    assert ty(p, "ya").shape == (2, 4) and ty(p, "yb").shape == (4, 4)


def test_for_loops_unroll_and_carry_values() -> None:
    p = parse(
        """
        program p(L = 3) {
            input x : f32[4, 4]
            param w[L] : f32[4, 4]
            h = x @ w[0]
            for l in 1..L {
                t = relu(h)
                h = t @ w[l]
            }
            output y = relu(h)
        }
        """
    )
    assert [n.output for n in p.op_nodes()] == ["h", "l=1/t", "l=1/h", "l=2/t", "l=2/h", "y"]
    assert p.op_nodes()[4].inputs == ("l=2/t", "w[2]")
    assert p.op_nodes()[5].inputs == ("l=2/h",)


def test_an_empty_range_runs_no_iteration() -> None:
    p = parse("program p() { input x : f32[2]\n for i in 3..1 { y = relu(x) } }")
    assert p.nodes == []


def test_streams_events_and_host_sync() -> None:
    p = parse(
        """
        program p() {
            input x : f32[4]
            stream a, b(priority = 7)
            event e
            on a { y = relu(x); record e; barrier }
            on b { wait e; z = relu(y) }
            sync e
            sync b
            sync
            callback "done" after z blocking
        }
        """
    )
    nodes = p.nodes
    assert isinstance(nodes[1], RecordNode) and (nodes[1].event, nodes[1].stream) == ("e", "a")
    assert isinstance(nodes[2], BarrierNode) and nodes[2].stream == "a"
    assert isinstance(nodes[3], WaitNode) and nodes[3].stream == "b"
    assert [(n.kind, n.target) for n in nodes if isinstance(n, SyncNode)] == [
        ("event", "e"), ("stream", "b"), ("device", None)
    ]  # fmt: skip
    assert nodes[-1] == CallbackNode("done", "z", nodes[-1].span, blocking=True)
    assert p.stream_priorities == {"b": 7}


def test_after_names_tokens_and_tensors() -> None:
    p = parse(
        """
        program p() {
            input x : f32[4]
            t1 = kernel(unit = vector, us = 1)
            y = relu(x, after = [t1])
            t2 = kernel(unit = dma, us = 2.5, after = [t1, y, t1], block_dim = 2)
        }
        """
    )
    y, t2 = p.op_nodes()[1:]
    assert y.after == ("t1",)
    assert t2.after == ("t1", "y") and t2.attrs["block_dim"] == 2
    assert p.tensors["t2"].kind == "token"


def test_outputs_name_existing_tensors() -> None:
    p = parse("program p() { input x : f32[4]\n y = relu(x)\n output y\n output x }")
    assert p.outputs == ["y", "x"]


def test_strings_are_only_for_the_device_and_callbacks() -> None:
    with pytest.raises(RtgError, match=r"'\+' does not apply to a string"):
        parse('program p() { input x : f32[4]\n y = x + "one" }')


# --- limits --------------------------------------------------------------------------------


def test_device_capacity_bounds_every_tensor() -> None:
    text = """program p(N = 64) {
        input x : f32[N, N]
        y = reshape(x, [N, N, 1]) @ reshape(x, [N, 1, N])
    }"""
    parse(text, device_capacity=1 << 20)
    with pytest.raises(CapacityError, match="larger than the device's memory"):
        parse(text, params={"N": 128}, device_capacity=1 << 20)


def test_unrolling_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checker, "MAX_STEPS", 1_000)
    parse("program p() { for i in 0..999 { } }")
    with pytest.raises(RtgError, match="more than 1,000 statements"):
        parse("program p() { for i in 0..10000000 { } }")
    with pytest.raises(RtgError, match="more than 1,000 statements"):
        parse("program p() { for i in 0..40 { for j in 0..40 { } } }")


def test_inlining_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(emit, "MAX_NODES", 1_000)
    fns = "fn f0(x) { return relu(x) }\n" + "".join(
        f"fn f{i}(x) {{ return f{i - 1}(f{i - 1}(x)) }}\n" for i in range(1, 25)
    )
    parse(fns + "program p() { input x : f32[2]\n y = f9(x) }")  # 512 nodes
    with pytest.raises(RtgError, match="more than 1,000 operations"):
        parse(fns + "program p() { input x : f32[2]\n y = f24(x) }")


def test_functions_see_the_programs_streams_and_events() -> None:
    p = parse(
        """
        fn produce(x) {
            y = relu(x)
            record ready
            return y
        }
        program p() {
            input x : f32[4]
            stream a, b
            event ready
            on a { y = produce(x) }
            on b { wait ready; z = relu(y) }
        }
        """
    )
    kinds = [(type(n).__name__, getattr(n, "stream", None)) for n in p.nodes]
    assert kinds == [("OpNode", "a"), ("RecordNode", "a"), ("WaitNode", "b"), ("OpNode", "b")]


def test_listing() -> None:
    p = parse(
        """
        device "toy"
        program p(N = 2) {
            input x : f32[N, 4] @pageable
            param w : f32[4, 4] @direct
            buffer A : bytes[64] at 0x40
            stream s(priority = 3)
            event e
            on s { y = relu(x @ w) * 2; record e }
            t = kernel(unit = dma, us = 1.5, writes = [A], after = [y])
            sync e
            callback "c" after t blocking
            output y
        }
        """
    )
    assert rtgraph.format_program(p).splitlines() == [
        'program p(N=2)  device "toy"',
        "  input  x : f32[2, 4] @pageable",
        "  param  w : f32[4, 4] @direct",
        "  buffer A : i8[64] at 0x40",
        "  const  %c0 : f32[] = 2.0",
        "  stream s(priority=3)",
        "  event  e",
        "  %0 = matmul(x, w) : f32[2, 4] on s              # x @ w",
        "  %1 = relu(%0) : f32[2, 4] on s                  # relu(x @ w)",
        "  y = mul(%1, %c0) : f32[2, 4] on s",
        "  record e on s",
        "  t = kernel(unit=dma, us=1.5, reads=[], writes=[A], block_dim=1) after [y]",
        "  sync event e",
        '  callback "c" after t blocking',
        "  output y",
    ]


def test_placed_copies_fused_blocks_and_event_arrays_in_the_listing() -> None:
    p = parse(
        """
        program p() {
            input x : f32[4]
            stream s, t; event e[2]
            on s { xd = to_device(x); y = fused { u = xd * 2; return relu(u) } }
            for i in 0..2 { on s { record e[i % 2] }; on t { wait e[i % 2] } }
            on t { output y = to_host(y) }
        }
        """
    )
    assert rtgraph.format_program(p).splitlines()[4:-1] == [
        "  event  e[0], e[1]",
        "  to_device(x) : f32[4] on s",
        "  y = fused[mul(x, %c0) → relu(·)](x, %c0) : f32[4] on s",
        "  record e[0] on s",
        "  wait e[0] on t",
        "  record e[1] on s",
        "  wait e[1] on t",
        "  to_host(y) : f32[4] on t",
    ]


def test_every_op_of_the_language_checks_and_runs() -> None:
    """Each op of the spec, with its attributes written as users write them."""
    p = parse(
        """
        program all_ops(N = 2, C = 4, H = 8, W = 8) {
            input x : f32[N, C, H, W]
            input m : f32[H, W]
            param w : f32[C, C, 3, 3]
            param g : f32[C]
            input cond : i8[H, W]
            c1 = conv2d(x, w, stride = 1, padding = 1, groups = 1)
            c2 = conv2d(x, w, stride = [2, 2], padding = [1, 1])
            p1 = pool2d(x, kind = max, kernel = 2)
            p2 = pool2d(x, kind = avg, kernel = [2, 2], stride = 2, padding = 0)
            e = m - m / m + (-m) |> exp |> log |> sqrt |> rsqrt |> tanh |> sigmoid
                |> relu |> gelu |> silu
            s = softmax(m, axis = -1)
            l = layernorm(m, axis = -1, eps = 1e-5)
            r = rmsnorm(m)
            gn = groupnorm(x, g, g, groups = 2)
            rs = reduce_sum(m, axis = 0, keepdims = true) + reduce_mean(m)
                 + reduce_max(m, axis = [0, 1])
            ca = cast(m, dtype = bf16)
            sc = scale(m, 0.5)
            wh = where(cond, 0.0, m)
            cc = concat(m, m, m, axis = 1)
            sl = slice(m, start = 1, stop = -1, axis = 0)
            rh = reshape(m, [4, -1]) |> transpose([1, 0]) |> broadcast_to([3, 16, 4])
            cp = copy(m)
            mx = maximum(m, 0.0) + minimum(m, 1.0) + max(m, m) + min(m, 2.0)
            output c1
            output c2
            output p2
            output gn
            output rs
            output ca
            output wh
            output cc
            output sl
            output rh
            output mx
        }
        """
    )
    expected = {
        "c1": (2, 4, 8, 8), "c2": (2, 4, 4, 4), "p2": (2, 4, 4, 4), "gn": (2, 4, 8, 8),
        "rs": (1, 8), "ca": (8, 8), "wh": (8, 8), "cc": (8, 24), "sl": (6, 8),
        "rh": (3, 16, 4), "mx": (8, 8),
    }  # fmt: skip
    assert {name: ty(p, name).shape for name in p.outputs} == expected
    assert ty(p, "ca").dtype == "bf16" and ty(p, "wh").dtype == "f32"
    out = rtgraph.evaluate(p, seed=3)
    assert {name: out[name].shape for name in out} == expected
    m = rtgraph.evaluate(
        p, seed=3, inputs={"m": np.arange(64, dtype=np.float32).reshape(8, 8)}, fill_missing=True
    )
    np.testing.assert_array_equal(m["sl"], np.arange(8, 56, dtype=np.float32).reshape(6, 8))
