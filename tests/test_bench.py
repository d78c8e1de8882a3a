"""``rtgraph bench``: the headline comparison's tables hold the columns they promise and numbers
that agree with each other and with direct runs of the same compilations."""

from __future__ import annotations

import io
import json

import pytest
from conftest import MODELS

import rtgraph
from rtgraph.bench import ALLOC_MODES, BenchReport, bench, model_paths
from rtgraph.bench.__main__ import main
from rtgraph.bench.claims import (
    AGREES,
    BY_UNIT_BAND,
    HOST_OVERLAP_BAND,
    LIFT_BAND,
    ONE_STREAM_BAND,
    SPEC_INPUT,
    Band,
    by_unit_row,
    headline_rows,
    host_row,
    lift_row,
    one_stream_row,
    pct_beside,
    ratio_beside,
    spec_input_row,
    verdict,
)
from rtgraph.bench.figure import report_figure
from rtgraph.bench.rows import EMULATED, SPEC_COSTED, PolicyRow
from rtgraph.errors import UsageError
from rtgraph.stream_program import Wait

SMALL = {"attention": {"S": 32, "D": 192, "H": 12}}
ATTENTION = MODELS / "attention.rtg"


@pytest.fixture(scope="module")
def report() -> BenchReport:
    return bench([ATTENTION], params=SMALL, progress=False)


def test_every_policy_and_memory_plan_has_a_row(report):
    assert report.models == ["attention"] and report.device == "ascend-910b"
    assert report.params["attention"] == SMALL["attention"]
    keys = {(r.policy, r.memory) for r in report.policies}
    plans = ("stream-ordered", "greedy", "none")
    assert keys == {(p, m) for p in ("single", "by-unit", "list") for m in plans}


def test_speedup_is_single_makespan_over_policy_makespan(report):
    for row in report.policies:
        single = report.policy_row(row.model, "single", row.memory)
        assert row.speedup == pytest.approx(single.makespan_us / row.makespan_us)
        assert row.compute_utilization == pytest.approx(
            row.utilization["cube"] + row.utilization["vector"]
        )
    assert report.policy_row("attention", "single").speedup == 1.0


def test_rows_match_a_direct_run_of_the_same_compilation(report):
    program = rtgraph.load(ATTENTION, SMALL["attention"])
    compiled = rtgraph.compile(program, device="ascend-910b", streams="by-unit", memory="none")
    result = rtgraph.run(compiled, device="ascend-910b", numerics=False)
    row = report.policy_row("attention", "by-unit", "none")
    assert row.makespan_us == result.makespan_us
    assert row.utilization == result.utilization
    assert row.events == result.events
    assert row.waits == sum(isinstance(c, Wait) for c in compiled.commands) > 0
    assert row.tasks == len(compiled.tasks)
    single = report.policy_row("attention", "single", "none")
    assert single.waits == 0 and single.events == 0


def test_stream_ordered_reuse_costs_no_wait_and_no_time(report):
    for policy in ("by-unit", "list"):
        ordered = report.policy_row("attention", policy, "stream-ordered")
        alone = report.policy_row("attention", policy, "none")
        assert ordered.waits == alone.waits
        assert ordered.makespan_us == pytest.approx(alone.makespan_us)
    greedy = report.policy_row("attention", "by-unit", "greedy")
    assert greedy.makespan_us > report.policy_row("attention", "by-unit").makespan_us


def test_host_overlap_is_a_share_of_the_submission_time(report):
    for row in report.policies:
        assert 0 <= row.host_overlap_us <= row.host_submit_us <= row.host_busy_us + 1e-9
    # Submitting ahead: most of the host's ioctl time runs while the device computes.
    assert report.policy_row("attention", "by-unit").host_overlap > 0.5


