"""Write the table of every op into ``docs/language.md``, from the op registry.

The table is :func:`rtgraph.ops.op_table` (what ``rtgraph ops`` prints); it goes between the
marker comments ``<!-- ops:begin -->`` and ``<!-- ops:end -->``, and nothing else in the file
changes. ``tests/test_op_table.py`` fails when the file is not what this script would write.

Run from the repository root::

    python tools/make_op_table.py           # rewrite docs/language.md
    python tools/make_op_table.py --check   # exit 1 if docs/language.md is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from doc_sections import ROOT, replace_between, write_or_check

from rtgraph.ops import op_table

DOC = ROOT / "docs" / "language.md"
BEGIN = "<!-- ops:begin -->"
END = "<!-- ops:end -->"


def with_op_table(text: str) -> str:
    """``text`` with the block between the markers replaced by the current op table."""
    return replace_between(text, BEGIN, END, f"\n{op_table()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the doc is stale")
    args = parser.parse_args(argv)
    return write_or_check(DOC, with_op_table(DOC.read_text(encoding="utf-8")), check=args.check)


if __name__ == "__main__":
    sys.exit(main())
