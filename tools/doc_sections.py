"""What the doc generators share: a generated block between two marker comments, and the
write-or-``--check`` step every generator ends with.

The generators (``make_op_table.py``, ``make_options_doc.py``, ``make_architecture_diagram.py``)
run from the repository root; their tests load them from ``tools/``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rtgraph.files import write_atomic  # noqa: E402 - after the path set-up


def replace_between(text: str, begin: str, end: str, body: str) -> str:
    """``text`` with whatever stands between the markers ``begin`` and ``end`` replaced by
    ``body`` (the markers stay)."""
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"expected the markers {begin} and {end}, in that order")
    return f"{text[: start + len(begin)]}{body}{text[stop:]}"


def write_or_check(path: Path, wanted: str | bytes, *, check: bool) -> int:
    """With ``check``, say whether ``path`` holds ``wanted`` and return 1 when it does not;
    otherwise write ``wanted`` there (whole or not at all) if it differs, and return 0."""
    current = path.read_bytes() if path.exists() else None
    wanted_bytes = wanted.encode("utf-8") if isinstance(wanted, str) else wanted
    name = path.relative_to(ROOT)
    if check:
        stale = current != wanted_bytes
        print(f"{name} is {'stale' if stale else 'current'}")
        return int(stale)
    if current != wanted_bytes:
        write_atomic(path, wanted_bytes)
    print(f"wrote {name}")
    return 0
