"""The msprof-style profiler: which steps a schedule records, op_summary rows that match the
emulator's own task records, op_statistic arithmetic, the stated overhead, and the CSV files."""

from __future__ import annotations

import csv
import os

import pytest
from emulator_programs import ProgramBuilder, toy
from hypothesis import given, settings
from hypothesis import strategies as st

from rtgraph.emulator import run
from rtgraph.errors import UsageError
from rtgraph.reports.profiler import (
    EXTRA_COLUMNS,
    PIPE_COLUMNS,
    STATISTIC_COLUMNS,
    SUMMARY_COLUMNS,
    Schedule,
    profile,
    write_csvs,
)

FREE_SUBMIT = {"ioctl_us": 0.0}

# --- the schedule ---------------------------------------------------------------------------


def test_schedule_1_1_2_2_over_8_iterations_records_2_3_6_7():
    # cycle = wait 1 + warmup 1 + active 2 = 4 steps: none, warmup, record, record; twice.
    s = Schedule(1, 1, 2, 2)
    assert [s.action(i) for i in range(8)] == ["none", "warmup", "record", "record"] * 2
    assert s.recorded(8) == [2, 3, 6, 7]
    assert s.recorded(12) == [2, 3, 6, 7]  # repeat 2: steps 8.. are none


def test_repeat_zero_cycles_until_the_iterations_run_out():
    assert Schedule(1, 1, 2, 0).recorded(12) == [2, 3, 6, 7, 10, 11]
    assert Schedule(0, 0, 1, 0).recorded(3) == [0, 1, 2]


def test_no_schedule_records_every_iteration():
    assert Schedule.of(None, 5).recorded(5) == [0, 1, 2, 3, 4]


def test_schedule_from_text_and_tuples():
    assert Schedule.of("1,1,2,2", 8) == Schedule(1, 1, 2, 2)
    assert Schedule.of(" 2, 0, 3 ", 8) == Schedule(2, 0, 3, 0)
    assert Schedule.of((0, 1, 1), 8) == Schedule(0, 1, 1, 0)


@pytest.mark.parametrize("bad", ["1,1", "1,1,2,2,2", "a,b,c", (1, -1, 2), (1, 1, 0), "1,1,x"])
def test_bad_schedules_are_usage_errors(bad):
    with pytest.raises(UsageError, match="schedule"):
        Schedule.of(bad, 8)


