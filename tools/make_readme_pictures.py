"""Regenerate the pictures under ``docs/`` that the README and docs/pictures.md show.

One bundled model (``models/attention.rtg``, at a smaller size by default so the picture stays
readable) is compiled under the ``single`` and ``by-unit`` stream policies and run in timing
mode on its device. Three pictures are written:

* ``docs/timeline_single_vs_by_unit.png`` — the two timelines stacked on one time axis;
* ``docs/dag_single_vs_by_unit.png`` — the two stream assignments of the task DAG;
* ``docs/memory_map_attention.png`` — the by-unit run's memory plan, address × time.

Run from the repository root::

    python tools/make_readme_pictures.py            # S=128, D=768, H=12 on ascend-910b
    python tools/make_readme_pictures.py --out /tmp/pictures   # elsewhere (made if missing)

Everything that decides a number is deterministic, so the same rtgraph gives the same pictures.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import rtgraph  # noqa: E402 - after the path set-up
from rtgraph.reports.dagviz import plot_dag_compare  # noqa: E402
from rtgraph.reports.memoryviz import plot_memory_map  # noqa: E402
from rtgraph.reports.timeline import plot_timeline_compare, save_figure  # noqa: E402

POLICIES = ("single", "by-unit")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(ROOT / "models" / "attention.rtg"))
    parser.add_argument("-S", type=int, default=128, help="sequence length (default 128)")
    parser.add_argument("--device", default=None, help="device (default: the model's own)")
    parser.add_argument("--memory", default="stream-ordered", help="memory plan policy")
    parser.add_argument(
        "--out", default=str(ROOT / "docs"), help="output folder (created if missing)"
    )
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    program = rtgraph.load(args.model, S=args.S, device=args.device)
    device = rtgraph.device(args.device or program.device)
    runs = {}
    for policy in POLICIES:
        compiled = rtgraph.compile(program, device=device, streams=policy, memory=args.memory)
        result = rtgraph.run(compiled, device=device, numerics=False)
        runs[policy] = (result, compiled)

    single, by_unit = (runs[p][0].makespan_us for p in POLICIES)
    fig = plot_timeline_compare(runs, device=device)
    fig.suptitle(
        f"{program.name} (S={args.S}) on {device.name}: one stream {single:,.1f} µs, "
        f"one stream per unit {by_unit:,.1f} µs",
        fontsize=12,
    )
    written = [save_figure(fig, out / "timeline_single_vs_by_unit.png")]
    written.append(
        save_figure(
            plot_dag_compare({p: runs[p][1] for p in POLICIES}), out / "dag_single_vs_by_unit.png"
        )
    )
    result, compiled = runs["by-unit"]
    written.append(save_figure(plot_memory_map(compiled, result), out / "memory_map_attention.png"))
    for path in written:
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


if __name__ == "__main__":
    main()
