"""Regenerate the ResNet-50 pictures docs/onnx.md shows: an imported ONNX model's timeline
and memory plan.

ResNet-50 as the ``onnx`` package ships it for its backend tests
(``onnx/backend/test/data/light/light_resnet50.onnx``) is imported, compiled for ascend-910b
under the ``single`` and ``by-unit`` policies with the stream-ordered memory plan, and run in
timing mode. Two pictures are written:

* ``docs/resnet50_timeline.png`` — the two timelines on one time axis;
* ``docs/resnet50_memory_map.png`` — the by-unit run's memory plan, address × time.

Run from the repository root (needs ``pip install 'rtgraph[onnx]'``)::

    python tools/make_onnx_pictures.py [--out FOLDER]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import rtgraph  # noqa: E402 - after the path set-up
from rtgraph.frontend.onnx_import import import_onnx  # noqa: E402
from rtgraph.reports.memoryviz import plot_memory_map  # noqa: E402
from rtgraph.reports.timeline import plot_timeline_compare, save_figure  # noqa: E402

MODEL = Path(onnx.__file__).parent / "backend/test/data/light/light_resnet50.onnx"
POLICIES = ("single", "by-unit")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs"), help="output folder")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    imported = import_onnx(MODEL, device="ascend-910b")
    program = rtgraph.parse(imported.text, filename="resnet50.rtg")
    device = rtgraph.device("ascend-910b")
    runs = {}
    for policy in POLICIES:
        compiled = rtgraph.compile(program, device=device, streams=policy)
        runs[policy] = (rtgraph.run(compiled, device=device, numerics=False), compiled)
    single, by_unit = (runs[p][0].makespan_us for p in POLICIES)
    fig = plot_timeline_compare(runs, device=device)
    fig.suptitle(
        f"ResNet-50 (ONNX, batch 1, f32) on {device.name}: one stream {single:,.1f} µs, "
        f"one stream per unit {by_unit:,.1f} µs",
        fontsize=12,
    )
    written = [save_figure(fig, out / "resnet50_timeline.png")]
    result, compiled = runs["by-unit"]
    written.append(save_figure(plot_memory_map(compiled, result), out / "resnet50_memory_map.png"))
    for path in written:
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    memory = compiled.meta.get("memory", {})
    print(f"makespans: single {single:,.1f} µs, by-unit {by_unit:,.1f} µs; memory {memory}")


if __name__ == "__main__":
    main()
