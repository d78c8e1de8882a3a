"""Write ``docs/options.md``: every compile option, its values and its default.

The page is :func:`rtgraph.compiler.options.options_markdown`, generated from the vocabularies
each option declares next to its implementation (stream policies, memory plans, allocation
modes). ``tests/test_options.py`` fails when the file is not what this script would write.

Run from the repository root::

    python tools/make_options_doc.py           # rewrite docs/options.md
    python tools/make_options_doc.py --check   # exit 1 if docs/options.md is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from doc_sections import ROOT, write_or_check

from rtgraph.compiler.options import options_markdown

DOC = ROOT / "docs" / "options.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the doc is stale")
    args = parser.parse_args(argv)
    return write_or_check(DOC, options_markdown(), check=args.check)


if __name__ == "__main__":
    sys.exit(main())
