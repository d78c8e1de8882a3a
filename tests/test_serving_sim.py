"""The request loop against closed forms and invariants (see tests/test_serving.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_serving import DECODER, IMAGE, requests_at

from rtgraph.serving import ServingError, Workload, parse_policy, simulate, summarize
from rtgraph.serving.arrivals import Lengths, Requests
from rtgraph.serving.capacity import search_capacity, t95, upper_bound
from rtgraph.serving.metrics import little, weighted_percentile

STEPS = 5  # denoising steps per image request in these tests


def service_s(batch=1):
    return STEPS * IMAGE.latency_s("denoise", batch)


# --- closed forms ---------------------------------------------------------------------------------


def test_md1_mean_wait_matches_pollaczek_khinchine_within_a_confidence_interval():
    """One server, Poisson arrivals, a deterministic service D: Wq = ρD / (2(1 − ρ)). Twenty
    seeded runs (the first tenth of each dropped as warm-up); the formula must lie inside the
    99 % confidence interval of their mean."""
    d = service_s()
    rho = 0.7
    rate = rho / d
    means = []
    for seed in range(20):
        r = requests_at(rate, 4000 * d / rho, seed)
        out = simulate(r, parse_policy("none"), IMAGE, Workload(denoise_steps=STEPS))
        wait = (out.start - r.arrival)[len(r) // 10 :]
        means.append(wait.mean())
        assert np.allclose(out.finish - out.start, d)  # the service is deterministic
    means = np.array(means)
    half = 2.861 * means.std(ddof=1) / np.sqrt(len(means))  # t(0.995, 19)
    expected = rho * d / (2 * (1 - rho))
    assert abs(means.mean() - expected) <= half, (means.mean(), expected, half)


def test_md1_formula_is_not_met_by_a_wrong_service_time():
    """The check above can fail: the same runs against D × 1.2 lie outside the interval."""
    d = service_s()
    rate = 0.7 / d
    means = [
        (lambda r, o: (o.start - r.arrival)[len(r) // 10 :].mean())(
            r := requests_at(rate, 4000 * d / 0.7, seed),
            simulate(r, parse_policy("none"), IMAGE, Workload(denoise_steps=STEPS)),
        )
        for seed in range(10)
    ]
    wrong = 0.7 * 1.2 * d / (2 * (1 - 0.7 * 1.2))
    assert np.mean(means) + 3 * np.std(means) / np.sqrt(10) < wrong


def test_littles_law_integrates_what_the_formula_predicts():
    arrival = np.array([0.0, 1.0, 1.5, 4.0])
    leave = np.array([2.0, 3.0, 2.5, 5.0])
    found = little(arrival, leave)
    assert found["L"] == pytest.approx((2 + 2 + 1 + 1) / 5)
    assert found["relative_error"] == pytest.approx(0, abs=1e-12)


def test_weighted_percentiles():
    assert weighted_percentile(np.array([1.0, 2.0]), np.array([99.0, 1.0]), 50) == 1.0
    assert weighted_percentile(np.array([1.0, 2.0]), np.array([1.0, 99.0]), 50) == 2.0


def test_the_t_bound():
    assert t95(4) == pytest.approx(2.132)
    assert upper_bound(np.array([1.0, 1.0, 1.0])) == 1.0
    assert upper_bound(np.array([1.0, 2.0, 3.0])) == pytest.approx(2 + 2.920 / np.sqrt(3))


# --- invariants of every schedule -----------------------------------------------------------------

POLICIES = (
    "none",
    "static:4",
    "dynamic:max=8,wait=2ms",
    "dynamic:max=8,wait=2ms,preferred=2|4",
    "dynamic:max=8,wait=2ms+merge",
)


def check_invariants(out, req, max_batch):
    s = summarize(out)
    assert np.all(out.start >= req.arrival - 1e-12)
    assert np.all(out.first >= out.start) and np.all(out.finish >= out.first)
    starts, ends = np.array(out.steps["start"]), np.array(out.steps["end"])
    assert np.all(ends > starts) and np.all(starts[1:] >= ends[:-1] - 1e-12)  # one at a time
    assert max(out.steps["slots"]) <= max_batch
    assert s["little"]["relative_error"] < 1e-9
    assert 0 < s["utilization"] <= 1 + 1e-9
    return s


@settings(deadline=None)
@given(
    rate=st.floats(50, 3000),
    seed=st.integers(0, 2**32),
    policy=st.sampled_from(POLICIES),
    prompts=st.sampled_from([0, 3, 50]),
)
def test_image_schedules_keep_their_invariants(rate, seed, policy, prompts):
    req = requests_at(rate, 0.2, seed, Lengths(prompts=prompts))
    if len(req) == 0:
        return
    p = parse_policy(policy)
    out = simulate(req, p, IMAGE, Workload(denoise_steps=STEPS))
    s = check_invariants(out, req, p.max_batch)
    assert sum(out.steps["served"]) == len(req)
    if not p.merge:
        assert s["mean_served_per_step"] == s["mean_batch"]


@settings(deadline=None)
@given(
    rate=st.floats(5, 400),
    seed=st.integers(0, 2**32),
    policy=st.sampled_from(("none", "static:4", "dynamic:max=4,wait=5ms", "continuous:max=8")),
    blocks=st.sampled_from([None, 40, 64]),
    preempt=st.sampled_from(["recompute", "swap"]),
)
def test_decoder_schedules_keep_their_invariants(rate, seed, policy, blocks, preempt):
    req = requests_at(rate, 0.3, seed, Lengths("8-200", "exp:20"))
    if len(req) == 0:
        return
    p = parse_policy(policy)
    out = simulate(req, p, DECODER, Workload(kv_block=16, kv_blocks=blocks, preempt=preempt))
    s = check_invariants(out, req, p.max_batch)
    used = [u for _, u in out.kv]
    assert max(used) <= out.kv_total and used[-1] == 0  # never over, all given back
    assert sum(c for _, c in out.tbt) == int(np.sum(req.output - 1))  # one gap a later token
    assert s["tokens_per_s"] > 0


def test_preferred_sizes_leave_at_once_and_only_at_those_sizes_while_they_can():
    """Triton: a batch of a preferred size goes as soon as it can be formed; other sizes only
    when the oldest request's wait runs out."""
    req = requests_at(20 / service_s(), 300 * service_s(), 2)
    p = parse_policy(f"dynamic:max=16,wait={100 * service_s():.6f}s,preferred=4|8")
    out = simulate(req, p, IMAGE, Workload(denoise_steps=STEPS))
    sizes = np.array(out.steps["slots"])
    assert set(sizes[:-1].tolist()) <= {4, 8}  # the last batch leaves when the wait runs out
    plain = simulate(req, parse_policy("dynamic:max=16,wait=1s"), IMAGE, Workload(STEPS))
    assert max(plain.steps["slots"]) == 16