@settings(max_examples=80, deadline=None)
@given(
    st.integers(0, 3), st.integers(0, 3), st.integers(1, 3), st.integers(0, 3), st.integers(1, 30)
)
def test_recorded_steps_follow_the_cycle(wait, warmup, active, repeat, n):
    s = Schedule(wait, warmup, active, repeat)
    cycle = wait + warmup + active
    rec = s.recorded(n)
    full_cycles = n // cycle if repeat == 0 else min(n // cycle, repeat)
    partial = 0
    if repeat == 0 or n // cycle < repeat:
        partial = max(0, n % cycle - wait - warmup)
    assert len(rec) == full_cycles * active + partial
    assert all(step % cycle >= wait + warmup for step in rec)
    assert all(repeat == 0 or step // cycle < repeat for step in rec)


# --- op_summary against the run's own records -----------------------------------------------


def two_stream_program():
    """Stream 1: h2d then a 10 µs cube kernel, record. Stream 0: a 2 µs vector kernel, waits
    for the record, then a vector op with real flops and bytes."""
    b = ProgramBuilder(2)
    x = b.tensor("x", (10, 10))
    b.h2d(1, "xin", x)
    b.kernel(1, 10, unit="cube", name="big")
    b.record(1, 0)
    b.kernel(0, 2, unit="vector", name="small")
    b.wait(0, 0)
    b.work(0, "vector", flops=4000, bytes_moved=2000, name="act")
    b.sync()
    return b.build()


def read_csv(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return reader.fieldnames, list(reader)


@pytest.mark.parametrize("mode", ["task_trace", "op_trace"])
def test_op_summary_csv_matches_the_task_records(tmp_path, mode):
    program = two_stream_program()
    device = toy(host=FREE_SUBMIT)
    report = profile(program, device, mode=mode, iterations=8, schedule=(1, 1, 2, 2))
    assert report.recorded == (2, 3, 6, 7)
    write_csvs(report, tmp_path / "prof")
    header, rows = read_csv(tmp_path / "prof" / "op_summary.csv")
    pipes = PIPE_COLUMNS if mode == "op_trace" else ()
    assert tuple(header) == SUMMARY_COLUMNS + pipes + EXTRA_COLUMNS

    # independently: a none step is an unprofiled run, the others profiled; steps back to back
    plain = run(program, device, numerics=False)
    profiled = run(program, device, numerics=False, profile=mode)
    offsets, t = [], 0.0
    for step in range(8):
        offsets.append(t)
        t += plain.makespan_us if step % 4 == 0 else profiled.makespan_us
    assert len(rows) == 4 * len(program.tasks)
    seen = set()
    for row in rows:
        step, tid = int(row["Infer ID"]), int(row["Task ID"])
        rec = profiled.tasks[tid]
        seen.add((step, tid))
        assert float(row["Task Start Time(us)"]) == pytest.approx(
            offsets[step] + rec.start, abs=6e-4
        )
        assert float(row["Task Duration(us)"]) == pytest.approx(rec.end - rec.start, abs=6e-4)
        assert int(row["Stream ID"]) == rec.stream
        assert row["Op Name"] == rec.name and row["OP Type"] == rec.op
    assert seen == {(s, t) for s in (2, 3, 6, 7) for t in range(len(program.tasks))}
    starts = [float(r["Task Start Time(us)"]) for r in rows]
    assert starts == sorted(starts)


def test_task_types_waits_and_throughput():
    program = two_stream_program()
    device = toy(host=FREE_SUBMIT)
    report = profile(program, device, iterations=1)
    rows = {r["Op Name"]: r for r in report.op_summary}
    assert rows["h2d:xin"]["Task Type"] == "PCIE_DMA"
    assert rows["big"]["Task Type"] == "AI_CORE"
    assert rows["act"]["Task Type"] == "AI_VECTOR_CORE"
    assert rows["h2d:xin"]["Output Shapes"] == "10,10"
    assert rows["h2d:xin"]["Output Data Types"] == "FLOAT"
    r = run(program, device, numerics=False, profile="task_trace")
    small, act = r.task("small"), r.task("act")
    # 'act' waited for the event: its gap is from 'small' ending to its own start
    assert act.start - small.end > 0
    assert rows["act"]["Task Wait Time(us)"] == pytest.approx(act.start - small.end)
    assert rows["small"]["Task Wait Time(us)"] == 0.0  # first task of stream 0
    assert rows["big"]["Task Wait Time(us)"] == 0.0  # right after the h2d
    dur = act.end - act.start
    assert rows["act"]["Throughput(TFLOPS)"] == pytest.approx(4000 / (dur * 1e-6) / 1e12)
    assert rows["act"]["Bandwidth(GB/s)"] == pytest.approx(2000 / (dur * 1e-6) / 1e9)


def test_op_trace_pipes_split_each_duration_by_the_cost_model():
    program = two_stream_program()
    report = profile(program, toy(host=FREE_SUBMIT), mode="op_trace", iterations=1)
    rows = {r["Op Name"]: r for r in report.op_summary}
    # op_trace stretches every task by 1.25 on toy: launch 1 µs -> 1.25 µs.
    # 'act': 4 000 flops = 4 µs -> 5 µs of vec, 2 000 bytes read = 2 µs -> 2.5 µs of mte2,
    # nothing written; it lasts 1.25 + max(5, 2.5) = 6.25 µs, 5 of them on the Vector core.
    act = rows["act"]
    assert act["Task Duration(us)"] == pytest.approx(6.25)
    assert act["aiv_time(us)"] == pytest.approx(5.0)
    assert act["aiv_vec_time(us)"] == pytest.approx(5.0)
    assert act["aiv_vec_ratio"] == pytest.approx(1.0)
    assert act["aiv_mte2_time(us)"] == pytest.approx(2.5)
    assert act["aiv_mte2_ratio"] == pytest.approx(0.5)
    assert act["aiv_mte3_time(us)"] == act["aiv_mte3_ratio"] == 0.0
    assert act["aicore_time(us)"] == act["aic_total_cycles"] == 0  # no Cube in it
    # 'big': a 10 µs synthetic Cube kernel counts as mac time: 12.5 µs of 13.75
    big = rows["big"]
    assert big["aicore_time(us)"] == pytest.approx(12.5)
    assert big["aic_mac_ratio"] == pytest.approx(1.0)
    assert big["cube_utilization(%)"] == pytest.approx(100 * 12.5 / 13.75)
    assert big["aiv_time(us)"] == 0
    # a copy has no AI Core figures
    assert all(rows["h2d:xin"][c] == "N/A" for c in PIPE_COLUMNS)


def test_op_statistic_adds_up(tmp_path):
    program = two_stream_program()
    report = profile(program, toy(), iterations=3)
    stats = report.op_statistic
    assert sum(s["Count"] for s in stats) == len(report.op_summary) == 3 * len(program.tasks)
    assert sum(s["Ratio(%)"] for s in stats) == pytest.approx(100.0)
    for s in stats:
        durs = [
            r["Task Duration(us)"]
            for r in report.op_summary
            if (r["OP Type"], r["Task Type"]) == (s["OP Type"], s["Core Type"])
        ]
        assert s["Count"] == len(durs)
        assert s["Total Time(us)"] == pytest.approx(sum(durs))
        assert (s["Min Time(us)"], s["Max Time(us)"]) == (min(durs), max(durs))
        assert s["Avg Time(us)"] == pytest.approx(sum(durs) / len(durs))
    totals = [s["Total Time(us)"] for s in stats]
    assert totals == sorted(totals, reverse=True)
    write_csvs(report, tmp_path)
    header, rows = read_csv(tmp_path / "op_statistic.csv")
    assert tuple(header) == STATISTIC_COLUMNS
    assert [(r["OP Type"], int(r["Count"])) for r in rows] == [
        (s["OP Type"], s["Count"]) for s in stats
    ]
    assert sorted(os.listdir(tmp_path)) == ["op_statistic.csv", "op_summary.csv"]


# --- overhead ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["task_trace", "op_trace"])
def test_overhead_is_measured_and_within_the_devices_setting(mode):
    from rtgraph.device import load_device

    program = two_stream_program()
    for device in (toy(), load_device("ascend-910b")):
        report = profile(program, device, mode=mode, iterations=2)
        configured = getattr(device.profiling, f"{mode}_overhead")
        assert report.overhead_configured == configured
        expected = report.profiled_makespan_us / report.baseline_makespan_us - 1
        assert report.overhead_measured == pytest.approx(expected)
        # only device work stretches (host submission does not): 0 < measured <= configured
        assert 0 < report.overhead_measured <= configured + 1e-12
        assert f"{report.overhead_measured:.1%} measured" in report.summary()
    lo, hi = {"task_trace": (0.05, 0.10), "op_trace": (0.15, 0.30)}[mode]
    assert lo <= getattr(load_device("ascend-910b").profiling, f"{mode}_overhead") <= hi


def test_device_only_program_overhead_equals_the_setting():
    # no host cost at all and one stream: the makespan stretches exactly by the factor
    b = ProgramBuilder(1)
    b.kernel(0, 7, unit="cube")
    b.kernel(0, 7, unit="vector")
    report = profile(b.build(), toy(host=FREE_SUBMIT), mode="task_trace", iterations=1)
    assert report.overhead_measured == pytest.approx(0.125)


# --- errors ---------------------------------------------------------------------------------


def test_bad_arguments_are_usage_errors(tmp_path):
    program = two_stream_program()
    with pytest.raises(UsageError, match="profile mode"):
        profile(program, toy(), mode="trace")
    with pytest.raises(UsageError, match="iterations"):
        profile(program, toy(), iterations=0)
    with pytest.raises(UsageError, match="records none") as err:
        profile(program, toy(), iterations=2, schedule=(2, 1, 1))
    assert "at least 4 iterations" in err.value.render()
    blocker = tmp_path / "file"
    blocker.write_text("")
    report = profile(program, toy(), iterations=1)
    with pytest.raises(UsageError, match="cannot create folder"):
        write_csvs(report, blocker / "sub")


def test_compiled_attention_profile_names_ops_shapes_and_core_types():
    from conftest import MODELS

    import rtgraph

    device = rtgraph.device("ascend-910b")
    program = rtgraph.load(MODELS / "attention.rtg", S=128, D=256, H=4)
    compiled = rtgraph.compile(program, device=device, streams="by-unit", opt_level=0)
    report = profile(compiled, device, mode="op_trace", iterations=4, schedule="1,0,1")
    assert report.recorded == (1, 3)
    assert len(report.op_summary) == 2 * len(compiled.tasks)
    core = {(s["OP Type"], s["Core Type"]) for s in report.op_statistic}
    assert {("matmul", "AI_CORE"), ("softmax", "AI_VECTOR_CORE"), ("h2d", "PCIE_DMA")} <= core
    first = next(r for r in report.op_summary if r["Op Name"] == "x @ wq[g]")
    assert first["Input Shapes"] == "128,256;2,256,64"  # x and one group of 2 heads' Wq
    assert first["Input Data Types"] == "FLOAT16;FLOAT16"
    assert first["Output Shapes"] == "2,128,64"
    assert first["Throughput(TFLOPS)"] > 0 and first["Bandwidth(GB/s)"] > 0
    assert 0 < report.overhead_measured <= device.profiling.op_trace_overhead
