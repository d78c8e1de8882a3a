"""How one step scales over 1, 2, 4 and 8 devices under data, pipeline and tensor parallelism.

For ``models/layer_stack.rtg`` (4 residual feed-forward layers, B = 4096, D = 2048, F = 8192)
and ``models/mlp_train.rtg`` (a hand-written training step, B = 4096, D = 2048, H = 8192) on
cluster ascend-910b-x8, each parallelism at 1, 2, 4 and 8 devices (pipeline: 8 micro-batches,
1F1B) is compiled and run timing-only; speedup is over the same program on one device,
efficiency is speedup / devices — both measured on the emulated clock (rtgraph.bench.scaling).

Usage: python benchmarks/scaling.py [--quick] [--cluster NAME] [--model PATH ...] [-D NAME=V]
(--quick: cluster toy, B = 256, D = 256, F = H = 1024)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rtgraph.bench import machine_note  # noqa: E402
from rtgraph.bench.scaling import DEFAULT_CLUSTER, DEFAULT_MODELS, scaling  # noqa: E402

QUICK = {
    "transformer_stack": {"B": 8, "S": 32, "D": 128, "H": 8, "F": 256, "L": 8},
    "layer_stack": {"B": 256, "D": 256, "F": 1024},
    "mlp_train": {"B": 256, "D": 256, "H": 1024},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="cluster toy, small sizes")
    parser.add_argument("--cluster", help=f"default {DEFAULT_CLUSTER} (toy with --quick)")
    parser.add_argument("--model", action="append", help="a .rtg model (repeatable)")
    parser.add_argument("-D", dest="define", action="append", default=[], metavar="NAME=V")
    args = parser.parse_args()
    params: dict[str, dict[str, int]] = {k: dict(v) for k, v in QUICK.items()} if args.quick else {}
    every = params.setdefault("*", {})
    for pair in args.define:
        name, _, value = pair.partition("=")
        every[name] = int(value)
    cluster = args.cluster or ("toy" if args.quick else DEFAULT_CLUSTER)
    models = args.model or [ROOT / m for m in DEFAULT_MODELS]
    table = scaling(models, cluster=cluster, params=params)
    print("# Scaling: one step over 1, 2, 4 and 8 devices, against linear")
    print(f"run on: {machine_note()} (the figures are the emulated clock's)\n")
    print(table.markdown())
    print()
    for p in table.points:
        if p.devices == max(q.devices for q in table.points) and p.efficiency is not None:
            print(
                f"- {p.model}, {p.parallelism} × {p.devices}: speedup {p.speedup:.2f}, "
                f"efficiency {p.efficiency:.0%}, bubble {p.bubble:.0%}, busiest link "
                f"{p.link_utilization:.0%}"
            )


if __name__ == "__main__":
    main()
