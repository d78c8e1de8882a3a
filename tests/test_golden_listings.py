"""Golden per-stream listings: what the back end emits for real models, read like the spec.

Each fixture in ``tests/golden/`` is the ``rtgraph compile --emit listing`` text of a bundled
model under one stream policy. A change to lowering, planning, hazards, stream assignment or
barrier insertion shows up here as a readable diff. Regenerate deliberately with
``RTGRAPH_REGEN_GOLDEN=1 pytest tests/test_golden_listings.py`` and review the diff.
"""

from __future__ import annotations

import os

import pytest
from conftest import MODELS, ROOT

import rtgraph
from rtgraph.stream_program.listing import format_listing

GOLDEN = ROOT / "tests" / "golden"
CASES = [
    (model, policy)
    for model in ("address_conflict", "mlp", "attention")
    for policy in ("single", "by-unit", "list")
]


@pytest.mark.parametrize(("model", "policy"), CASES)
def test_listing_matches_golden(model, policy):
    program = rtgraph.load(MODELS / f"{model}.rtg", device="ascend-910b")
    compiled = rtgraph.compile(program, device="ascend-910b", streams=policy, check=True)
    text = format_listing(compiled)
    path = GOLDEN / f"{model}.{policy}.listing"
    if os.environ.get("RTGRAPH_REGEN_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"no golden file {path.name}; regenerate with RTGRAPH_REGEN_GOLDEN=1"
    assert text == path.read_text()
