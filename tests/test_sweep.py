"""rtgraph sweep without Dask: the sweep file's checks (located errors before any work), the
points (grid, random, Latin hypercube, exclusions, stable keys), the content-addressed cache
and --resume, the tidy table and its Pareto front, and the command line."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from hypothesis import given
from hypothesis import strategies as st

import rtgraph
from rtgraph.cli import main
from rtgraph.errors import RtgError, UsageError
from rtgraph.sweep import SweepError, read_sweep, run_sweep
from rtgraph.sweep.evaluate import evaluate_point, task_for
from rtgraph.sweep.points import points
from rtgraph.sweep.spec import parse_sweep
from rtgraph.sweep.table import pareto_front

DATA = ROOT / "tests" / "data" / "sweeps"
TINY = DATA / "tiny.toml"
MODELS = ROOT / "models"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sweep.toml"
    path.write_text(text.replace("MODELS", MODELS.as_posix()), encoding="utf-8")
    return path


def errors_of(path: Path) -> list[str]:
    with pytest.raises(RtgError) as caught:
        read_sweep(path)
    found = getattr(caught.value, "errors", [caught.value])
    assert all(isinstance(e, SweepError) for e in found)
    return [e.render() for e in found]


# --- the sweep file: every mistake located before any work ---------------------------------


def test_unknown_keys_are_located_with_a_suggestion() -> None:
    shown = errors_of(DATA / "bad_unknown_key.toml")
    assert shown[0].startswith(f"{DATA / 'bad_unknown_key.toml'}:3:1: error: unknown key 'sed'")
    assert "    sed = 3\n    ^^^\n    hint: did you mean 'seed'?" in shown[0]
    assert ":7:1: error: unknown key 'stream'" in shown[1]
    assert "did you mean 'streams'?" in shown[1]


def test_an_empty_axis_is_located() -> None:
    (shown,) = errors_of(DATA / "bad_empty_grid.toml")
    assert ":3:1: error: empty axis 'streams'" in shown
    assert "    streams = []\n    ^^^^^^^" in shown


def test_impossible_combinations_are_located_at_their_values() -> None:
    shown = "\n".join(errors_of(DATA / "bad_impossible.toml"))
    assert ":5:18: error: batch_size = 0: must be at least 1" in shown
    assert ":6:21: error: memory = 'reuse-all': unknown memory plan" in shown
    assert "impossible combination: model '../../../models/overlap.rtg' on device 'toy'" in shown
    assert "larger than the device's memory" in shown


def test_unknown_devices_models_and_params_are_located(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[axes]\nmodel = ["MODELS/overlap.rtg", "nowhere.rtg"]\n'
        'device = ["toy", "ascend-911"]\n\n[axes.params]\nQ = [1]\n',
    )
    shown = "\n".join(errors_of(path))
    col = path.read_text().splitlines()[1].index('"nowhere.rtg"') + 1
    assert f"sweep.toml:2:{col}: error: cannot read model 'nowhere.rtg'" in shown
    assert "sweep.toml:3:18: error: unknown device 'ascend-911'" in shown
    assert (
        "sweep.toml:6:1: error: model 'MODELS/overlap.rtg'".replace("MODELS", MODELS.as_posix())
        in shown
        and "has no parameter 'Q'" in shown
    )


def test_bad_values_are_refused_before_any_point_runs(tmp_path: Path) -> None:
    calls = []
    with pytest.raises(RtgError):
        run_sweep(DATA / "bad_impossible.toml", tmp_path / "out", workers=1, evaluate=calls.append)
    assert calls == [] and not (tmp_path / "out").exists()


def test_the_cli_reports_a_bad_file_with_exit_status_1(capsys) -> None:
    assert main(["sweep", str(DATA / "bad_empty_grid.toml"), "--workers", "1"]) == 1
    assert "error: empty axis 'streams'" in capsys.readouterr().err


def test_sampling_modes_need_samples(tmp_path: Path) -> None:
    path = write(tmp_path, '[sweep]\nmode = "lhs"\n[axes]\nmodel = ["MODELS/overlap.rtg"]\n')
    (shown,) = errors_of(path)
    assert "sweep.toml:2:1: error: mode 'lhs' needs samples = N" in shown


# --- points ---------------------------------------------------------------------------------


def test_the_grid_is_every_combination_less_the_excluded(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[axes]\nmodel = ["MODELS/overlap.rtg"]\nstreams = ["single", "by-unit", "list"]\n'
        'memory = ["greedy", "none"]\n[axes.params]\nN = [64, 128]\n\n'
        '[[exclude]]\nstreams = "list"\nN = [64]\n',
    )
    found = points(read_sweep(path))
    assert len(found) == 3 * 2 * 2 - 2
    assert len({p.key for p in found}) == len(found)
    assert not any(p.values["streams"] == "list" and p.params["N"] == 64 for p in found)
    assert found[0].values["streams"] == "single" and found[0].params == {"N": 64}


axis_values = st.lists(st.sampled_from(["single", "by-unit", "list"]), min_size=1, unique=True)


@given(
    streams=axis_values,
    memories=st.lists(st.sampled_from(["none", "greedy", "timed"]), min_size=1, unique=True),
    sizes=st.lists(st.integers(8, 64), min_size=1, max_size=3, unique=True),
    mode=st.sampled_from(["grid", "random", "lhs"]),
    samples=st.integers(1, 12),
    seed=st.integers(0, 2**32),
)
def test_points_are_distinct_drawn_from_the_axes_and_stable(
    streams, memories, sizes, mode, samples, seed
) -> None:
    text = (
        f'[sweep]\nmode = "{mode}"\nsamples = {samples}\nseed = {seed}\n'
        f'[axes]\nmodel = ["{MODELS.as_posix()}/overlap.rtg"]\nstreams = {json.dumps(streams)}\n'
        f"memory = {json.dumps(memories)}\n[axes.params]\nN = {sizes}\n"
    )
    sweep = parse_sweep(text, ROOT / "sweep.toml")
    found = points(sweep)
    grid = len(streams) * len(memories) * len(sizes)
    assert len({p.key for p in found}) == len(found) >= 1
    if mode != "lhs":  # a Latin hypercube's repeated draws are dropped: at most `samples`
        assert len(found) == (grid if mode == "grid" else min(samples, grid))
    assert len(found) <= (grid if mode == "grid" else min(samples, grid))
    for p in found:
        assert p.values["streams"] in streams and p.values["memory"] in memories
        assert p.params["N"] in sizes
    assert [p.key for p in points(sweep)] == [p.key for p in found]  # same file, same points
    if mode == "lhs" and samples >= len(streams):
        assert {p.values["streams"] for p in found} == set(streams)  # every stratum drawn


# --- the cache and --resume -----------------------------------------------------------------


def counting(calls: list):
    def evaluate(task):
        calls.append(task.key)
        return evaluate_point(task)

    return evaluate


def test_a_rerun_computes_nothing_and_gives_the_same_table(tmp_path: Path) -> None:
    calls: list = []
    first = run_sweep(TINY, tmp_path, workers=1, evaluate=counting(calls))
    assert len(calls) == first.meta["points"] == 16 and first.meta["computed"] == 16
    table = (tmp_path / "table.csv").read_text()
    again = run_sweep(TINY, tmp_path, workers=1, evaluate=counting(calls))
    assert len(calls) == 16 and again.meta["cached"] == 16
    assert (tmp_path / "table.csv").read_text() == table


def test_resume_after_an_interrupted_sweep_computes_only_the_missing_points(
    tmp_path: Path,
) -> None:
    calls: list = []

    def interrupted(task):
        if len(calls) == 5:
            raise KeyboardInterrupt  # what Ctrl-C, or SIGTERM through the CLI, raises
        return counting(calls)(task)

    with pytest.raises(KeyboardInterrupt):
        run_sweep(TINY, tmp_path, workers=1, evaluate=interrupted)
    assert json.loads((tmp_path / "sweep.json").read_text())["complete"] is False
    assert len(list((tmp_path / "cache").rglob("*.json"))) == 5
    assert not list((tmp_path / "cache").rglob("*.tmp"))
    with pytest.raises(UsageError, match="interrupted sweep"):
        run_sweep(TINY, tmp_path, workers=1)  # without --resume: refused, nothing lost
    done = run_sweep(TINY, tmp_path, workers=1, resume=True, evaluate=counting(calls))
    assert len(calls) == 16 and len(set(calls)) == 16  # 5 before, 11 after: none twice
    assert done.meta["computed"] == 11 and done.meta["cached"] == 5
    keys = [row["point"] for row in done.rows]
    assert len(keys) == len(set(keys)) == 16 and all(not row["error"] for row in done.rows)


def test_resume_refuses_a_folder_of_another_sweep(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no sweep to resume"):
        run_sweep(TINY, tmp_path, workers=1, resume=True)
    other = write(tmp_path, '[axes]\nmodel = ["MODELS/overlap.rtg"]\n')
    run_sweep(other, tmp_path / "out", workers=1)
    with pytest.raises(UsageError, match="another file"):
        run_sweep(TINY, tmp_path / "out", workers=1, resume=True)


def test_a_changed_axis_recomputes_only_the_new_points(tmp_path: Path) -> None:
    calls: list = []
    base = '[axes]\nmodel = ["MODELS/overlap.rtg"]\nstreams = ["single"]\n'
    run_sweep(write(tmp_path, base), tmp_path / "out", workers=1, evaluate=counting(calls))
    wider = base.replace('["single"]', '["single", "by-unit"]')
    done = run_sweep(write(tmp_path, wider), tmp_path / "out", workers=1, evaluate=counting(calls))
    assert len(calls) == 2
    assert {row["device"] for row in done.rows} == {"ascend-910b"}  # the program's own


# --- the table ------------------------------------------------------------------------------


def test_the_table_is_tidy_and_documented(tmp_path: Path) -> None:
    done = run_sweep(TINY, tmp_path, workers=1, pareto="makespan,memory")
    with open(tmp_path / "table.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 16 and len({r["point"] for r in rows}) == 16
    meta = json.loads((tmp_path / "sweep.json").read_text())
    assert list(meta["columns"]) == list(rows[0]) and all(meta["columns"].values())
    assert {"makespan_us", "util_cube", "memory_peak_bytes", "hbm_bytes", "compile_s"} <= set(
        rows[0]
    )
    for row in rows:
        assert float(row["makespan_us"]) > 0 and (tmp_path / row["result"]).is_file()
    on = [r for r in done.rows if r["pareto"]]
    assert on and all(
        not (
            o["makespan_us"] <= r["makespan_us"]
            and o["memory_peak_bytes"] <= r["memory_peak_bytes"]
            and (o["makespan_us"], o["memory_peak_bytes"])
            != (r["makespan_us"], r["memory_peak_bytes"])
        )
        for r in on
        for o in done.rows
    )


scores = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=25)


@given(scores, st.booleans())
def test_the_pareto_front_is_exactly_the_undominated_rows(values, maximise_b) -> None:
    rows = [{"a": a, "b": b, "error": ""} for a, b in values]
    front = pareto_front(rows, "a,-b" if maximise_b else "a,b")
    sign = -1 if maximise_b else 1

    def dominates(p, q):
        better = p["a"] <= q["a"] and sign * p["b"] <= sign * q["b"]
        return better and (p["a"], p["b"]) != (q["a"], q["b"])

    for row, on in zip(rows, front, strict=True):
        assert on == (not any(dominates(o, row) for o in rows))
    assert any(front)


def test_an_unknown_pareto_column_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="no column 'makespam'") as caught:
        pareto_front([{"makespan_us": 1.0}], "makespam,memory")
    assert "did you mean" in caught.value.render()


def test_the_cli_writes_the_table_the_sidecar_and_the_pictures(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    argv = ["sweep", str(TINY), "--workers", "1", "--out", str(out), "--pareto", "makespan,memory"]
    assert main([*argv, "--plot", "tasks,hbm"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("16 points: 16 computed, 0 from the cache (serial, 1 worker(s)")
    for name in ("table.csv", "sweep.json", "pareto.png", "tasks-vs-hbm_bytes.png"):
        assert (out / name).is_file() and f"wrote {out / name}" in printed
    assert main([*argv, "--json"]) == 0
    meta = json.loads(capsys.readouterr().out)
    assert meta["cached"] == 16 and meta["complete"] is True
    assert main([*argv, "--plot", "tasks"]) == 2
    assert "--plot tasks: expected X,Y" in capsys.readouterr().err


def test_a_refused_point_records_its_error_instead_of_figures() -> None:
    sweep = read_sweep(TINY)
    task = task_for(sweep, points(sweep)[0])
    result = evaluate_point(dataclasses.replace(task, text="program broken( {\n"))
    assert list(result) == ["error"] and "error:" in result["error"]
    assert evaluate_point(task)["makespan_us"] > 0


def test_max_rel_error_is_over_each_outputs_scale_so_zeros_do_not_blow_it_up(
    tmp_path: Path,
) -> None:
    """resnet_bn at -O2 folds its batchnorms (a few f16 roundings move) and ends in a ReLU, so
    its output holds exact zeros the folded program may miss by a hair: element-wise, that is a
    relative error near 1e29; over the output's largest magnitude, what the fold costs — the
    precision report's measure (rtgraph.ir.accuracy), and the same as a direct computation."""
    path = write(
        tmp_path,
        """[sweep]
mode = "grid"
numerics = true

[axes]
model = ["MODELS/resnet_bn.rtg"]
opt_level = [0, 2]

[axes.params]
C = [8]
HW = [8]
""",
    )
    done = run_sweep(path, tmp_path / "out", workers=1)
    errors = {int(r["opt_level"]): float(r["max_rel_error"]) for r in done.rows}
    assert errors[0] == 0 < errors[2] < 2.0**-6
    program = rtgraph.load(MODELS / "resnet_bn.rtg", C=8, HW=8)
    got = rtgraph.run(rtgraph.compile(program)).outputs["y"].astype(np.float64)
    want = rtgraph.reference(program)["y"].astype(np.float64)
    assert errors[2] == np.abs(got - want).max() / np.abs(want).max()
    assert rtgraph.compare({"y": got}, {"y": want})["y"]["max_rel"] > 100 * errors[2]


def test_a_sweep_over_precision_prices_each_form_in_time_and_error(tmp_path: Path) -> None:
    """precision is an axis: with numerics, max_rel_error is what the form costs against the
    program as written (the MLP is f16: 0 for keep, more for bf16's 8-bit mantissa and int8) and
    the makespan what it buys."""
    path = write(
        tmp_path,
        """[sweep]
mode = "grid"
numerics = true

[axes]
model = ["MODELS/mlp.rtg"]
precision = ["keep", "bf16", "int8"]
""",
    )
    done = run_sweep(path, tmp_path / "out", workers=1)
    rows = {row["precision"]: row for row in done.rows}
    assert set(rows) == {"keep", "bf16", "int8"} and not any(r["error"] for r in rows.values())
    errors = {p: float(rows[p]["max_rel_error"]) for p in rows}
    assert errors["keep"] == 0 < errors["bf16"] and errors["int8"] > 0
    assert float(rows["int8"]["makespan_us"]) != float(rows["keep"]["makespan_us"])
