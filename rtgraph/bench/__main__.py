"""``python -m rtgraph.bench models/ [--json] [--figure OUT]``: the headline benchmark on its own.

The same run as ``rtgraph bench``; ``benchmarks/run_all.py`` calls it for its headline section.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from rtgraph.bench.run import bench
from rtgraph.errors import UsageError
from rtgraph.reports.style import save_figure


def main(argv: Sequence[str] | None = None) -> int:
    """Print the tables (or ``--json``) of every model in the paths; exit 2 on a usage error."""
    parser = argparse.ArgumentParser(
        prog="python -m rtgraph.bench",
        description="rtgraph bench: the headline comparison, measured on a set of models.",
    )
    parser.add_argument("paths", nargs="+", help=".rtg files or folders of them")
    parser.add_argument("--device", default="ascend-910b")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--figure", metavar="OUT", help="also save the picture (.png, .svg, .pdf)")
    args = parser.parse_args(argv)
    try:
        report = bench(args.paths, device=args.device, progress=None)
        if args.figure:
            save_figure(report.figure(), args.figure)
    except UsageError as e:
        print(e.render(), file=sys.stderr)
        return 2
    print(json.dumps(report.to_json(), indent=1) if args.json else report.markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
