"""rtgraph.serving: arrivals, policies, step costs, the request loop and its metrics — checked
against queueing closed forms (Little's law on every run; M/D/1 against Pollaczek–Khinchine,
over seeds with a confidence interval) and against invariants any schedule must keep."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import MODELS

import rtgraph
from rtgraph.errors import UsageError
from rtgraph.serving import (
    ServingError,
    StepTable,
    generate_requests,
    parse_duration,
    parse_policy,
)
from rtgraph.serving.arrivals import Lengths, parse_arrivals, read_trace
from rtgraph.serving.metrics import parse_slo
from rtgraph.serving.steps import bucket

#: Reduced sizes: the same programs, emulated in milliseconds.
UNET = {"C": 64, "HW": 4, "T": 32, "groups": 8, "heads": 4}
LLM = {"L": 2, "D": 128, "H": 4, "F": 256, "V": 512}
IMAGE = StepTable.for_model(str(MODELS / "unet_block.rtg"), UNET)
DECODER = StepTable.for_model(str(MODELS / "llm_prefill.rtg"), LLM)


def requests_at(rate, duration, seed, lengths=None):
    return generate_requests("poisson", rate, 1.0, duration, seed, lengths or Lengths())


# --- flags and inputs ----------------------------------------------------------------------------


def test_policies_parse_and_name_themselves():
    assert parse_policy("none").name == "none"
    assert parse_policy("static:8").max_batch == 8
    p = parse_policy("dynamic:max=16,wait=10ms")
    assert (p.kind, p.max_batch, p.wait_s) == ("dynamic", 16, 0.01)
    assert parse_policy(p.name) == p
    assert parse_policy("dynamic:max=4,wait=2ms+merge").merge
    q = parse_policy("dynamic:max=16,wait=1ms,preferred=8|4")
    assert q.preferred == (4, 8) and parse_policy(q.name) == q
    assert parse_policy("continuous").max_batch == 64
    assert parse_policy("continuous:max=8").name == "continuous:max=8"


@pytest.mark.parametrize(
    "text, says",
    [
        ("batchy", "unknown policy"),
        ("static:0", "not a positive integer"),
        ("dynamic:max=4", "both max=B and wait=T"),
        ("dynamic:max=4,wait=soon", "not a duration"),
        ("continuous:wait=1ms", "no wait"),
        ("continuous+merge", "does not merge"),
        ("dynamic:max=4,wait=1ms,preferred=8", "above max=4"),
        ("dynamic:max=4,wait=1ms,preferred=2|x", "not a positive integer"),
    ],
)
def test_bad_policies_are_usage_errors_that_point_at_the_flag(text, says):
    with pytest.raises(UsageError) as e:
        parse_policy(text)
    assert says in e.value.message
    assert "--batching" in e.value.render()


def test_durations_and_arrivals():
    assert parse_duration("200us") == pytest.approx(2e-4)
    assert parse_duration("2min") == 120
    assert parse_arrivals("gamma:10,2") == ("gamma", 10.0, 2.0, "")
    for bad in ("poisson:-1", "poisson", "uniform:3", "gamma:1"):
        with pytest.raises(UsageError):
            parse_arrivals(bad)


def test_slo_terms_parse_and_bad_ones_are_refused():
    assert parse_slo("ttft_p90=2s,tbt_p99=200ms") == {"ttft_p90": 2.0, "tbt_p99": 0.2}
    for bad in ("ttft=2s", "latency_p99=1s", "ttft_p90=0s", "ttft_p100=1s"):
        with pytest.raises(UsageError):
            parse_slo(bad)
    with pytest.raises(UsageError, match="decoder"):
        parse_slo("tbt_p99=1ms", decoder=False)


def test_same_seed_same_requests_and_gamma_burstiness():
    a = requests_at(50, 20, 7)
    b = requests_at(50, 20, 7)
    assert np.array_equal(a.arrival, b.arrival) and np.array_equal(a.output, b.output)
    assert np.all(np.diff(a.arrival) >= 0) and a.arrival[-1] < 20
    gaps = np.diff(generate_requests("gamma", 50, 1.0, 200, 7, Lengths()).arrival)
    bursty = np.diff(generate_requests("gamma", 50, 3.0, 200, 7, Lengths()).arrival)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.1)
    assert bursty.std() / bursty.mean() == pytest.approx(3.0, abs=0.5)


def test_a_prompt_catalogue_repeats_whole_requests():
    r = requests_at(100, 20, 1, Lengths("10-500", "exp:40", prompts=20))
    assert len(np.unique(r.key)) <= 20
    for k in np.unique(r.key):  # one prompt, one length
        assert len(np.unique(r.prompt[r.key == k])) == 1
        assert len(np.unique(r.output[r.key == k])) == 1


def write(tmp_path, text):
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return str(path)


def test_a_trace_reads(tmp_path):
    path = write(tmp_path, "arrival_s,prompt_tokens,output_tokens,prompt_id\n0,5,3,1\n0.5,7,2,1\n")
    r = read_trace(path, decoder=True)
    assert r.arrival.tolist() == [0, 0.5] and r.prompt.tolist() == [5, 7]
    assert r.key.tolist() == [1, 1]


@pytest.mark.parametrize(
    "text, says, line",
    [
        ("arrival_s,prompt_tokens\n0,5\n", "lacks the column output_tokens", 1),
        ("arrival_s,prompt_tokens,output_tokens\n1,5,3\n0.5,5,3\n", "earlier than", 3),
        ("arrival_s,prompt_tokens,output_tokens\n1,-5,3\n", "out of range", 2),
        ("arrival_s,prompt_tokens,output_tokens\n1,5,0\n", "out of range", 2),
        ("arrival_s,prompt_tokens,output_tokens\n1,five,3\n", "not a number", 2),
        ("arrival_s,prompt_tokens,output_tokens\n1,5\n", "has no output_tokens", 2),
        ("arrival_s,prompt_tokens,output_tokens\n", "no requests", 1),
        ("", "empty", 1),
    ],
)
def test_bad_traces_are_located_errors(tmp_path, text, says, line):
    path = write(tmp_path, text)
    with pytest.raises(ServingError) as e:
        read_trace(path, decoder=True)
    assert says in e.value.message
    assert e.value.span.line == line and e.value.span.file == path
    assert not isinstance(e.value, UsageError)  # bad input: exit status 1


def test_the_unsorted_row_is_underlined(tmp_path):
    path = write(tmp_path, "arrival_s,prompt_tokens,output_tokens\n1,5,3\n0.25,5,3\n")
    with pytest.raises(ServingError) as e:
        read_trace(path, decoder=True)
    assert "0.25,5,3\n    ^^^^" in e.value.render()


# --- step costs -----------------------------------------------------------------------------------


def test_buckets_are_powers_of_two():
    assert [bucket(n) for n in (1, 2, 3, 5, 8, 9)] == [1, 2, 4, 8, 8, 16]
    assert bucket(3, 16) == 16


def test_step_costs_come_from_the_emulator_and_are_cached():
    table = StepTable.for_model(str(MODELS / "unet_block.rtg"), UNET)
    first = table.step("denoise", 3)
    program = rtgraph.load(MODELS / "unet_block.rtg", {**UNET, "N": 8})  # 4 requests × 2
    result = rtgraph.run(rtgraph.compile(program), numerics=False)
    assert first == (result.makespan_us, result.memory_peak_bytes)
    assert table.step("denoise", 4) == first and table.emulated == 1


def test_a_decode_step_of_one_is_llm_decode():
    """llm_prefill at B=1, S=1 over T cached tokens is llm_decode's step: the same time."""
    table = StepTable.for_model(str(MODELS / "llm_decode.rtg"), LLM)
    assert table.kind == "decoder" and table.model.endswith("llm_prefill.rtg")
    decode = rtgraph.load(MODELS / "llm_decode.rtg", {**LLM, "T": 64})
    alone = rtgraph.run(rtgraph.compile(decode), numerics=False).makespan_us
    assert table.step("decode", 1, 0, 64)[0] == pytest.approx(alone)


