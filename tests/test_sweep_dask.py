"""rtgraph sweep on Dask: the same table as a serial run, a worker killed mid-sweep loses no
point and duplicates none, and a worker running another rtgraph is refused. One local
cluster of two worker processes is shared by the module (started once: a few seconds)."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import pytest
from conftest import ROOT

distributed = pytest.importorskip("distributed")
cloudpickle = pytest.importorskip("cloudpickle")

from rtgraph.errors import UsageError  # noqa: E402
from rtgraph.sweep import run_sweep  # noqa: E402
from rtgraph.sweep.engine import SweepRunError, check_worker_versions  # noqa: E402
from rtgraph.sweep.evaluate import WALL_CLOCK, evaluate_point  # noqa: E402

TINY = ROOT / "tests" / "data" / "sweeps" / "tiny.toml"
# The workers cannot import this test module: its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as local:
        yield local


def comparable(rows):
    """The rows without the wall-clock column(s): what two runs must agree on."""
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK} for r in rows]


def test_a_cluster_run_gives_the_serial_runs_table(cluster, tmp_path: Path) -> None:
    serial = run_sweep(TINY, tmp_path / "serial", workers=1)
    parallel = run_sweep(TINY, tmp_path / "dask", scheduler=cluster.scheduler_address)
    assert parallel.meta["engine"] == cluster.scheduler_address
    assert parallel.meta["workers"] == 2 and parallel.meta["computed"] == 16
    assert comparable(parallel.rows) == comparable(serial.rows)


def crash_once(marker: str, victim: str, task):
    """Evaluate ``task``; the first time ``victim`` comes up, kill this worker process."""
    if task.key == victim and not os.path.exists(marker):
        Path(marker).write_text(str(os.getpid()))
        os._exit(1)  # the worker dies mid-sweep: no exception, no result
    return evaluate_point(task)


def test_a_worker_killed_mid_sweep_loses_no_point(cluster, tmp_path: Path) -> None:
    serial = run_sweep(TINY, tmp_path / "serial", workers=1)
    marker = tmp_path / "killed"
    victim = serial.rows[5]["point"]
    done = run_sweep(
        TINY,
        tmp_path / "dask",
        scheduler=cluster.scheduler_address,
        evaluate=functools.partial(crash_once, str(marker), victim),
    )
    assert marker.exists()  # a worker did die
    keys = [row["point"] for row in done.rows]
    assert len(keys) == len(set(keys)) == 16
    assert all(not row["error"] for row in done.rows)
    assert comparable(done.rows) == comparable(serial.rows)
    results = list((tmp_path / "dask" / "cache").rglob("*.json"))
    assert len(results) == 16


def test_a_worker_with_another_rtgraph_is_refused(cluster) -> None:
    with distributed.Client(cluster) as client:
        check_worker_versions(client)  # the same checkout: accepted
        with pytest.raises(UsageError, match="workers run a different rtgraph") as caught:
            check_worker_versions(client, ours="0.0.1+000000000000")
    assert "environment must match" in caught.value.render()


def fail_on(victims: frozenset, task):
    """Evaluate ``task``, but raise a plain exception (a bug, not a refused point) for the
    ``victims``."""
    if task.key in victims:
        raise ValueError(f"no result for {task.key}")
    return evaluate_point(task)


def test_points_the_cluster_cannot_evaluate_leave_the_sweep_to_resume(
    cluster, tmp_path: Path
) -> None:
    keys = [row["point"] for row in run_sweep(TINY, tmp_path / "serial", workers=1).rows]
    victims = frozenset(keys[3:5])
    out = tmp_path / "dask"
    evaluate = functools.partial(fail_on, victims)
    with pytest.raises(SweepRunError, match="2 of 16 points failed on the cluster") as caught:
        run_sweep(TINY, out, scheduler=cluster.scheduler_address, evaluate=evaluate)
    assert "--resume" in caught.value.render()
    assert len(list((out / "cache").rglob("*.json"))) == 14
    done = run_sweep(TINY, out, scheduler=cluster.scheduler_address, resume=True)
    assert done.meta["computed"] == 2 and done.meta["cached"] == 14
    assert [row["point"] for row in done.rows] == keys