def test_host_preparation_overlaps_the_device_until_it_is_the_bottleneck():
    d = service_s()
    req = requests_at(3 / d, 500 * d, 1)  # overloaded: the device runs back to back
    policy = parse_policy("none")

    def run(prep):
        return simulate(req, policy, IMAGE, Workload(denoise_steps=STEPS, host_prep_s=prep))

    alone, hidden, bound = run(0.0), run(0.5 * d), run(2 * d)
    assert np.all(hidden.start >= req.arrival + 0.5 * d - 1e-12)
    rate = lambda o: len(req) / o.finish.max()  # noqa: E731
    assert rate(hidden) == pytest.approx(rate(alone), rel=0.01)  # hidden behind the device
    assert rate(bound) == pytest.approx(1 / (2 * d), rel=0.01)  # the host is the bottleneck


def test_a_full_kv_cache_preempts_by_recompute_and_still_finishes():
    req = requests_at(200, 0.5, 3, Lengths("100-200", "60-120"))
    out = simulate(req, parse_policy("continuous:max=16"), DECODER, Workload(kv_blocks=48))
    assert out.preemptions > 0 and not np.isnan(out.finish).any()
    roomy = simulate(req, parse_policy("continuous:max=16"), DECODER, Workload(kv_blocks=4096))
    assert roomy.preemptions == 0


def test_swap_preemption_copies_blocks_instead_of_prefilling_again():
    req = requests_at(200, 0.5, 3, Lengths("100-200", "60-120"))
    policy = parse_policy("continuous:max=16")
    swap = simulate(req, policy, DECODER, Workload(kv_blocks=48, preempt="swap"))
    redo = simulate(req, policy, DECODER, Workload(kv_blocks=48))
    phases = swap.steps["phase"]
    assert swap.preemptions > 0 and phases.count("swap-out") == swap.preemptions
    assert 0 < phases.count("swap-in") <= swap.preemptions
    assert "swap-out" not in redo.steps["phase"]
    assert phases.count("prefill") < redo.steps["phase"].count("prefill")  # no re-prefill
    assert not np.isnan(swap.finish).any()
    assert sum(c for _, c in swap.tbt) == int(np.sum(req.output - 1))