def test_headline_sets_each_claim_against_a_measured_figure(report):
    text = report.headline()
    lines = [line for line in text.splitlines() if line.startswith("| ")][2:]
    claims = [line.split(" | ")[0].lstrip("| ") for line in lines]
    assert claims == [
        "one stream: Cube / Vector utilization",
        "a stream per unit type: Cube / Vector utilization",
        "Cube + Vector utilization, a stream per unit ÷ one stream",
        "the host submits while the device computes",
        "direct device allocation (aclrtMalloc), per call",
        "caching-pool allocation, per call",
    ]
    single = report.policy_row("attention", "single")
    unit = report.policy_row("attention", "by-unit")
    lift = unit.compute_utilization / single.compute_utilization
    assert f"attention {lift:.2f}×" in text
    assert f"attention {round(100 * single.utilization['cube'])} %" in text
    spec = rtgraph.device("ascend-910b").memory
    assert f"spec input: {spec.direct_alloc_us:.1f} µs a call (median of" in text
    assert f"spec input: {spec.pool_alloc_us:.1f} µs a call (median of" in text
    verdicts = [line.rstrip(" |").split(" | ")[-1] for line in lines]
    assert verdicts[-2:] == [SPEC_INPUT, SPEC_INPUT]  # the emulator charges the spec's costs
    assert all(v == AGREES or v.startswith("differs: ") for v in verdicts[:-2])
    assert "1.69× – 2.06× (± 10 %)" in text  # the lift's band is stated
    assert "### Headline" in report.markdown()


def test_memory_row_is_consistent(report):
    (row,) = report.memory
    assert row.lower_bound <= row.greedy_bytes <= row.stream_ordered_bytes <= row.none_bytes
    assert row.saving == pytest.approx(1 - row.greedy_bytes / row.none_bytes)
    assert row.over_bound == pytest.approx(row.greedy_bytes / row.lower_bound)
    assert row.over_bound >= 1.0


def test_allocation_rows_cost_what_the_device_spec_says(report):
    spec = rtgraph.device("ascend-910b").memory
    rows = {r.mode: r for r in report.allocation}
    assert list(rows) == ["static", *ALLOC_MODES]
    assert rows["static"].load_calls == rows["static"].step_calls == 0
    direct = rows["direct"]
    # every activation alloc and free goes to the driver; params once at load
    assert direct.step_us == pytest.approx(
        direct.step_allocs * spec.direct_alloc_us + direct.step_frees * spec.direct_free_us
    )
    assert direct.load_us == pytest.approx(direct.load_calls * spec.direct_alloc_us)
    pool = rows["pool"]
    assert pool.step_calls == direct.step_calls
    assert pool.us_per_step_call < direct.us_per_step_call / 5
    assert pool.step_us >= pool.step_allocs * spec.pool_alloc_us
    mixed = rows["mixed"]
    assert mixed.load_us == direct.load_us  # params are allocated directly …
    assert mixed.us_per_step_call < direct.us_per_step_call / 5  # … activations from the pool
    for row in rows.values():
        assert row.step_makespan_us == pytest.approx(row.makespan_us - row.load_us)
    assert direct.step_makespan_us > pool.step_makespan_us >= rows["static"].step_makespan_us


def test_markdown_has_the_three_tables_with_their_columns(report):
    text = report.markdown()
    for title in ("### Streams", "### Memory", "### Allocation"):
        assert title in text
    for column in ("makespan µs", "speed-up", "cube", "vector", "dma", "cube+vector", "events"):
        assert f"| {column} |" in text
    for column in ("no reuse MiB", "greedy MiB", "saving", "greedy ÷ max-live"):
        assert f"| {column} |" in text
    for column in ("µs per step call", "step makespan µs", "÷ static"):
        assert f"| {column} |" in text
    by_unit = report.policy_row("attention", "by-unit", "none")
    assert f"| attention | none | by-unit | {by_unit.makespan_us:,.1f} | " in text


def test_json_round_trips_with_derived_columns(report):
    data = json.loads(json.dumps(report.to_json()))
    assert data["device"] == "ascend-910b" and data["models"] == ["attention"]
    assert len(data["policies"]) == 9
    assert all("compute_utilization" in r and "speedup" in r for r in data["policies"])
    assert all(0 <= r["host_overlap"] <= 1 for r in data["policies"])
    assert {"saving", "over_bound"} <= set(data["memory"][0])
    assert {"us_per_step_call", "step_makespan_us"} <= set(data["allocation"][0])
    assert [r["claim"] for r in data["headline"]] == [r.claim for r in report.headline_rows()]
    assert {r["verdict"] for r in data["headline"][-2:]} == {SPEC_INPUT}
    sources = {r["mode"]: r["source"] for r in data["allocation"]}
    assert sources == {"static": EMULATED, **dict.fromkeys(ALLOC_MODES, SPEC_COSTED)}


