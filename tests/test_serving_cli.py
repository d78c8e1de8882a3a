"""``rtgraph serve``: exit statuses, reproducible JSON, the profile file, the pictures."""

from __future__ import annotations

import json

import pytest
from conftest import MODELS
from PIL import Image

from rtgraph.cli import main

UNET = ["-D", "C=64", "-D", "HW=4", "-D", "T=32", "-D", "groups=8", "-D", "heads=4"]
LLM = ["-D", "L=2", "-D", "D=128", "-D", "H=4", "-D", "F=256", "-D", "V=512"]
IMAGE = [str(MODELS / "unet_block.rtg"), *UNET, "--denoise-steps", "5"]
DECODER = [str(MODELS / "llm_prefill.rtg"), *LLM, "--output-len", "exp:16", "--prompt-len", "8-64"]


def serve(capsys, *args):
    status = main(["serve", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_the_same_seed_gives_byte_identical_json(capsys):
    args = [*IMAGE, "--arrivals", "poisson:2000", "--duration", "0.5s", "--seed", "4", "--json"]
    args += ["--batching", "none", "--batching", "dynamic:max=8,wait=1ms+merge", "--prompts", "30"]
    first = serve(capsys, *args)
    second = serve(capsys, *args)
    assert first[0] == 0 and first[1] == second[1]
    doc = json.loads(first[1])
    assert [r["policy"] for r in doc["runs"]] == ["none", "dynamic:max=8,wait=1ms+merge"]
    other = serve(capsys, *args[:-7], "--seed", "5", *args[-6:])
    assert other[1] != first[1]


def test_the_table_names_every_policy_and_little(capsys):
    status, out, _ = serve(
        capsys, *DECODER, "--arrivals", "gamma:300,2", "--duration", "0.5s",
        "--batching", "static:4", "--batching", "continuous:max=8",
        "--slo", "ttft_p90=1s,tbt_p99=1s", "--kv-blocks", "40", "--preempt", "swap",
    )  # fmt: skip
    assert status == 0
    assert "static:4" in out and "continuous:max=8" in out and "Little" in out
    assert "goodput" in out and "KV cache 40 blocks" in out and "preemptions" in out


def test_a_profile_is_written_and_reused(capsys, tmp_path):
    profile = tmp_path / "steps.json"
    args = [*IMAGE, "--arrivals", "poisson:500", "--duration", "0.2s", "--profile", str(profile)]
    assert serve(capsys, *args)[0] == 0
    saved = json.loads(profile.read_text())
    assert saved["model"] == "unet_block.rtg" and saved["steps"]
    assert serve(capsys, *args)[0] == 0 and json.loads(profile.read_text()) == saved


def test_pictures_and_the_summary_land_in_out(capsys, tmp_path):
    status, _, _ = serve(
        capsys, *IMAGE, "--arrivals", "poisson:1000", "--duration", "0.2s",
        "--batching", "none", "--batching", "static:4", "--out", str(tmp_path / "o"),
    )  # fmt: skip
    assert status == 0
    for name in ("latency_cdf.png", "batch_queue.png", "throughput_latency.png"):
        with Image.open(tmp_path / "o" / name) as picture:
            assert picture.size[0] > 300
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["runs"]


def test_capacity_per_policy(capsys):
    status, out, _ = serve(
        capsys, *IMAGE, "--arrivals", "poisson:100", "--duration", "0.3s", "--capacity",
        "--slo", "e2e_p90=20ms", "--seeds", "3", "--batching", "none", "--json",
    )  # fmt: skip
    assert status == 0
    (found,) = json.loads(out)["capacity"]
    assert found["rate_rps"] > 0 and "95 %" in found["confidence"]


@pytest.mark.parametrize(
    "args, says",
    [
        (["--arrivals", "poisson:x"], "not a positive number"),
        (["--arrivals", "poisson:10", "--batching", "dynamic:max=4"], "dynamic needs both"),
        (["--arrivals", "poisson:10", "--duration", "forever"], "not a duration"),
        (["--arrivals", "poisson:10", "--capacity"], "--capacity needs --slo"),
        (["--arrivals", "poisson:10", "--slo", "speed_p50=1s"], "not METRIC_pNN=TIME"),
        (["--arrivals", "poisson:10", "--seeds", "0"], "at least 1"),
    ],
)
def test_usage_errors_exit_2(capsys, args, says):
    status, _, err = serve(capsys, *IMAGE, *args)
    assert status == 2 and says in err and "Traceback" not in err


def test_argparse_refusals_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["serve", *IMAGE, "--arrivals", "poisson:10", "--preempt", "drop"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_bad_input_exits_1_with_a_located_error(capsys, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.5,10,4\n0.25,10,4\n")
    status, _, err = serve(capsys, *DECODER, "--arrivals", f"trace:{trace}")
    assert status == 1 and f"{trace}:3:1: error: arrival_s 0.25 is earlier" in err
    status, _, err = serve(capsys, *DECODER, "--arrivals", "poisson:10", "--kv-blocks", "2")
    assert status == 1 and "smaller than one request" in err
    status, _, err = serve(
        capsys, *IMAGE, "--arrivals", "poisson:10", "--capacity", "--slo", "e2e_p99=1us"
    )
    assert status == 1 and "cannot be met" in err
    status, _, err = serve(capsys, str(MODELS / "mlp.rtg"), "--arrivals", "poisson:10")
    assert status == 1 and "no workload" in err


def test_a_trace_drives_the_run(capsys, tmp_path):
    trace = tmp_path / "t.csv"
    rows = "".join(f"{i * 0.001},{16 + i},{1 + i % 5},{i % 3}\n" for i in range(40))
    trace.write_text("arrival_s,prompt_tokens,output_tokens,prompt_id\n" + rows)
    status, out, _ = serve(
        capsys, *DECODER, "--arrivals", f"trace:{trace}", "--batching", "continuous", "--json"
    )
    assert status == 0 and json.loads(out)["runs"][0]["requests"] == 40
