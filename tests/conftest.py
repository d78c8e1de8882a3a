"""Shared test settings: hypothesis profiles (fewer examples under CI) and paths."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "dev", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
#: The public instances the tests check against (STG, HEFT, memory-planning cases, MiniMalloc),
#: vendored so a standalone checkout runs them; tests/data/README.md names each source.
DATA = Path(__file__).resolve().parent / "data"


def host_time_per_step(
    result, kinds: tuple[str, ...], sync: str = "sync"
) -> tuple[list[float], list[float]]:
    """A run's host time in activities of ``kinds`` between consecutive host syncs (blocked
    activities labelled ``sync…``), and the time between the syncs' returns: one figure per
    step of a loop that syncs once a step."""
    host = [a for a in result.host_activities if a.lane == "host"]
    ends = [a.end for a in host if a.kind == "blocked" and a.label.startswith(sync)]
    busy, spans = [], []
    for lo, hi in itertools.pairwise(ends):
        busy.append(sum(a.end - a.start for a in host if a.kind in kinds and lo <= a.start < hi))
        spans.append(hi - lo)
    return busy, spans