def test_figure_has_three_panels(report, tmp_path):
    from rtgraph.reports.style import save_figure

    fig = report_figure(report)
    assert len(fig.axes) == 3
    assert save_figure(fig, tmp_path / "bench.png").stat().st_size > 0


def test_figure_legends_sit_off_the_bars_inside_the_picture_with_plain_ticks(report):
    fig = report_figure(report)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        legend = ax.get_legend().get_window_extent(renderer)
        assert legend.x0 >= ax.bbox.x1  # right of the panel, so no bar is under it
        assert fig.bbox.x0 <= legend.x0 and legend.x1 <= fig.bbox.x1  # and not cut off
        for bar in ax.patches:
            assert bar.get_hatch() in (None, "")  # memory plans are markers, not hatches
        ticks = [t.get_text() for t in ax.get_yticklabels() + ax.get_yticklabels(minor=True)]
        assert not any("10^" in t or "\\times" in t for t in ticks), ticks
    policies = {r.policy for r in report.policies}
    bars = [b for b in fig.axes[0].patches]
    assert len(bars) == len(report.models) * len(policies)  # one bar per (model, policy)


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_draws_in_place_on_a_terminal_and_lines_elsewhere():
    mlp = [MODELS / "mlp.rtg"]
    small = {"mlp": {"B": 16, "D": 32, "F": 64}}
    terminal = FakeTerminal()
    bench(mlp, params=small, stream=terminal, allocs=())
    assert terminal.getvalue().count("\r[") >= 6 and terminal.getvalue().endswith("\n")
    plain = io.StringIO()
    bench(mlp, params=small, stream=plain, allocs=())
    # 3 memory plans × 3 policies, the memory plans, and -O0 vs -O2: 11 steps
    assert plain.getvalue().splitlines() == ["bench: [0/11] mlp", "bench: [11/11] done"]
    steps = [line for line in terminal.getvalue().split("\r") if line.startswith("[")]
    counts = [int(line.split("] ")[1].split("/")[0]) for line in steps]
    assert counts == list(range(1, 12))  # one step per run, never past the total
    silent = FakeTerminal()
    bench(mlp, params=small, stream=silent, allocs=(), progress=False)
    assert silent.getvalue() == ""
    auto = io.StringIO()
    bench(mlp, params=small, stream=auto, allocs=(), progress=None)
    assert auto.getvalue() == ""  # not a terminal


def test_models_benchmarked_side_by_side_give_the_same_report(capsys, monkeypatch):
    """``jobs``: the models run in worker processes, the report is the serial one, row for row
    (every figure is the emulated clock; the models come in order)."""
    import rtgraph.bench.run as run_module

    pools, real = [], run_module.ProcessPoolExecutor
    monkeypatch.setattr(
        run_module, "ProcessPoolExecutor", lambda n, **kw: pools.append(n) or real(n, **kw)
    )
    models = [MODELS / "mlp.rtg", MODELS / "layer_stack.rtg", MODELS / "overlap.rtg"]
    small = {"mlp": {"B": 16, "D": 32, "F": 64}}
    serial = bench(models, params=small, progress=False, allocs=("pool",), jobs=1)
    assert pools == []
    plain = io.StringIO()
    parallel = bench(models, params=small, stream=plain, allocs=("pool",), jobs=2)
    assert pools == [2]  # two worker processes
    assert parallel == serial and serial.models == ["mlp", "layer_stack", "overlap"]
    lines = plain.getvalue().splitlines()
    assert lines[-1] == "bench: [36/36] done" and len(lines) == 4
    for jobs in (0, -1, 1.5, True):
        with pytest.raises(UsageError, match="positive integer"):
            bench(models, progress=False, jobs=jobs)
    from rtgraph.cli import main as cli

    assert cli(["bench", str(MODELS / "mlp.rtg"), "-q", "-j", "0"]) == 2
    assert "positive integer" in capsys.readouterr().err


