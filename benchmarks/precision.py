"""Each precision's speed and error on the seed's text-to-image case and the naive transformer.

For ``models/unet_block.rtg`` and ``models/transformer_naive.rtg`` (default parameters, device
ascend-910b, by-unit streams) the program is compiled with ``--precision`` f32, f16, int8 and
auto (error budget cosine = 0.999, the default) and run on the emulated clock; each output is
compared with the program computed in f32 on seed-0 data (int8 and auto calibrate on seeds
1 … 4). Issue 17's acceptance: auto at cosine ≥ 0.999 is ≥ 1.4 × faster than f32.

Usage: python benchmarks/precision.py [--quick]   (--quick: S = 256 for the transformer)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import rtgraph  # noqa: E402
from rtgraph.bench import machine_note  # noqa: E402
from rtgraph.bench.precision import precision_rows  # noqa: E402
from rtgraph.bench.tables import precision_table  # noqa: E402

DEVICE = "ascend-910b"
MODELS = ("unet_block", "transformer_naive")
FORMS = ("f32", "f16", "int8", "auto")
TARGET_SPEEDUP, TARGET_COSINE = 1.4, 0.999


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the transformer at S = 256")
    args = parser.parse_args()
    spec = rtgraph.device(DEVICE)
    rows = []
    for name in MODELS:
        params = {"S": 256} if args.quick and name == "transformer_naive" else {}
        program = rtgraph.load(ROOT / "models" / f"{name}.rtg", params, device=spec)
        rows += precision_rows(name, program, spec, FORMS)
    print("# Precision: speed against f32 and error against the f32 program")
    print(f"device {DEVICE}, by-unit streams; run on: {machine_note()}\n")
    print(precision_table(rows))
    print()
    for row in rows:
        if row.precision == "auto":
            ok = row.speedup >= TARGET_SPEEDUP and row.cosine >= TARGET_COSINE
            print(
                f"- {row.model}: auto {row.speedup:.2f}× f32 at cosine {row.cosine:.6f} — "
                f"{'meets' if ok else 'MISSES'} ≥ {TARGET_SPEEDUP}× at ≥ {TARGET_COSINE}"
            )


if __name__ == "__main__":
    main()
