"""What a cluster run shows: the summary (per device, bubble, per link, the check), the
timeline picture (device lanes, link lanes between them), and ``rtgraph run --cluster``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import rtgraph
from rtgraph import cluster_api
from rtgraph.reports.cluster_summary import bubble_fraction, device_figures, summary_lines
from rtgraph.reports.cluster_timeline import cluster_rows, cluster_timeline

SMALL = {"B": 32, "D": 32, "H": 64}


@pytest.fixture(scope="module")
def dp_run():
    program = rtgraph.load("models/mlp_train.rtg", **SMALL)
    return cluster_api.run_cluster(
        cluster_api.compile_cluster(program, cluster="toy-2x4", data_parallel=8)
    )


def test_the_summary_has_a_row_per_device_and_per_link_direction(dp_run):
    lines = summary_lines(dp_run)
    assert "8 device(s), data-parallel 8" in lines[0]
    figures = device_figures(dp_run.result)
    assert [f.rank for f in figures] == list(range(8))
    assert all(f.transfers == 2 * 2 * 2 * 7 for f in figures)  # two ring allreduces
    used = [link for link in dp_run.result.links if link.transfers]
    assert sum(1 for line in lines if "→" in line) == len(dp_run.result.links) >= len(used) > 0
    assert any(line.strip().startswith("g1:") for line in lines)
    # replicas are the same program on equal data: their compute is busy alike
    assert len({round(f.busy_us, 6) for f in figures}) == 1
    assert 0.0 <= bubble_fraction(dp_run.result) < 1.0


def test_the_timeline_draws_device_lanes_and_link_lanes(dp_run):
    rows = cluster_rows(dp_run.result)
    devices = {rank for _, rank, _ in rows if rank is not None}
    assert devices == set(range(8))
    links = [label for label, rank, _ in rows if rank is None]
    assert set(links) == {link.direction for link in dp_run.result.links}
    fig = cluster_timeline(dp_run.result)
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_yticklabels()] == [label for label, _, _ in rows]
    fig.canvas.draw()
    (legend,) = fig.legends
    box = legend.get_window_extent()
    canvas = fig.bbox
    assert box.x0 >= canvas.x0 and box.x1 <= canvas.x1 and box.y1 <= canvas.y1
    labels = {t.get_text() for t in legend.get_texts()}
    assert "transfer" in labels and "matmul/conv" in labels


def rtgraph_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rtgraph", *args], capture_output=True, text=True, timeout=300
    )


def test_run_on_a_cluster_prints_json_and_draws(tmp_path):
    picture = tmp_path / "t.png"
    done = rtgraph_cli(
        "run",
        "models/layer_stack.rtg",
        "--cluster",
        "toy",
        "--pipeline",
        "2",
        "--micro-batches",
        "4",
        "--schedule",
        "gpipe",
        "-D",
        "B=16",
        "-D",
        "D=16",
        "-D",
        "F=32",
        "--json",
        "--timeline",
        str(picture),
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["devices"] == 2 and data["stages"]["schedule"] == "gpipe"
    assert [d["rank"] for d in data["per_device"]] == [0, 1]
    assert data["check"]["y"]["check"] == "bit-exact"
    assert picture.stat().st_size > 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--data-parallel", "2"], "--data-parallel needs --cluster"),
        (["--cluster", "toy", "--micro-batches", "4"], "--micro-batches needs --pipeline"),
        (["--cluster", "toy", "--html", "x.html"], "--html is not available with --cluster"),
        (["--cluster", "toy", "--data-parallel", "2", "--pipeline", "2"], "use one of"),
    ],
)
def test_cluster_flags_that_do_not_fit_are_usage_errors(args, message):
    done = rtgraph_cli("run", "models/mlp_train.rtg", *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