def test_paths_expand_folders_and_reject_what_is_not_there(tmp_path):
    found = model_paths([MODELS])
    assert found == sorted(MODELS.glob("*.rtg"))
    assert model_paths([ATTENTION, ATTENTION]) == [ATTENTION]
    with pytest.raises(UsageError, match="no such file"):
        model_paths([tmp_path / "missing.rtg"])
    with pytest.raises(UsageError, match=r"no \.rtg files"):
        model_paths([tmp_path])
    with pytest.raises(UsageError, match="no models"):
        model_paths([])


def test_unknown_options_are_usage_errors():
    with pytest.raises(UsageError, match="memory plan 'reuse'"):
        bench([ATTENTION], memories=("reuse",), progress=False)
    with pytest.raises(UsageError, match="allocation mode 'slab'"):
        bench([ATTENTION], allocs=("slab",), progress=False)


def test_cli_bench_writes_tables_and_figure_whole(capsys, tmp_path):
    from rtgraph.cli import main as cli

    mlp = str(MODELS / "mlp.rtg")
    out, fig = tmp_path / "bench.md", tmp_path / "bench.png"
    assert cli(["bench", mlp, "-q", "-o", str(out), "--figure", str(fig)]) == 0
    assert out.read_text().startswith("Device `ascend-910b`")
    assert "### Headline" in out.read_text() and fig.stat().st_size > 0
    capsys.readouterr()
    assert cli(["bench", mlp, "--streams", "by-unit", "--memory", "greedy", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {(r["policy"], r["memory"]) for r in data["policies"]} == {
        ("single", "greedy"),
        ("by-unit", "greedy"),
    }
    missing = tmp_path / "nowhere" / "bench.md"
    assert cli(["bench", mlp, "-q", "-o", str(missing)]) == 2
    assert not missing.exists()
    assert cli(["bench", mlp, "-q", "--alloc", "slab"]) == 2
    assert "allocation mode 'slab'" in capsys.readouterr().err


def test_module_entry_point_prints_markdown_or_json(capsys, tmp_path):
    mlp = str(MODELS / "mlp.rtg")
    assert main([mlp]) == 0
    assert "### Streams" in capsys.readouterr().out
    assert main([mlp, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["models"] == ["mlp"]
    assert main([str(tmp_path / "nope.rtg")]) == 2
    assert "no such file" in capsys.readouterr().err


@pytest.mark.slow
def test_readme_headline_is_what_bench_prints():
    """The README quotes `rtgraph bench models/`; regenerate the table when this fails."""
    from conftest import ROOT

    report = bench([MODELS], progress=False, jobs=2)  # side by side: the same report
    table = report.headline().split("\n\n")[0]
    assert table in (ROOT / "README.md").read_text(), report.headline()


# --- the verdicts, on made-up figures either side of every threshold ---------------------------


def _row(model: str = "m", cube: float = 0.4, vector: float = 0.4, **host: float) -> PolicyRow:
    return PolicyRow(
        model=model,
        policy="by-unit",
        memory="stream-ordered",
        tasks=1,
        makespan_us=1.0,
        utilization={"cube": cube, "vector": vector},
        speedup=1.0,
        events=0,
        waits=0,
        host_busy_us=host.get("submit", 0.0),
        host_submit_us=host.get("submit", 0.0),
        host_overlap_us=host.get("overlap", 0.0),
    )


def test_a_band_says_which_side_a_figure_misses():
    band = Band(1.0, 2.0)
    assert [band.side(x) for x in (0.99, 1.0, 1.5, 2.0, 2.01)] == [
        "lower",
        None,
        None,
        None,
        "higher",
    ]
    assert Band(1.0).side(1e9) is None and Band(high=2.0).side(-1e9) is None
    assert verdict([1.0, 2.0], band, ratio_beside) == AGREES
    assert verdict([0.5, 1.5, 3.0], band, ratio_beside) == "differs: lower (0.50×); higher (3.00×)"


def test_a_missing_figure_prints_with_the_decimals_that_show_it_misses():
    assert pct_beside(0.2999, 0.30) == "29.99 %"  # not an in-band "30 %"
    assert pct_beside(0.674, 0.75) == "67 %"
    assert ratio_beside(2.0626, 2.0625) == "2.063×"  # 2.06× would read as in the band
    assert pct_beside(0.5, None) == "50 %"


@pytest.mark.parametrize(
    ("band", "lower", "inside", "higher"),
    [
        (ONE_STREAM_BAND, [0.29, 0.2999], [0.30, 0.40, 0.50], [0.5001, 0.60]),
        (BY_UNIT_BAND, [0.5, 0.7499], [0.75, 0.90, 1.0], []),  # "≥ 75 %": no upper side
        (LIFT_BAND, [1.0, 1.68], [1.69, 1.875, 2.06], [2.07, 3.0]),
        (HOST_OVERLAP_BAND, [0.0, 0.499], [0.5, 0.97, 1.0], []),
    ],
)
def test_every_band_has_figures_on_both_sides(band, lower, inside, higher):
    assert {band.side(x) for x in lower} == {"lower"}
    assert {band.side(x) for x in inside} == {None}
    assert [band.side(x) for x in higher] == ["higher"] * len(higher)
    assert verdict(inside, band, pct_beside) == AGREES
    assert verdict([*inside, *lower], band, pct_beside).startswith("differs: lower (")
    if higher:
        assert verdict([*inside, *higher], band, pct_beside).startswith("differs: higher (")


def test_one_stream_verdict_is_two_sided():
    assert one_stream_row({"m": _row(cube=0.35, vector=0.45)}).verdict == AGREES
    assert one_stream_row({"m": _row(cube=0.2, vector=0.4)}).verdict == "differs: lower (20 %)"
    assert one_stream_row({"m": _row(cube=0.4, vector=0.6)}).verdict == "differs: higher (60 %)"


def test_by_unit_verdict_names_the_figures_below_the_claim():
    assert by_unit_row({"m": _row(cube=0.75, vector=1.0)}).verdict == AGREES
    row = by_unit_row({"a": _row(cube=0.8, vector=0.6), "b": _row(cube=0.7, vector=0.9)})
    assert row.verdict == "differs: lower (60 %, 70 %)"
    assert row.measured == "a 80 % / 60 %; b 70 % / 90 %"


def test_lift_agrees_only_within_ten_percent_of_the_claim():
    single = {"m": _row(cube=0.4, vector=0.4)}  # Cube + Vector 0.8
    lift = {
        x: lift_row(single, {"m": _row(cube=x / 2 * 0.8, vector=x / 2 * 0.8)})
        for x in (1.5, 1.7, 1.875, 2.05, 2.3)
    }
    assert [r.verdict for r in lift.values()] == [
        "differs: lower (1.50×)",
        AGREES,
        AGREES,
        AGREES,
        "differs: higher (2.30×)",
    ]
    assert lift[1.875].measured == "m 1.88×" and "(± 10 %)" in lift[1.875].agrees_if


def test_host_overlap_verdict_is_per_model():
    fine, alone = (
        _row("fine", submit=100.0, overlap=90.0),
        _row("alone", submit=100.0, overlap=40.0),
    )
    assert host_row({"fine": fine}).verdict == AGREES
    row = host_row({"fine": fine, "alone": alone})
    assert row.verdict == "differs: lower (40 %)"
    assert row.measured == "fine 90 % of 100 µs; alone 40 % of 100 µs"


def test_allocation_costs_are_spec_inputs_whatever_their_value():
    for calls in ([50.0] * 3, [1.0, 1.0, 51.0], [500.0]):
        row = spec_input_row("direct", "direct allocation", 50.0, calls)
        assert row.verdict == SPEC_INPUT and row.measured.startswith("spec input: ")
        assert "direct_alloc_us" in row.agrees_if and "agrees" not in row.measured
    pool = spec_input_row("pool", "pool allocation", 1.0, [1.0, 1.0, 51.0])
    assert pool.measured == "spec input: 1.0 µs a call (median of 3 calls; mean 17.7 µs)"


def test_headline_rows_say_only_what_the_figures_can_speak_to():
    single, unit = {"m": _row(cube=0.4, vector=0.4)}, {"m": _row(cube=0.75, vector=0.75)}
    claims = [r.claim for r in headline_rows(single, unit, {"direct": [50.0], "pool": []})]
    assert len(claims) == 5 and claims[-1].startswith("direct")
    assert len(headline_rows(single, {}, {})) == 1  # no by-unit run: no lift, no host row
    assert headline_rows({}, {}, {"pool": [1.0]})[0].verdict == SPEC_INPUT
