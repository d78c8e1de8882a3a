"""The profiler's CSVs are msprof's: every column that msprof also writes has msprof's exact
name and msprof's order, checked against msprof's own headers (tests/data/msprof/README.md
names where they come from); the columns msprof has and rtgraph leaves out are exactly the ones
docs/profiling.md says the emulator cannot give; the AI Core figures follow the device clock."""

from __future__ import annotations

import csv

import pytest
from conftest import DATA
from emulator_programs import ProgramBuilder, toy

from rtgraph.device import load_device
from rtgraph.reports.profiler import (
    EXTRA_COLUMNS,
    PIPE_COLUMNS,
    STATISTIC_COLUMNS,
    clock_hz,
    profile,
    write_csvs,
)

MSPROF = DATA / "msprof"
#: msprof fields that its default header omits (model runs only, per its docs) and rtgraph
#: writes, since every rtgraph program is a model.
MODEL_ONLY = {"Model Name", "Infer ID"}
#: msprof's PipeUtilization columns rtgraph leaves out: the emulator models no scalar unit, no
#: L1-to-L0 movement and no instruction cache (docs/profiling.md says so).
LEFT_OUT = {
    "aic_scalar_time(us)",
    "aic_scalar_ratio",
    "aic_mte1_time(us)",
    "aic_mte1_ratio",
    "aic_icache_miss_rate",
    "aiv_scalar_time(us)",
    "aiv_scalar_ratio",
    "aiv_icache_miss_rate",
}


def msprof_header(name: str) -> list[str]:
    with open(MSPROF / name, newline="", encoding="utf-8") as f:
        return next(csv.reader(f))


def written_header(path) -> list[str]:
    with open(path, newline="", encoding="utf-8") as f:
        return next(csv.reader(f))


def small_program():
    b = ProgramBuilder(2)
    x = b.tensor("x", (8, 8))
    b.h2d(1, "xin", x)
    b.kernel(1, 4, unit="cube", name="mm")
    b.record(1, 0)
    b.wait(0, 0)
    b.work(0, "vector", flops=1000, bytes_moved=500, name="act")
    b.sync()
    return b.build()


def squash(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


@pytest.mark.parametrize("mode", ["task_trace", "op_trace"])
def test_op_summary_uses_msprofs_names_in_msprofs_order(tmp_path, mode):
    theirs = msprof_header("op_summary_header.csv")
    report = profile(small_program(), toy(), mode=mode, iterations=1)
    write_csvs(report, tmp_path)
    ours = written_header(tmp_path / "op_summary.csv")
    assert tuple(ours) == report.summary_columns
    shared = [c for c in ours if c in theirs]
    # every shared column in msprof's order, and nothing between them out of place
    assert shared == [c for c in theirs if c in shared]
    # each of ours is msprof's name exactly, a documented model-run field, or rtgraph's own
    # (which come last); none is a near miss of a msprof name ("Op Type", "Task Duration")
    assert set(ours) - set(theirs) == MODEL_ONLY | set(EXTRA_COLUMNS)
    assert ours[-len(EXTRA_COLUMNS) :] == list(EXTRA_COLUMNS)
    near = {squash(c): c for c in theirs}
    for column in set(ours) - set(theirs):
        assert squash(column) not in near, (
            f"{column!r} looks like msprof's {near[squash(column)]!r}"
        )
    missing = set(theirs) - set(ours)
    if mode == "op_trace":
        assert missing == LEFT_OUT
    else:  # task_trace is msprof's --task-time=l0: no PMU columns at all
        assert missing == LEFT_OUT | set(PIPE_COLUMNS)


def test_op_summary_model_only_fields_sit_where_msprofs_docs_list_them():
    # the docs' field table: Device_id, Model Name, Model ID, Task ID, Stream ID, Infer ID, Op Name
    report = profile(small_program(), toy(), iterations=1)
    cols = list(report.summary_columns)
    assert cols[:7] == [
        "Device_id",
        "Model Name",
        "Model ID",
        "Task ID",
        "Stream ID",
        "Infer ID",
        "Op Name",
    ]


def test_op_statistic_is_msprofs_header_with_the_model_name(tmp_path):
    theirs = msprof_header("op_statistic_header.csv")
    report = profile(small_program(), toy(), iterations=2)
    write_csvs(report, tmp_path)
    ours = written_header(tmp_path / "op_statistic.csv")
    assert tuple(ours) == STATISTIC_COLUMNS
    assert [c for c in ours if c != "Model Name"] == theirs
    assert ours.index("Model Name") == 1  # after Device_id, as the docs' table lists it
    with open(tmp_path / "op_statistic.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        lo, avg, hi = (float(row[c]) for c in ("Min Time(us)", "Avg Time(us)", "Max Time(us)"))
        assert lo <= avg <= hi
        assert row["Model Name"] == report.program


def test_clock_comes_from_the_specs_peaks():
    assert clock_hz(load_device("ascend-910b")) == pytest.approx(1.8e9, rel=1e-3)
    assert clock_hz(load_device("ascend-310p")) == pytest.approx(1.068e9, rel=1e-3)
    assert clock_hz(toy()) == pytest.approx(1e9 / 8192)


def test_910b_matmul_pipes_cycles_and_ratios():
    import rtgraph

    device = rtgraph.device("ascend-910b")
    program = rtgraph.parse(
        "program mm() {\n input a : f16[512, 1024]\n input b : f16[1024, 512]\n"
        " output c = a @ b\n}\n"
    )
    compiled = rtgraph.compile(program, device=device, opt_level=0)
    report = profile(compiled, device, mode="op_trace", iterations=1)
    row = next(r for r in report.op_summary if r["OP Type"] == "matmul")
    task = next(t for t in compiled.tasks if t.op == "matmul")
    stretch = 1 + device.profiling.op_trace_overhead
    launch = device.units["cube"].launch_us * stretch
    busy = row["Task Duration(us)"] - launch
    assert row["Task Type"] == "AI_CORE"
    assert row["aicore_time(us)"] == pytest.approx(busy)
    assert row["aic_total_cycles"] == round(busy * 1e-6 * clock_hz(device) * task.block_dim)
    load = task.bytes_read * stretch * 1e6 / device.memory.bandwidth
    store = task.bytes_written * stretch * 1e6 / device.memory.bandwidth
    assert row["aic_mte2_time(us)"] == pytest.approx(load)
    assert row["aic_mte2_ratio"] == pytest.approx(load / busy)
    assert row["aic_fixpipe_ratio"] == pytest.approx(store / busy)
    for pipe in ("mac", "mte2", "fixpipe"):
        assert 0.0 <= row[f"aic_{pipe}_ratio"] <= 1.0
    # the roofline: the binding pipe fills the core's time
    assert max(row["aic_mac_ratio"], row["aic_mte2_ratio"] + row["aic_fixpipe_ratio"]) == (
        pytest.approx(1.0)
    )
    cube = device.units["cube"]
    assert row["cube_utilization(%)"] == pytest.approx(
        100 * busy * task.block_dim / (cube.cores * row["Task Duration(us)"])
    )
    assert row["Input Formats"] == "ND;ND" and row["Output Formats"] == "ND"
    assert (row["OP State"], row["Mix Block Dim"], row["HF32 Eligible"]) == ("static", 0, "NO")