def test_a_kv_cache_smaller_than_one_request_is_an_error():
    req = requests_at(10, 1, 0, Lengths("100", "100"))
    with pytest.raises(ServingError, match="smaller than one request") as e:
        simulate(req, parse_policy("continuous"), DECODER, Workload(kv_blocks=12))
    assert "--kv-blocks" in e.value.hint


def test_continuous_batching_is_for_decoders():
    with pytest.raises(ServingError, match="decoders"):
        simulate(requests_at(10, 1, 0), parse_policy("continuous"), IMAGE, Workload())


# --- what batching buys --------------------------------------------------------------------------


def test_dynamic_batching_with_merging_beats_one_at_a_time_beyond_saturation():
    """At 1.5× what one-at-a-time serving can take, it falls behind for good, while dynamic
    batching (with merging of repeated prompts) keeps up with a far lower P99."""
    rate = 1.5 / service_s()
    req = requests_at(rate, 2000 * service_s(), 5, Lengths(prompts=100))
    none = summarize(simulate(req, parse_policy("none"), IMAGE, Workload(denoise_steps=STEPS)))
    dyn = parse_policy(f"dynamic:max=16,wait={service_s() * 1e3:.3f}ms+merge")
    batched = summarize(simulate(req, dyn, IMAGE, Workload(denoise_steps=STEPS)))
    assert batched["throughput_rps"] > 1.4 * none["throughput_rps"]
    assert batched["latency_ms"]["e2e"]["p99"] < none["latency_ms"]["e2e"]["p99"] / 3


def test_continuous_beats_static_on_tokens_per_second_for_the_decoder():
    """Beyond what static batches can take, continuous batching makes more tokens a second;
    under one SLO on P99 TBT (and TTFT) it sustains a higher rate than batch-level policies."""
    req = requests_at(1000, 1, 2, Lengths("16-128", "exp:32"))
    static = summarize(simulate(req, parse_policy("static:8"), DECODER, Workload()))
    cont = summarize(simulate(req, parse_policy("continuous:max=8"), DECODER, Workload()))
    assert cont["tokens_per_s"] > 1.5 * static["tokens_per_s"]
    slo = {"ttft_p90": 0.05, "tbt_p99": 0.0005}
    make = lambda rate, seed: requests_at(rate, 1, seed, Lengths("16-128", "exp:32"))  # noqa: E731
    rates = {
        policy: search_capacity(make, parse_policy(policy), DECODER, Workload(), slo, 4).rate_rps
        for policy in ("static:8", "dynamic:max=8,wait=10ms", "continuous:max=8")
    }
    assert rates["continuous:max=8"] > rates["dynamic:max=8,wait=10ms"] > rates["static:8"]


# --- capacity ------------------------------------------------------------------------------------


def test_capacity_search_brackets_the_largest_rate_meeting_the_slo():
    slo = {"e2e_p90": 5 * service_s()}
    make = lambda rate, seed: requests_at(rate, 300 * service_s(), seed)  # noqa: E731
    found = search_capacity(
        make, parse_policy("none"), IMAGE, Workload(denoise_steps=STEPS), slo, 3
    )
    low, high = found.bracket
    assert 0 < low <= high <= 1.05 / service_s() * 1.3
    assert (high - low) <= 0.05 * high and "95 %" in found.confidence
    assert all(v <= slo["e2e_p90"] * 1e3 * 1.5 for v in found.values_ms["e2e_p90"])


def test_an_impossible_slo_is_an_error():
    make = lambda rate, seed: requests_at(rate, 200 * service_s(), seed)  # noqa: E731
    with pytest.raises(ServingError, match="cannot be met"):
        search_capacity(
            make, parse_policy("none"), IMAGE, Workload(denoise_steps=STEPS), {"e2e_p50": 1e-9}
        )


def test_an_empty_run_is_refused_nowhere():
    empty = Requests(*(np.zeros(0, dtype=t) for t in (float, int, int, int)))
    out = simulate(empty, parse_policy("none"), IMAGE, Workload())
    assert summarize(out)["requests"] == 0
