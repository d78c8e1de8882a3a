"""Shared test settings: hypothesis profiles (fewer examples under CI) and paths."""

from __future__ import annotations

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
