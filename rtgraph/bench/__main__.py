"""``python -m rtgraph.bench models/ [--json] [--figure OUT]``: the headline benchmark on its own;
``python -m rtgraph.bench --scaling [MODELS] [--cluster NAME] [-D NAME=VALUE]``: the scaling
table (:mod:`rtgraph.bench.scaling`).

The same runs as ``rtgraph bench``; ``benchmarks/run_all.py`` calls it for its headline section.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from rtgraph.bench.figure import report_figure
from rtgraph.bench.run import bench
from rtgraph.bench.scaling import DEFAULT_CLUSTER, DEFAULT_MODELS, MICRO_BATCHES, scaling
from rtgraph.errors import UsageError
from rtgraph.reports.style import save_figure


def main(argv: Sequence[str] | None = None) -> int:
    """Print the tables (or ``--json``) of every model in the paths; exit 2 on a usage error."""
    parser = argparse.ArgumentParser(
        prog="python -m rtgraph.bench",
        description="rtgraph bench: the headline comparison, measured on a set of models.",
    )
    parser.add_argument("paths", nargs="*", help=".rtg files or folders of them")
    parser.add_argument("--device", default="ascend-910b")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--figure", metavar="OUT", help="also save the picture (.png, .svg, .pdf)")
    parser.add_argument(
        "--scaling",
        action="store_true",
        help="the scaling table: 1, 2, 4, 8 devices under data, pipeline and tensor parallelism "
        f"(models: the paths, default {' '.join(DEFAULT_MODELS)})",
    )
    parser.add_argument("--cluster", default=DEFAULT_CLUSTER, help="the cluster of --scaling")
    parser.add_argument(
        "--micro-batches", type=int, default=MICRO_BATCHES, help="of every pipeline point"
    )
    parser.add_argument(
        "-D", dest="define", action="append", metavar="NAME=VALUE", help="a model parameter"
    )
    args = parser.parse_args(argv)
    try:
        if args.scaling:
            table = scaling(
                args.paths or DEFAULT_MODELS,
                cluster=args.cluster,
                micro_batches=args.micro_batches,
                params={"*": _defines(args.define or [])},
            )
            print(json.dumps(table.to_json(), indent=1) if args.json else table.markdown())
            return 0
        if not args.paths:
            raise UsageError("no models to benchmark", hint="for example: rtgraph bench models/")
        report = bench(args.paths, device=args.device, progress=None)
        if args.figure:
            save_figure(report_figure(report), args.figure)
    except UsageError as e:
        print(e.render(), file=sys.stderr)
        return 2
    print(json.dumps(report.to_json(), indent=1) if args.json else report.markdown())
    return 0


def _defines(pairs: Sequence[str]) -> dict[str, int]:
    """``-D NAME=VALUE`` pairs (as ``rtgraph bench -D`` reads them, every model's NAME)."""
    out = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        try:
            out[name] = int(value, 0)
        except ValueError:
            raise UsageError(f"-D {pair}: expected NAME=INTEGER", hint="e.g. -D B=1024") from None
    return out


if __name__ == "__main__":
    sys.exit(main())
