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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rtgraph.files import write_atomic  # noqa: E402 - after the path set-up
from rtgraph.ops import op_table  # noqa: E402

DOC = ROOT / "docs" / "language.md"
BEGIN = "<!-- ops:begin -->"
END = "<!-- ops:end -->"


def with_op_table(text: str) -> str:
    """``text`` with the block between the markers replaced by the current op table."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"expected the markers {BEGIN} and {END}, in that order")
    head, tail = text[: start + len(BEGIN)], text[end:]
    return f"{head}\n{op_table()}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the doc is stale")
    args = parser.parse_args(argv)
    current = DOC.read_text(encoding="utf-8")
    wanted = with_op_table(current)
    if args.check:
        stale = wanted != current
        print(f"{DOC.relative_to(ROOT)} is {'stale' if stale else 'current'}")
        return int(stale)
    if wanted != current:
        write_atomic(DOC, wanted)
    print(f"wrote the op table into {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
