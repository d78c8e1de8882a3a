"""The runtime API under threads: per-thread current device and stream, one lock for the rest.

As in ``torch.cuda``, the current device and each device's current stream belong to the
calling thread; the recorded programs, allocators, event pools and emulated runs are shared
and guarded by the runtime's lock. The stress test drives 8 threads × 50 small programs at
once (each thread on its own streams and tensors: a copy in, a few ops, a copy out) and checks
every result bit for bit against NumPy. Before the lock every run of it failed: a program
snapshot taken mid-append ("input 'h2d147' supplied but program … declares no such input",
"task ids must be 0..n-1 in order", ``IndexError``), a ``KeyError`` inside the caching
allocator, and one thread's ``set_stream`` moving every thread's work.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

import numpy as np
import pytest

from rtgraph import runtime as rt
from rtgraph.runtime import ops, state
from rtgraph.stream_program import Launch

THREADS = 8
PROGRAMS = 50
#: How long a test waits for its threads: far beyond a run (seconds), only against a hang.
JOIN_TIMEOUT_S = 300.0


@pytest.fixture(autouse=True)
def fresh():
    rt.reset()
    rt.set_device("toy")
    yield
    rt.reset()
    rt.set_device(rt.DEFAULT_DEVICE)


def _in_threads(work: Callable[[int], object], n: int = THREADS) -> list[object]:
    """Run ``work(i)`` in ``n`` threads started together; its results, or the first error."""
    results: list[object] = [None] * n
    errors: list[BaseException] = []
    start = threading.Barrier(n)

    def body(i: int) -> None:
        try:
            start.wait()
            results[i] = work(i)
        except BaseException as e:  # reported by the main thread below
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,), name=f"worker{i}") for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_TIMEOUT_S)
    assert not any(t.is_alive() for t in threads), "a thread hung (deadlock?)"
    if errors:
        raise errors[0]
    return results


def _expected(a: np.ndarray) -> np.ndarray:
    """What each small program computes, in NumPy (the same f32 operations, in order)."""
    return np.maximum(a * a - a, np.float32(0))


def _programs(i: int, device: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """Thread ``i``'s 50 programs on ``device``: pairs (result, NumPy's answer).

    Each program copies its input in from pinned memory (asynchronous) on the thread's copy
    stream, runs mul, sub and relu on its compute stream after an event from the copy stream,
    and copies the result out to pinned memory (asynchronous). Halfway, the thread also reads a
    value synchronously, so an emulator run happens while the other threads record.
    """
    rt.set_device(device)
    rng = np.random.default_rng(1000 + i)
    copy, compute = rt.Stream(), rt.Stream()
    got: list[tuple[np.ndarray, np.ndarray]] = []
    outs = []
    for k in range(PROGRAMS):
        a = rng.standard_normal((4, 8), dtype=np.float32)
        with rt.stream(copy):
            x = rt.from_numpy(a).pin_memory().to_device(non_blocking=True)
            ready = copy.record_event()
        compute.wait_event(ready)
        with rt.stream(compute):
            assert rt.current_stream() == compute and rt.get_device_name() == device
            z = ops.relu(x * x - x)
            out = rt.empty((4, 8), device="cpu", pin_memory=True)
            out.copy_(z, non_blocking=True)
            if k == PROGRAMS // 2:
                got.append((z.numpy(), _expected(a)))  # synchronous: runs the emulator
        x.record_stream(compute)  # read on compute, allocated on copy: PyTorch's rule
        outs.append((out, _expected(a)))
    compute.synchronize()  # one run lands every copy out of this thread
    return got + [(out.numpy(), want) for out, want in outs]


def _stress(devices: tuple[str, ...] = ("toy",)) -> None:
    """8 threads × 50 programs at once; every result is checked bit for bit."""
    results = _in_threads(lambda i: _programs(i, devices[i % len(devices)]))
    checked = 0
    for pairs in results:
        assert isinstance(pairs, list) and len(pairs) == PROGRAMS + 1
        for got, want in pairs:
            np.testing.assert_array_equal(got, want)
            checked += 1
    assert checked == THREADS * (PROGRAMS + 1)
    for device in devices:
        rt.synchronize(device)
        assert rt.races(device) == [], rt.describe_races(device)


# --- the stress test -----------------------------------------------------------------------


def test_many_threads_each_get_every_result_right():
    for _ in range(2):
        rt.reset()
        _stress()


def test_threads_on_two_devices_at_once():
    _stress(("toy", "ascend-910b"))


@pytest.mark.soak
def test_the_stress_test_passes_twenty_times_in_a_row():
    for _ in range(20):
        rt.reset()
        _stress()


# --- what is per thread ----------------------------------------------------------------------


def _in_thread(work: Callable[[], object]) -> object:
    return _in_threads(lambda _: work(), n=1)[0]


def test_a_new_thread_starts_on_the_default_device_and_stream():
    s = rt.Stream()
    rt.set_stream(s)  # main: toy (the fixture), stream s
    toy = rt.current_device()

    def fresh() -> tuple[str, bool]:
        return rt.get_device_name(), rt.current_stream(toy) == rt.default_stream(toy)

    assert _in_thread(fresh) == (rt.DEFAULT_DEVICE, True)
    assert rt.current_device() == toy and rt.current_stream() == s


def test_a_threads_set_stream_and_set_device_do_not_change_anothers():
    mine = rt.Stream()
    rt.set_stream(mine)
    toy = rt.current_device()

    def elsewhere() -> tuple[int, int]:
        rt.set_device("toy")
        theirs = rt.Stream()
        rt.set_stream(theirs)
        rt.set_device("ascend-310p")
        return theirs.id, rt.current_stream(toy).id

    theirs, seen = _in_thread(elsewhere)
    assert seen == theirs != mine.id
    assert rt.current_device() == toy and rt.current_stream() == mine


def test_a_stream_block_restores_only_its_own_thread():
    main_stream = rt.Stream()
    entered, leave = threading.Event(), threading.Event()

    def inside() -> int:
        with rt.stream(rt.Stream(device="toy")) as s:
            entered.set()
            leave.wait(JOIN_TIMEOUT_S)
            assert rt.current_stream() == s
        return rt.current_stream("toy").id

    worker = threading.Thread(target=lambda: results.append(inside()))
    results: list[int] = []
    with rt.stream(main_stream):
        worker.start()
        assert entered.wait(JOIN_TIMEOUT_S)
        assert rt.current_stream() == main_stream  # the worker's block changed nothing here
        leave.set()
        worker.join(JOIN_TIMEOUT_S)
        assert rt.current_stream() == main_stream
    assert results == [0] and rt.current_stream().id == 0


# --- what is shared --------------------------------------------------------------------------


def test_an_event_hands_a_result_from_one_thread_to_another():
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    handoff: queue.Queue = queue.Queue()

    def producer() -> None:
        rt.set_device("toy")
        s = rt.Stream()
        with rt.stream(s):
            y = ops.scale(rt.tensor(a), 2.0)
            handoff.put((y, s.record_event()))

    def consumer() -> np.ndarray:
        rt.set_device("toy")
        y, done = handoff.get(timeout=JOIN_TIMEOUT_S)
        s = rt.Stream()
        s.wait_event(done)
        with rt.stream(s):
            return ops.relu(y).numpy()

    results = _in_threads(lambda i: producer() if i == 0 else consumer(), n=2)
    np.testing.assert_array_equal(results[1], np.maximum(a * 2, 0))
    assert rt.races() == []


def test_two_threads_on_one_stream_interleave_whole_calls_in_lock_order():
    shared = rt.Stream()
    steps = 40

    def chain(i: int) -> tuple[list[int], np.ndarray]:
        with rt.stream(shared):
            y = rt.tensor(np.full((4, 8), i, np.float32))
            ids = []
            for _ in range(steps):
                y = ops.scale(y, 1.5)
                ids.append(y.producer)
            return ids, y.numpy()

    results = _in_threads(chain, n=2)
    program = rt.recorded_program()
    stream_of = {c.task: c.stream for c in program.commands if isinstance(c, Launch)}
    for i, (ids, value) in enumerate(results):
        assert ids == sorted(ids)  # each thread's tasks in its own order
        np.testing.assert_array_equal(value, _scaled(i, steps))
    scaled = {t.id for t in program.tasks if t.op == "scale" and stream_of[t.id] == shared.id}
    assert scaled == set(results[0][0]) | set(results[1][0])  # none lost, none elsewhere
    assert rt.races() == []


def _scaled(start: float, steps: int) -> np.ndarray:
    y = np.full((4, 8), start, np.float32)
    for _ in range(steps):
        y = y * np.float32(1.5)
    return y


def test_a_tensor_dying_on_another_thread_never_waits_for_the_lock():
    x = rt.tensor(np.ones((64, 64), np.float32))
    assert rt.memory_allocated() > 0
    holder = [x]
    del x
    dropped = threading.Thread(target=holder.clear)  # the last reference dies in the worker
    with state.LOCK:  # as if another thread were running the emulator
        dropped.start()
        dropped.join(10.0)  # a guard against a hang: the free itself takes microseconds
        assert not dropped.is_alive(), "a finalizer waited for the runtime's lock"
    assert rt.memory_allocated() == 0  # freed at the next call into the runtime
