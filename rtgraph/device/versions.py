"""CANN-style version numbers (``8.0.0``, ``8.0.RC3``, ``7.5.0.1.129``): parsing and series.

The schema checks that firmware and runtime fields are versions; the compatibility matrix
(:mod:`.compat`) compares them.
"""

from __future__ import annotations

import re

_VERSION_PART = re.compile(r"(\d+)|RC(\d+)", re.IGNORECASE)


def parse_version(text: str) -> tuple[tuple[int, int], ...]:
    """A sortable key for a CANN-style version: ``8.0.RC3`` < ``8.0.0`` < ``8.0.1``.

    Parts are dot-separated numbers or ``RC<n>`` (a release candidate sorts before the
    release at the same position). A version that is a prefix of another sorts first.
    """
    key = []
    for part in text.split("."):
        m = _VERSION_PART.fullmatch(part)
        if m is None:
            raise ValueError(f"not a version like '8.0.0' or '8.0.RC3': {text!r}")
        key.append((1, int(m.group(1))) if m.group(1) is not None else (0, int(m.group(2))))
    return tuple(key)


def in_series(series: str, version: str) -> bool:
    """Whether ``version`` belongs to ``series`` (``8.0`` holds ``8.0.0`` and ``8.0.RC3``)."""
    want, have = parse_version(series), parse_version(version)
    return have[: len(want)] == want
