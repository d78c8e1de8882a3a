"""Chunked prefill (continuous batching with a token budget) and the KV cache's blocks through
the run-time allocator: the invariants every schedule keeps, for all inputs hypothesis draws."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_serving import DECODER, requests_at
from test_serving_sim import check_invariants

from rtgraph.errors import UsageError
from rtgraph.serving import ServingError, Workload, parse_policy, simulate, summarize
from rtgraph.serving.arrivals import Lengths
from rtgraph.serving.steps import MIN_TOKENS

ROOMY = Workload(kv_blocks=4096)  # never full: no preemption


def test_budget_parses_names_itself_and_is_refused_where_it_cannot_work():
    p = parse_policy("continuous:max=8,budget=64")
    assert (p.kind, p.max_batch, p.budget) == ("continuous", 8, 64)
    assert p.name == "continuous:max=8,budget=64" and parse_policy(p.name) == p
    assert parse_policy("continuous:max=8").budget == 0
    with pytest.raises(UsageError, match="must be above max=8"):
        parse_policy("continuous:max=8,budget=8")
    with pytest.raises(UsageError, match="continuous batching's"):
        parse_policy("dynamic:max=4,wait=1ms,budget=64")
    with pytest.raises(UsageError, match="not a positive integer"):
        parse_policy("continuous:max=4,budget=lots")


def test_a_mixed_step_costs_between_its_larger_part_and_the_sum_of_both():
    for decoders, ctx, chunk, seen in [(1, 16, 16, 0), (8, 300, 100, 200), (32, 1000, 400, 900)]:
        decode = DECODER.latency_s("decode", decoders, 0, ctx)
        piece = DECODER.latency_s("chunk", 1, chunk, seen)
        mixed = DECODER.mixed_s(decoders, ctx, chunk, seen)
        assert max(decode, piece) <= mixed <= decode + piece
    assert DECODER.mixed_s(0, 0, 64, 0) == DECODER.latency_s("chunk", 1, 64, 0)
    # the floor subtracted is the smallest step: a chunk over no cache at its least size
    assert DECODER.mixed_s(4, 64, MIN_TOKENS, 0) == DECODER.latency_s("decode", 4, 0, 64)


def _tbt_bound(req, policy) -> float:
    """The longest an iteration at the budget can take: every slot decoding at the longest
    context, plus a chunk of the whole budget over the longest context."""
    longest = int((req.prompt + req.output).max())
    return DECODER.mixed_s(policy.max_batch, longest, policy.budget, longest)


@settings(deadline=None, max_examples=40)
@given(
    rate=st.floats(20, 2000),
    seed=st.integers(0, 2**32),
    size=st.sampled_from([1, 4, 16]),
    extra=st.sampled_from([1, 15, 48, 240]),
)
def test_chunked_prefill_keeps_its_invariants(rate, seed, size, extra):
    """Every prompt token is prefilled exactly once; an iteration never carries more tokens
    than the budget; every later token of every request comes one iteration after the one
    before, so no gap exceeds the cost of an iteration at the budget."""
    req = requests_at(rate, 0.2, seed, Lengths("1-300", "exp:16"))
    if len(req) == 0:
        return
    policy = parse_policy(f"continuous:max={size},budget={size + extra}")
    out = simulate(req, policy, DECODER, ROOMY)
    check_invariants(out, req, policy.max_batch)
    assert out.preemptions == 0
    assert np.array_equal(out.prefilled, req.prompt)
    assert 0 < max(out.iteration_tokens) <= policy.budget
    assert sum(c for _, c in out.tbt) == int(np.sum(req.output - 1))
    assert max((g for g, _ in out.tbt), default=0.0) <= _tbt_bound(req, policy) * (1 + 1e-9)
    assert out.cache.memory()["allocated_bytes"] == 0


def test_chunking_bounds_the_stall_a_long_prompt_puts_on_running_sequences():
    """Whole prefills of 2,000-token prompts stall every running sequence for a whole
    prompt's step; with a budget of 64 tokens no gap is longer than one iteration at it."""
    req = requests_at(400, 0.3, 5, Lengths("100-2000", "exp:32"))
    whole = simulate(req, parse_policy("continuous:max=8"), DECODER, ROOMY)
    chunked = simulate(req, parse_policy("continuous:max=8,budget=64"), DECODER, ROOMY)
    longest_whole = max(g for g, _ in whole.tbt)
    longest_chunked = max(g for g, _ in chunked.tbt)
    assert longest_chunked <= _tbt_bound(req, chunked.policy) * (1 + 1e-9) < longest_whole


@settings(deadline=None, max_examples=30)
@given(
    rate=st.floats(20, 1000),
    seed=st.integers(0, 2**32),
    policy=st.sampled_from(
        ["static:4", "dynamic:max=4,wait=5ms", "continuous:max=8", "continuous:max=8,budget=40"]
    ),
    blocks=st.sampled_from([40, 64, None]),
    preempt=st.sampled_from(["recompute", "swap"]),
)
def test_kv_blocks_go_through_the_allocator_and_all_come_back(rate, seed, policy, blocks, preempt):
    """Each block is an allocation of the caching pool: the allocator's peak is at least the
    occupancy trace's (sampled after each step's departures) and never more than the pool's
    blocks, and every block is freed by the end (0 bytes allocated), preempted or not."""
    req = requests_at(rate, 0.3, seed, Lengths("8-200", "exp:20"))
    if len(req) == 0:
        return
    p = parse_policy(policy)
    out = simulate(req, p, DECODER, Workload(kv_blocks=blocks, preempt=preempt))
    check_invariants(out, req, p.max_batch)
    found = out.cache.memory()
    peak = max(u for _, u in out.kv)
    allocation = out.cache.pool.policy.round(found["block_bytes"])
    assert found["allocated_bytes"] == 0 and out.kv[-1][1] == 0
    assert peak * allocation <= found["peak_allocated_bytes"] <= out.kv_total * allocation
    assert found["peak_allocated_bytes"] <= found["peak_reserved_bytes"]
    if out.prefilled is not None:
        assert np.all(out.prefilled >= req.prompt)  # recompute prefills a prompt again


def test_the_pool_holds_whole_segments_and_reserves_more_than_its_blocks_use():
    """The pool's segments hold a whole number of blocks; the tail of each is reserved but
    holds none: the allocator's reserved bytes show it."""
    req = requests_at(300, 0.3, 1, Lengths("100-200", "exp:40"))
    out = simulate(req, parse_policy("continuous:max=16"), DECODER, Workload(kv_blocks=100))
    found = out.cache.memory()
    assert out.kv_total == 100
    assert found["peak_reserved_bytes"] > found["peak_allocated_bytes"] > 0
    assert summarize(out)["kv"]["allocator"] == found


def test_a_pool_larger_than_the_device_is_an_error():
    req = requests_at(10, 0.2, 0, Lengths("10", "10"))
    with pytest.raises(ServingError, match="more than the device's") as e:
        simulate(req, parse_policy("continuous"), DECODER, Workload(kv_blocks=10**12))
    assert "--kv-blocks" in e.value.hint


def test_the_same_seed_gives_the_same_json_with_chunked_prefill():
    def run():
        req = requests_at(500, 0.3, 7, Lengths("10-400", "exp:20"))
        out = simulate(req, parse_policy("continuous:max=8,budget=48"), DECODER, ROOMY)
        return json.dumps(summarize(out, {"tbt_p99": 0.01}), sort_keys=True)

    assert run() == run()