@pytest.mark.parametrize("shape", [{"B": 2, "S": 4, "T": 0}, {"B": 3, "S": 1, "T": 5}])
def test_the_prefill_model_runs_bit_equal_at_both_phases(shape):
    program = rtgraph.load(
        MODELS / "llm_prefill.rtg", {"L": 1, "D": 32, "H": 2, "F": 64, "V": 16, **shape}
    )
    result = rtgraph.run(rtgraph.compile(program), seed=1)
    report = rtgraph.compare(result.outputs, rtgraph.evaluate(program, seed=1))
    assert all(r["equal"] for r in report.values())


def test_a_profile_saves_reloads_and_refuses_another_model(tmp_path):
    path = str(tmp_path / "steps.json")
    IMAGE.step("denoise", 2)
    IMAGE.save(path)
    again = StepTable.for_model(str(MODELS / "unet_block.rtg"), UNET)
    again.load(path)
    assert again.step("denoise", 2) == IMAGE.step("denoise", 2) and again.emulated == 0
    other = StepTable.for_model(str(MODELS / "unet_block.rtg"), {**UNET, "C": 32})
    with pytest.raises(ServingError, match="profiled for"):
        other.load(path)
    (tmp_path / "junk.json").write_text("{")
    with pytest.raises(ServingError, match="not a step profile"):
        other.load(str(tmp_path / "junk.json"))


def test_a_model_without_a_workload_is_refused():
    with pytest.raises(ServingError, match="no workload"):
        StepTable.for_model(str(MODELS / "mlp.rtg"))
