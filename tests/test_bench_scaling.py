"""rtgraph bench --scaling (rtgraph.bench.scaling): the table's structure, measured figures —
a 1-device row is the one-device run (speedup 1.0 exactly), efficiency is speedup / devices —
and its "—" cells with their reasons."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rtgraph.bench.__main__ import main as bench_main
from rtgraph.bench.scaling import PARALLELISMS, ScalingTable, scaling, tensor_parallel_available
from rtgraph.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent
MODELS = [ROOT / "models" / "layer_stack.rtg", ROOT / "models" / "mlp_train.rtg"]
SMALL = {"*": {"B": 64, "D": 32, "F": 64, "H": 64}}


@pytest.fixture(scope="module")
def table() -> ScalingTable:
    return scaling(MODELS, cluster="toy", devices=(1, 2, 4), params=SMALL)


def test_one_row_per_model_parallelism_and_device_count(table):
    keys = [(p.model, p.parallelism, p.devices) for p in table.points]
    assert keys == [
        (m, par, n) for m in ("layer_stack", "mlp_train") for par in PARALLELISMS for n in (1, 2, 4)
    ]
    assert table.cluster == "toy" and table.micro_batches == 8 and table.schedule == "1f1b"
    assert table.params["layer_stack"]["B"] == 64 and table.params["mlp_train"]["H"] == 64


def test_one_device_rows_are_the_one_device_run_with_speedup_one(table):
    for model in ("layer_stack", "mlp_train"):
        ones = [p for p in table.points if p.model == model and p.devices == 1]
        assert len(ones) == len(PARALLELISMS)
        assert {p.makespan_us for p in ones} != {None} and len({p.makespan_us for p in ones}) == 1
        for p in ones:
            assert p.speedup == 1.0 and p.efficiency == 1.0
            assert p.link_bytes == 0


def test_figures_are_measured_and_consistent(table):
    base = {p.model: p.makespan_us for p in table.points if p.devices == 1}
    for p in table.points:
        if p.makespan_us is None:
            assert p.note
            continue
        assert p.makespan_us > 0
        assert p.speedup == base[p.model] / p.makespan_us
        assert p.efficiency == pytest.approx(p.speedup / p.devices)
        assert 0.0 <= p.bubble < 1.0 and 0.0 <= p.link_utilization <= 1.0
        assert p.memory_peak_bytes > 0
        if p.devices > 1:
            # every multi-device point of these models moves bytes, except data parallelism of
            # a forward-only stack (its replicas never talk)
            moves = not (p.model == "layer_stack" and p.parallelism == "data")
            assert (p.link_bytes > 0) == moves, p


def test_markdown_has_a_row_per_point_and_numbered_reasons(table):
    text = table.markdown()
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and "---" not in ln]
    assert rows[0].startswith("| model | parallelism | devices | makespan µs | speedup")
    assert len(rows) == 1 + len(table.points)
    assert all(r.count("|") == 11 for r in rows)
    for p in table.points:
        if p.note:
            assert f") {p.note}" in text
    assert json.loads(json.dumps(table.to_json()))["points"][0]["speedup"] == 1.0


def test_more_devices_than_the_cluster_has_is_a_dash_with_its_reason():
    t = scaling(MODELS[:1], cluster="toy", devices=(1, 16), params=SMALL, micro_batches=16)
    far = [p for p in t.points if p.devices == 16]
    assert far and all(p.makespan_us is None and "toy has 8 devices" in p.note for p in far)
    assert "| — (1) |" in t.markdown() and "(1) toy has 8 devices" in t.markdown()


def test_tensor_column_follows_what_compile_cluster_accepts(table):
    tensor = [p for p in table.points if p.parallelism == "tensor" and p.devices > 1]
    if not tensor_parallel_available():
        assert all("not built yet" in p.note for p in tensor)
        return
    # the layer stack's weights are cut; mlp_train's gradients are outputs the cut cannot
    # reach, so its weights stay whole and the point is a dash, not a replicated run
    assert all(p.makespan_us is not None for p in tensor if p.model == "layer_stack")
    whole = [p for p in tensor if p.model == "mlp_train"]
    assert all(p.makespan_us is None and "no weight is cut" in p.note for p in whole)


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ({"parallelisms": ("expert",)}, "unknown parallelism 'expert'"),
        ({"micro_batches": 2}, "2 micro-batches for up to 4 pipeline stages"),
    ],
)
def test_bad_requests_are_usage_errors(how, message):
    with pytest.raises(UsageError, match=message):
        scaling(MODELS[:1], cluster="toy", devices=(1, 4), params=SMALL, **how)


def test_python_m_rtgraph_bench_scaling_prints_the_table(capsys):
    path = str(MODELS[1])
    code = bench_main(["--scaling", path, "--cluster", "toy", "-D", "B=32", "-D", "D=16"])
    out = capsys.readouterr().out
    assert code == 0 and "| mlp_train | data | 8 |" in out
    assert bench_main(["--scaling", path, "-D", "B=x"]) == 2
