"""Issue 15, item 3: the compiler's memory plan says whether its pool is proven the smallest.

The plan's ``meta.memory.pool_proven`` is true exactly when the pool's height is proven optimal
(at the max-live lower bound, or by the exact search); listings print it; the JSON keeps it and
the loader holds it to a boolean.
"""

from __future__ import annotations

import json

import pytest
from conftest import MODELS

import rtgraph
from rtgraph.errors import StreamProgramError
from rtgraph.stream_program import from_dict, to_dict
from rtgraph.stream_program.listing import compile_report


@pytest.mark.parametrize("memory", ["stream-ordered", "greedy", "none"])
def test_the_plan_says_whether_its_pool_is_proven_optimal(memory):
    program = rtgraph.load(MODELS / "mlp.rtg")
    compiled = rtgraph.compile(program, memory=memory)
    mem = compiled.meta["memory"]
    at_bound = mem["pool_bytes"] <= mem["pool_lower_bound"]
    assert mem["pool_proven"] is at_bound or (mem["pool_proven"] and memory != "none")
    line = next(x for x in compile_report(compiled) if x.startswith("memory ("))
    shown = "(proven optimal)" if mem["pool_proven"] else "(not proven optimal)"
    assert shown in line


def test_no_reuse_is_not_proven_optimal_when_reuse_would_shrink_it():
    compiled = rtgraph.compile(rtgraph.load(MODELS / "mlp.rtg"), memory="none")
    mem = compiled.meta["memory"]
    assert mem["pool_bytes"] > mem["pool_lower_bound"] and mem["pool_proven"] is False


def test_the_json_keeps_it_and_the_loader_holds_it_to_a_boolean():
    compiled = rtgraph.compile(rtgraph.load(MODELS / "mlp.rtg"))
    data = json.loads(json.dumps(to_dict(compiled)))
    assert from_dict(data).meta["memory"]["pool_proven"] is True
    data["meta"]["memory"]["pool_proven"] = "yes"
    with pytest.raises(StreamProgramError, match="pool_proven"):
        from_dict(data)
