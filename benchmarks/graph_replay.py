"""Graph replay: one decode step captured once and replayed, against the same step run eagerly.

The step is models/llm_decode.rtg's op sequence built with :mod:`rtgraph.runtime.ops` (the
``.rtg`` program cannot be driven through the runtime API): per layer RMSNorm, q/k/v
projections, attention of one query over the layer's KV cache, output projection and residual,
RMSNorm and a SwiGLU feed-forward; then the final RMSNorm and the vocabulary projection, and the
next token's embedding copied into the static input. Differences from the model, all because a
captured graph has static shapes: the KV cache has a fixed length (the new k and v are not
appended — a static-shape decoder writes them into a preallocated max-length cache), and the
sizes are small (``--dim``) so the emulator's numerics stay quick.

Each mode runs ``--steps`` steps with one stream sync at the end (the host runs ahead, as a
decode loop that keeps its tokens on the device does). Prints, per device and mode: tasks per
step, host submission time per step (ioctls or graph launches), makespan per step, and whether
the final hidden state equals the eager one bit for bit.

The ``rtg`` rows run the same step written in the language, models/llm_decode_loop.rtg
(``graph step { … }`` replayed, or with ``eager = 1`` the same replays as ordinary work) at the
same sizes, compiled with the default options. That program's loop differs in one way: the
host waits for each token (a ``sync`` per step), so a step's makespan includes its first
submission and the sync's return.

Usage: python benchmarks/graph_replay.py [--steps 64] [--layers 2] [--dim 64]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import rtgraph  # noqa: E402
from rtgraph import runtime as rt  # noqa: E402
from rtgraph.runtime import ops  # noqa: E402

DEVICES = ("toy", "ascend-910b")
HOST_KINDS = ("submit", "graph launch")


def weights(layers: int, dim: int, heads: int, cache: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)

    def t(*shape: int) -> rt.Tensor:
        return rt.tensor((rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float16))

    e = dim // heads
    w: dict = {"x": t(1, dim), "norm_out": t(dim), "w_vocab": t(dim, 4 * dim)}
    for name, shape in (
        ("k_cache", (heads, cache, e)),
        ("v_cache", (heads, cache, e)),
        ("norm1", (dim,)),
        ("wq", (dim, dim)),
        ("wk", (dim, dim)),
        ("wv", (dim, dim)),
        ("wo", (dim, dim)),
        ("norm2", (dim,)),
        ("w_gate", (dim, 2 * dim)),
        ("w_up", (dim, 2 * dim)),
        ("w_down", (2 * dim, dim)),
        ("w_embed", (4 * dim, dim)),
    ):
        w[name] = [t(*shape) for _ in range(layers)] if name != "w_embed" else t(*shape)
    return w


def step(w: dict, layers: int, dim: int, heads: int) -> None:
    """One decode step; the next token's embedding goes into the static input ``w["x"]``."""
    e = dim // heads
    h = w["x"]
    for ell in range(layers):
        a = ops.rmsnorm(h, w["norm1"][ell], axis=-1, eps=1e-6)
        q = ops.reshape(ops.matmul(a, w["wq"][ell]), [heads, 1, e])
        k = w["k_cache"][ell]
        v = w["v_cache"][ell]
        s = ops.scale(ops.matmul(q, ops.transpose(k, [0, 2, 1])), 1.0 / np.sqrt(e))
        p = ops.softmax(s, axis=-1)
        r = ops.add(h, ops.matmul(ops.reshape(ops.matmul(p, v), [1, dim]), w["wo"][ell]))
        n = ops.rmsnorm(r, w["norm2"][ell], axis=-1, eps=1e-6)
        ff = ops.mul(ops.silu(ops.matmul(n, w["w_gate"][ell])), ops.matmul(n, w["w_up"][ell]))
        h = ops.add(r, ops.matmul(ff, w["w_down"][ell]))
    logits = ops.matmul(ops.rmsnorm(h, w["norm_out"], axis=-1, eps=1e-6), w["w_vocab"])
    w["x"].copy_(ops.matmul(ops.softmax(logits, axis=-1), w["w_embed"]))


def run(device: str, mode: str, steps: int, layers: int, dim: int) -> tuple:
    rt.reset()
    rt.set_device(device)
    heads = 4
    w = weights(layers, dim, heads, cache=4 * dim)
    s = rt.Stream()
    rt.synchronize()
    start = rt.last_run()
    t0 = max(a.end for a in start.host_activities if a.lane == "host")
    g = rt.Graph()
    before = len(rt.recorded_program().tasks)
    if mode == "replay":
        with rt.graph(g, stream=s):
            step(w, layers, dim, heads)
    with rt.stream(s):
        for _ in range(steps):
            g.replay() if mode == "replay" else step(w, layers, dim, heads)
    s.synchronize()
    result = rt.last_run()
    tasks = (len(rt.recorded_program().tasks) - before) // steps
    host = sum(
        a.end - a.start for a in result.host_activities if a.kind in HOST_KINDS and a.start >= t0
    )
    end = max(t.end for t in result.tasks if t.end is not None)
    with rt.stream(s):
        x = w["x"].numpy()
    return tasks, host / steps, (end - t0) / steps, x


def run_rtg(device: str, mode: str, steps: int, layers: int, dim: int) -> tuple:
    """models/llm_decode_loop.rtg at the benchmark's sizes: the same figures as :func:`run`."""
    sizes = {"L": layers, "D": dim, "H": 4, "T": 4 * dim, "F": 2 * dim, "V": 4 * dim}
    program = rtgraph.load(
        ROOT / "models" / "llm_decode_loop.rtg",
        {**sizes, "STEPS": steps, "EAGER": int(mode == "eager")},
        device=device,
    )
    result = rtgraph.run(rtgraph.compile(program, device=device), device=device, seed=0)
    kernels = sum(t.op not in ("h2d", "d2h") for t in result.stream_program.tasks)
    host = sum(a.end - a.start for a in result.host_activities if a.kind in HOST_KINDS)
    (out,) = result.outputs.values()
    return kernels // steps, host / steps, result.makespan_us / steps, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dim", type=int, default=64)
    args = parser.parse_args()
    head = f"{'device':<12} {'mode':<11} {'tasks/step':>10} {'host µs/step':>13} "
    print(head + f"{'makespan µs/step':>17} {'host ×':>7} {'bit-equal':>9}")
    for device in DEVICES:
        for form, runner in (("", run), ("rtg ", run_rtg)):
            eager = runner(device, "eager", args.steps, args.layers, args.dim)
            replay = runner(device, "replay", args.steps, args.layers, args.dim)
            same = np.array_equal(eager[3], replay[3])
            for mode, (tasks, host, span, _) in (("eager", eager), ("replay", replay)):
                ratio = eager[1] / host if host else float("inf")
                print(
                    f"{device:<12} {form + mode:<11} {tasks:>10} {host:>13.2f} {span:>17.2f} "
                    f"{ratio:>7.1f} {str(same) if mode == 'replay' else '':>9}"
                )


if __name__ == "__main__":
    main()
