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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rtgraph.compiler.options import options_markdown  # noqa: E402 - after the path set-up
from rtgraph.files import write_atomic  # noqa: E402

DOC = ROOT / "docs" / "options.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the doc is stale")
    args = parser.parse_args(argv)
    wanted = options_markdown()
    current = DOC.read_text(encoding="utf-8") if DOC.exists() else None
    if args.check:
        stale = wanted != current
        print(f"{DOC.relative_to(ROOT)} is {'stale' if stale else 'current'}")
        return int(stale)
    if wanted != current:
        write_atomic(DOC, wanted)
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
