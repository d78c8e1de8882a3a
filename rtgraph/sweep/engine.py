"""Where a sweep's points run: serially in this process, or as Dask tasks on a cluster.

The default is a local ``dask.distributed`` cluster sized to the machine — one worker process
per CPU, one thread each (the emulator is pure Python: threads would share one interpreter
lock). ``scheduler="tcp://host:8786"`` runs on an existing cluster instead, unchanged;
``workers=1`` runs every point here, one after another, for debugging (no Dask at all).

Workers import rtgraph themselves, so their environment must match the client's: before any
point is sent, every worker's :func:`~rtgraph.sweep.cache.code_version` is compared with this
process's, and a difference is an error naming the worker. Results are written to the cache as
they complete, so a sweep killed at any point keeps what it finished. A worker that dies
mid-point is replaced by its nanny and the scheduler reruns the point elsewhere (up to
``distributed.scheduler.allowed-failures`` times, 3 by default); the table is assembled from
the cache afterwards, one row per point.

``distributed`` is an optional dependency (the ``sweep`` extra) imported here only, and only
when a cluster is used.
"""

from __future__ import annotations

import importlib.util
import logging
import multiprocessing
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rtgraph.errors import RtgError, UsageError
from rtgraph.sweep.cache import ResultCache, code_version
from rtgraph.sweep.evaluate import PointTask, evaluate_point

Evaluate = Callable[[PointTask], dict]


class SweepRunError(RtgError):
    """Points the cluster could not evaluate (their workers kept dying, or a bug): the sweep
    stays incomplete, and --resume computes just those."""


@dataclass(frozen=True)
class EngineRun:
    """What a run did: points computed and found in the cache, and where they ran."""

    computed: int
    cached: int
    engine: str  # "serial", "local cluster" or the scheduler's address
    workers: int
    dashboard: str | None = None


def run_points(
    tasks: Sequence[PointTask],
    cache: ResultCache,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    progress: bool = False,
    evaluate: Evaluate = evaluate_point,
) -> EngineRun:
    """Evaluate every task whose result is not in ``cache`` and store each result there."""
    if workers is not None and workers < 1:
        raise UsageError(f"--workers {workers}: at least 1")
    if workers is not None and scheduler is not None:
        raise UsageError("--workers and --scheduler exclude each other", hint="give one")
    unique = {t.cache_key: t for t in tasks}  # two points may be one computation
    missing = [t for key, t in unique.items() if cache.get(key) is None]
    cached = len(unique) - len(missing)
    if workers == 1:
        for task in missing:
            cache.put(task.cache_key, evaluate(task))
        return EngineRun(len(missing), cached, "serial", 1)
    return _run_on_dask(missing, cached, cache, workers, scheduler, progress, evaluate)


def _run_on_dask(missing, cached, cache, workers, scheduler, progress, evaluate) -> EngineRun:
    try:
        # distributed is optional (the `sweep` extra): only a parallel sweep needs it.
        import dask
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise UsageError(
            "a parallel sweep needs Dask: pip install 'rtgraph[sweep]'",
            hint="or run serially with --workers 1",
        ) from None
    # The dashboard needs bokeh; without it Dask would serve an empty page at the link.
    dashboard = scheduler is not None or importlib.util.find_spec("bokeh") is not None
    if scheduler is not None:
        cluster, client = None, _connect(Client, scheduler)
        engine = scheduler
    else:
        with dask.config.set(_LOCAL_WORKERS):
            cluster = _local_cluster(LocalCluster, workers, dashboard)
        client, engine = Client(cluster), "local cluster"
    try:
        check_worker_versions(client)
        count = len(client.scheduler_info(n_workers=-1)["workers"])
        by_key = {f"rtgraph-point-{t.cache_key}": t for t in missing}
        futures = client.map(evaluate, list(by_key.values()), key=list(by_key), pure=False)
        bar = _show_progress(futures) if progress and futures else None
        failed = []
        for future in as_completed(futures):
            try:
                cache.put(by_key[future.key].cache_key, future.result())
            except Exception as e:  # a worker lost too often (KilledWorker), or a bug
                failed.append(f"{type(e).__name__}: {e}")
        if bar is not None:
            bar.join(timeout=5)
        if failed:
            raise SweepRunError(
                f"{len(failed)} of {len(futures)} points failed on the cluster "
                f"(first: {failed[0]}); the {len(futures) - len(failed)} others are cached",
                hint="rerun with --resume to compute only the failed points",
            )
        link = client.dashboard_link if dashboard else None
        return EngineRun(len(missing), cached, engine, count, link)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


#: How rtgraph's own local cluster runs its workers (a cluster at --scheduler is its owner's):
#:
#: * forked where the platform can, not spawned: a forked worker starts in ~0.2 s with this
#:   process's rtgraph already imported — exactly the client's code — where a spawned one
#:   imports Dask and rtgraph again (~1.4 s on a quiet 2-core machine, several seconds on a
#:   loaded one: a tenth of a 200-point sweep's parallel time). The nanny forks from its event
#:   loop while the main thread waits on it holding no lock;
#: * with the statistical profiler off: it samples the running thread every 10 ms, pure-Python
#:   points pay for it, and a sweep never shows the profile. Nannies pass both on.
_LOCAL_WORKERS = {
    "distributed.worker.profile.enabled": False,
    "distributed.worker.multiprocessing-method": (
        "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    ),
}


def _local_cluster(cluster_type, workers: int | None, dashboard: bool):
    """One worker process per CPU (or ``workers``), one thread each, logs quiet."""
    return cluster_type(
        n_workers=workers or os.cpu_count() or 1,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0" if dashboard else None,
        silence_logs=logging.ERROR,
    )


def _connect(client_type, address: str):
    try:
        return client_type(address, timeout="10s")
    except OSError as e:
        raise UsageError(
            f"cannot reach the Dask scheduler at {address}: {e}",
            hint="start one with `dask scheduler` and `dask worker ADDRESS`, or omit "
            "--scheduler for a local cluster",
        ) from None


def check_worker_versions(client, ours: str | None = None) -> None:
    """Refuse to run when a worker's rtgraph differs from ``ours`` (by default this machine's
    :func:`~rtgraph.sweep.cache.code_version` — the version and a hash of the code — read
    again now, as the workers have just read theirs: a checkout edited since this process
    started is compared as it is on disk, which is what the workers import)."""
    ours = ours or code_version.__wrapped__()
    try:
        theirs = client.run(code_version)
    except ImportError as e:
        raise UsageError(
            f"a Dask worker cannot import rtgraph: {e}",
            hint="install the same rtgraph on every worker (docs/sweeps.md)",
        ) from None
    wrong = {w: v for w, v in sorted(theirs.items()) if v != ours}
    if wrong:
        shown = ", ".join(f"{w} runs rtgraph {v}" for w, v in wrong.items())
        raise UsageError(
            f"workers run a different rtgraph from this client ({ours}): {shown}",
            hint="the environment must match: install the same rtgraph checkout on every "
            "worker and restart them",
        )


def _show_progress(futures) -> threading.Thread:
    """Dask's text progress bar, on its own thread (it blocks until every future is done)."""
    # distributed is optional (see _run_on_dask); the bar writes to standard output.
    from distributed import progress

    thread = threading.Thread(target=progress, args=(futures,), daemon=True)
    thread.start()
    return thread
