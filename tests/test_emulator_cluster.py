"""Many devices in one timeline: transfers timed on the links by hand, real numerics, errors.

Every program here is built by hand (``ProgramBuilder``) and runs on the shipped ``toy`` cluster
(8 toy devices joined all-to-all by HCCS links of 1e9 B/s and α = 1 µs, the link unit launching
in 0 µs) or ``toy-2x4`` (two nodes of four; between nodes a transfer crosses its device's NIC up
and the other's down, 2.5e8 B/s and 2.5 µs each), with the host's ioctl free — so every rank's
tasks are in its queues at t = 0 and the times are the links' alone.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from emulator_programs import ProgramBuilder, contiguous, nbytes
from hypothesis import given, settings
from hypothesis import strategies as st
from test_trace import check_trace

from rtgraph.cluster import ClusterSpec
from rtgraph.cluster.load import load_cluster
from rtgraph.emulator import run
from rtgraph.emulator.cluster import run_cluster
from rtgraph.errors import DeadlockError, DeviceError, UsageError
from rtgraph.ir.data import generate
from rtgraph.reports.cluster_trace import cluster_trace

ALPHA = 1.0  # µs
B = 1e9  # bytes/s


def toy_cluster(name: str = "toy", vector_launch_us: float | None = None) -> ClusterSpec:
    """A shipped toy cluster (``toy``: 8 toy devices, all-to-all HCCS of 1e9 B/s and 1 µs, link
    launch 0) with the host's ioctl free (and the vector unit's launch changed if given)."""
    base = load_cluster(name)
    device = base.device
    units = dict(device.units)
    if vector_launch_us is not None:
        units["vector"] = dataclasses.replace(units["vector"], launch_us=vector_launch_us)
    host = dataclasses.replace(device.host, ioctl_us=0.0)
    return dataclasses.replace(base, device=dataclasses.replace(device, host=host, units=units))


def send(b: ProgramBuilder, stream: int, src, peer: int, tag: int, name: str | None = None) -> int:
    return b._task(
        stream,
        name=name or f"send{tag}",
        op="send",
        unit="link",
        inputs=(src,),
        output=None,
        reads=(src.extent,),
        writes=(),
        bytes_read=nbytes(src),
        attrs={"peer": peer, "tag": tag},
    )


def recv(b: ProgramBuilder, stream: int, dst, peer: int, tag: int, *, reduce: bool = False,
         name: str | None = None) -> int:  # fmt: skip
    attrs = {"peer": peer, "tag": tag}
    if reduce:
        attrs["reduce"] = "sum"
    return b._task(
        stream,
        name=name or f"recv{tag}",
        op="recv_reduce" if reduce else "recv",
        unit="link",
        inputs=(dst,) if reduce else (),
        output=dst,
        reads=(dst.extent,) if reduce else (),
        writes=(dst.extent,),
        bytes_written=nbytes(dst),
        attrs=attrs,
    )


def chunk(x, j: int, c: int):
    """Elements ``[j*c, (j+1)*c)`` of the 1-D operand ``x``."""
    return contiguous(x.tensor, x.offset + j * c * x.strides[0], (c,), x.dtype)


def ring_allreduce(n: int, elements: int, dtype: str = "f32") -> list:
    """Rank r's program: x (a param) allreduced in place by a ring — n − 1 reduce-scatter steps
    (send chunk r−k to r+1, recv_reduce chunk r−k−1 from r−1) and n − 1 allgather steps (send
    chunk r+1−k, recv chunk r−k) on one in-order link stream — then x copied out."""
    c = elements // n
    programs = []
    for r in range(n):
        b = ProgramBuilder(1, name=f"ring{r}")
        x = b.param("x", (elements,), dtype)
        nxt, prev = (r + 1) % n, (r - 1) % n
        for k in range(n - 1):
            send(b, 0, chunk(x, (r - k) % n, c), nxt, tag=k)
            recv(b, 0, chunk(x, (r - k - 1) % n, c), prev, tag=k, reduce=True)
        for k in range(n - 1):
            send(b, 0, chunk(x, (r + 1 - k) % n, c), nxt, tag=n + k)
            recv(b, 0, chunk(x, (r - k) % n, c), prev, tag=n + k)
        b.d2h(0, x, "y")
        programs.append(b.build())
    return programs


def link_span(result) -> tuple[float, float]:
    """The first start and last end of any link task on any rank."""
    recs = [t for d in result.devices for t in d.tasks if t.unit == "link"]
    return min(t.start for t in recs), max(t.end for t in recs)


# --- timing, by hand ------------------------------------------------------------------------
@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_allreduce_takes_2_n_minus_1_steps_of_alpha_plus_chunk_time(n):
    S = 4000 * n  # bytes: 1000 f32 a chunk
    result = run_cluster(ring_allreduce(n, S // 4), toy_cluster(), numerics=False)
    assert link_span(result) == (0.0, 2 * (n - 1) * (ALPHA + S / (n * B) * 1e6))
    assert len(result.transfers) == 2 * n * (n - 1)
    assert all(t.end - t.start == ALPHA + 4.0 for t in result.transfers)


def test_two_transfers_on_one_link_direction_take_twice_as_long():
    def programs(k: int) -> list:
        b0, b1 = ProgramBuilder(2, name="src"), ProgramBuilder(2, name="dst")
        for s in range(k):
            x = b0.tensor(f"x{s}", (1000,))
            send(b0, s, x, peer=1, tag=s)
            recv(b1, s, b1.tensor(f"y{s}", (1000,)), peer=0, tag=s)
        return [b0.build(), b1.build()]

    alone = run_cluster(programs(1), toy_cluster(), numerics=False)
    both = run_cluster(programs(2), toy_cluster(), numerics=False)
    assert [t.end for t in alone.transfers] == [ALPHA + 4.0]
    assert [t.end for t in both.transfers] == [ALPHA + 8.0, ALPHA + 8.0]
    (link,) = both.links
    assert (link.direction, link.bytes, link.busy_us, link.transfers) == (
        "hccs0-1 d0→d1",
        8000,
        8.0,
        2,
    )
    assert link.utilization == 8000 / (B * both.makespan_us / 1e6)


def test_opposite_directions_do_not_share():
    b0, b1 = ProgramBuilder(2, name="a"), ProgramBuilder(2, name="b")
    send(b0, 0, b0.tensor("x", (1000,)), peer=1, tag=0)
    recv(b0, 1, b0.tensor("y", (1000,)), peer=1, tag=1)
    send(b1, 0, b1.tensor("x", (1000,)), peer=0, tag=1)
    recv(b1, 1, b1.tensor("y", (1000,)), peer=0, tag=0)
    result = run_cluster([b0.build(), b1.build()], toy_cluster(), numerics=False)
    assert [t.end for t in result.transfers] == [ALPHA + 4.0, ALPHA + 4.0]
    assert len(result.links) == 2


def test_transfers_between_nodes_share_each_nic_direction_and_are_re_timed():
    # toy-2x4: 0 → 4 crosses nic0 d0→switch0 and nic4 switch1→d4, 0 → 5 nic0 up and nic5 down;
    # α = 5 µs. Both flow on nic0's up direction at 2.5e8 / 2 B/s until the 2 000-byte one is in
    # (16 µs: t = 21); then the other's last 2 000 bytes go at 2.5e8 B/s (8 µs: t = 29).
    bs = [ProgramBuilder(2, name=f"r{r}") for r in range(6)]
    for dst, elements in ((4, 1000), (5, 500)):
        send(bs[0], dst - 4, bs[0].tensor(f"x{dst}", (elements,)), peer=dst, tag=dst)
        recv(bs[dst], 0, bs[dst].tensor("y", (elements,)), peer=0, tag=dst)
    result = run_cluster([b.build() for b in bs], toy_cluster("toy-2x4"), numerics=False)
    assert [(t.dst, t.start, t.end) for t in result.transfers] == [(5, 0.0, 21.0), (4, 0.0, 29.0)]
    assert result.transfers[1].hops == ("nic0 d0→switch0", "nic4 switch1→d4")
    up = next(link for link in result.links if link.direction == "nic0 d0→switch0")
    assert (up.bytes, up.busy_us, up.transfers) == (6000, 24.0, 2)


def chain_programs() -> list:
    """Rank 0 sends x to rank 1, which computes 5 µs (synthetic) and forwards x to rank 2,
    which computes 5 µs."""
    b0, b1, b2 = (ProgramBuilder(1, name=f"r{r}") for r in range(3))
    x = b0.param("x", (1000,))
    send(b0, 0, x, peer=1, tag=0)
    buf = b1.tensor("buf", (1000,))
    recv(b1, 0, buf, peer=0, tag=0)
    b1.kernel(0, 5.0, name="work1")
    send(b1, 0, buf, peer=2, tag=1)
    out = b2.tensor("out", (1000,))
    recv(b2, 0, out, peer=1, tag=1)
    b2.kernel(0, 5.0, name="work2")
    b2.d2h(0, out, "y")
    return [b0.build(), b1.build(), b2.build()]


def test_send_recv_compute_chain_across_three_devices():
    # rank 0's send: 0 → delivered at α + 4000 B / 1e9 = 5; rank 1's recv ends then, work1
    # (launch 1 + 5) 5 → 11, its send 11 → 16; rank 2's recv ends at 16, work2 16 → 22.
    x = np.arange(1000, dtype=np.float32)
    result = run_cluster(chain_programs(), toy_cluster(), params=[{"x": x}, None, None])
    r0, r1, r2 = result.devices
    assert (r0.task("send0").start, r0.task("send0").end) == (0.0, 5.0)
    assert (r1.task("recv0").start, r1.task("recv0").end) == (0.0, 5.0)
    assert (r1.task("work1").start, r1.task("work1").end) == (5.0, 11.0)
    assert (r1.task("send1").start, r1.task("send1").end) == (11.0, 16.0)
    assert (r2.task("recv1").end, r2.task("work2").start, r2.task("work2").end) == (16, 16, 22)
    assert [(t.src, t.dst, t.start, t.end) for t in result.transfers] == [
        (0, 1, 0.0, 5.0),
        (1, 2, 11.0, 16.0),
    ]
    np.testing.assert_array_equal(result.outputs[2]["y"], x)
    assert result.makespan_us == r2.makespan_us > 22.0  # + its d2h
    assert r1.utilization["link"] == pytest.approx((5.0 + 5.0) / (8 * r1.makespan_us))


def test_a_recv_issued_after_delivery_completes_after_its_launch():
    cluster = toy_cluster(vector_launch_us=0.0)
    b0, b1 = ProgramBuilder(1, name="a"), ProgramBuilder(1, name="b")
    send(b0, 0, b0.tensor("x", (1000,)), peer=1, tag=0)
    b1.kernel(0, 20.0)
    recv(b1, 0, b1.tensor("y", (1000,)), peer=0, tag=0)
    result = run_cluster([b0.build(), b1.build()], cluster, numerics=False)
    rec = result.devices[1].task("recv0")
    assert (rec.start, rec.end) == (20.0, 20.0)  # comm launch 0: at once, the bytes are in


# --- numerics ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_ring_allreduce_equals_the_plans_order_of_additions(dtype):
    n, c = 4, 257
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal(n * c).astype(np.float16 if dtype == "f16" else np.float32)
          for _ in range(n)]  # fmt: skip
    result = run_cluster(
        ring_allreduce(n, n * c, dtype), toy_cluster(), params=[{"x": x} for x in xs]
    )
    expected = np.empty_like(xs[0])
    for j in range(n):  # chunk j starts at rank j; rank j+i adds its own to what arrives
        part = slice(j * c, (j + 1) * c)
        acc = xs[j][part]
        for i in range(1, n):
            acc = xs[(j + i) % n][part] + acc
        expected[part] = acc
    for r in range(n):
        np.testing.assert_array_equal(result.outputs[r]["y"], expected)
    if dtype == "f32":
        np.testing.assert_allclose(expected, np.sum(xs, axis=0), rtol=1e-5, atol=1e-5)


#: Up to four transfers as (source rank, hops around the ring to the destination, f32 elements).
TRANSFER_SPECS = st.lists(
    st.tuples(st.integers(0, 3), st.integers(1, 3), st.integers(1, 3000)), min_size=1, max_size=4
)


@settings(max_examples=25, deadline=None)
@given(TRANSFER_SPECS)
def test_transfers_deliver_their_bytes_no_faster_than_the_links_allow(specs):
    """Random transfers, all issued at t = 0: each arrives intact, takes at least α + bytes/B,
    and no link direction carries more than its bandwidth over its busy time."""
    n = 4
    builders = [ProgramBuilder(4, name=f"r{r}") for r in range(n)]
    for k, (src, hop, elements) in enumerate(specs):
        dst = (src + hop) % n
        send(builders[src], k, builders[src].param(f"x{k}", (elements,)), peer=dst, tag=k)
        y = builders[dst].tensor(f"y{k}", (elements,))
        recv(builders[dst], k, y, peer=src, tag=k)
        builders[dst].d2h(k, y, f"out{k}")
    result = run_cluster([b.build() for b in builders], toy_cluster(), seed=3)
    assert sorted(t.tag for t in result.transfers) == list(range(len(specs)))
    for t in result.transfers:
        elements = specs[t.tag][2]
        assert t.end - t.start >= ALPHA + 4 * elements / B * 1e6 - 1e-9
        sent = generate(f"x{t.tag}", (elements,), "f32", 3, param=True)
        np.testing.assert_array_equal(result.outputs[t.dst][f"out{t.tag}"], sent)
    for link in result.links:
        assert link.bytes / B * 1e6 <= link.busy_us + 1e-9


# --- errors -----------------------------------------------------------------------------------
def test_run_refuses_communication_tasks():
    programs = chain_programs()
    with pytest.raises(UsageError, match="need a cluster") as info:
        run(programs[0], toy_cluster().device_spec)
    assert "run_cluster" in info.value.hint


def deadlock(builders: list[ProgramBuilder]) -> tuple[str, object]:
    """The DeadlockError's message and partial result of running the built programs."""
    with pytest.raises(DeadlockError) as info:
        run_cluster([b.build() for b in builders], toy_cluster(), numerics=False)
    return info.value.message, info.value.result  # type: ignore[attr-defined]


def test_a_recv_never_sent_is_a_deadlock_naming_rank_task_peer_and_tag():
    b0, b1 = ProgramBuilder(1, name="a"), ProgramBuilder(1, name="b")
    b0.kernel(0, 1.0)
    recv(b1, 0, b1.tensor("y", (10,)), peer=0, tag=5, name="lonely")
    msg, result = deadlock([b0, b1])
    assert "rank 1's task 0 'lonely' (recv) waits for rank 0's send (tag 5)" in msg
    assert "never sends" in msg
    assert result.devices[0].tasks[0].end == 2.0  # the partial result


def test_a_cycle_of_cross_device_waits_names_every_device_and_task():
    bs = [ProgramBuilder(1, name=f"r{r}") for r in range(3)]
    for r, b in enumerate(bs):  # each rank first waits for its left neighbour, then sends right
        recv(b, 0, b.tensor("y", (10,)), peer=(r - 1) % 3, tag=r, name=f"wait{r}")
        send(b, 0, b.tensor("x", (10,)), peer=(r + 1) % 3, tag=(r + 1) % 3, name=f"give{r}")
    msg, _ = deadlock(bs)
    assert "a cycle of cross-device waits over ranks 0, 1, 2" in msg
    for r in range(3):
        assert f"rank {r}'s task 0 'wait{r}' (recv)" in msg
        assert f"(task 1 'give{(r - 1) % 3}'), held behind task 0 'wait{(r - 1) % 3}'" in msg


def test_a_cycle_through_an_event_wait_is_found():
    # rank 0: stream 0 receives tag 0 then records e0; stream 1 waits e0, then sends tag 1.
    # rank 1 receives tag 1, then sends tag 0: each rank's send is behind its own recv.
    b0, b1 = ProgramBuilder(2, name="a"), ProgramBuilder(1, name="b")
    recv(b0, 0, b0.tensor("y", (10,)), peer=1, tag=0, name="in0")
    b0.record(0, 0)
    b0.wait(1, 0)
    send(b0, 1, b0.tensor("x", (10,)), peer=1, tag=1, name="out1")
    recv(b1, 0, b1.tensor("y", (10,)), peer=0, tag=1, name="in1")
    send(b1, 0, b1.tensor("x", (10,)), peer=0, tag=0, name="out0")
    msg, _ = deadlock([b0, b1])
    assert "a cycle of cross-device waits over ranks 0, 1" in msg
    assert "rank 0's task 0 'in0' (recv) waits for rank 1's send (tag 0) (task 1 'out0'), " in msg
    assert "held behind task 0 'in1'" in msg
    assert "rank 1's task 0 'in1' (recv) waits for rank 0's send (tag 1) (task 1 'out1'), " in msg
    assert "held behind task 0 'in0'" in msg


def test_a_cycle_through_a_host_sync_is_found():
    # rank 0's host syncs the device after its recv, so its send is never submitted.
    b0, b1 = ProgramBuilder(1, name="a"), ProgramBuilder(1, name="b")
    recv(b0, 0, b0.tensor("y", (10,)), peer=1, tag=0, name="in0")
    b0.sync("device")
    send(b0, 0, b0.tensor("x", (10,)), peer=1, tag=1, name="out1")
    recv(b1, 0, b1.tensor("y", (10,)), peer=0, tag=1, name="in1")
    send(b1, 0, b1.tensor("x", (10,)), peer=0, tag=0, name="out0")
    msg, _ = deadlock([b0, b1])
    assert "a cycle of cross-device waits over ranks 0, 1" in msg
    assert "(task 1 'out1'), held behind task 0 'in0'" in msg


def test_a_fault_that_stops_a_rank_is_reported_on_its_rank_not_as_a_deadlock():
    b0, b1 = ProgramBuilder(1, name="a"), ProgramBuilder(1, name="b")
    b0.kernel(0, 1.0, name="boom")
    send(b0, 0, b0.tensor("x", (10,)), peer=1, tag=0)
    recv(b1, 0, b1.tensor("y", (10,)), peer=0, tag=0)
    programs = [b0.build(), b1.build()]
    cluster = toy_cluster()
    stop = dataclasses.replace(
        cluster.device, scheduler=dataclasses.replace(cluster.device.scheduler, failure_mode="stop")
    )
    with pytest.raises(
        DeviceError, match=r"error: rank 0: task 0 'boom' \(kernel\) .* injected fault"
    ):
        run_cluster(programs, dataclasses.replace(cluster, device=stop), faults=[[0], []])


def test_a_message_received_twice_is_located():
    b0, b1 = ProgramBuilder(1, name="a"), ProgramBuilder(2, name="b")
    send(b0, 0, b0.tensor("x", (10,)), peer=1, tag=0)
    recv(b1, 0, b1.tensor("y", (10,)), peer=0, tag=0, name="first")
    recv(b1, 1, b1.tensor("z", (10,)), peer=0, tag=0, name="second")
    with pytest.raises(DeviceError, match="received twice: by task 0 'first' and by task 1"):
        run_cluster([b0.build(), b1.build()], toy_cluster(), numerics=False)


def test_a_message_nobody_receives_is_located():
    b0, b1 = ProgramBuilder(1, name="a"), ProgramBuilder(1, name="b")
    send(b0, 0, b0.tensor("x", (10,)), peer=1, tag=3, name="orphan")
    b1.kernel(0, 1.0)
    with pytest.raises(DeviceError, match=r"task 0 .orphan. sent a message to rank 1 .tag 3. that"):
        run_cluster([b0.build(), b1.build()], toy_cluster(), numerics=False)


def test_a_payload_of_another_size_or_dtype_names_both_tasks():
    for shape, dtype in (((11,), "f32"), ((10,), "f16")):
        b0, b1 = ProgramBuilder(1, name="a"), ProgramBuilder(1, name="b")
        send(b0, 0, b0.tensor("x", (10,)), peer=1, tag=0, name="tx")
        recv(b1, 0, b1.tensor("y", shape, dtype), peer=0, tag=0, name="rx")
        with pytest.raises(DeviceError) as info:
            run_cluster([b0.build(), b1.build()], toy_cluster())
        assert "task 0 'tx' sends f32[10]" in info.value.message
        assert f"task 0 'rx' receives {dtype}{list(shape)}" in info.value.message


def test_a_peer_outside_the_ranks_is_refused_before_running():
    b0 = ProgramBuilder(1, name="a")
    send(b0, 0, b0.tensor("x", (10,)), peer=2, tag=0)
    with pytest.raises(Exception, match=r"needs a .peer. among the other ranks .0..0."):
        run_cluster([b0.build()], toy_cluster())


# --- the trace --------------------------------------------------------------------------------
def test_cluster_trace_has_a_process_per_device_and_a_lane_per_link_direction():
    result = run_cluster(ring_allreduce(4, 4000), toy_cluster(), numerics=False)
    trace = cluster_trace(result)
    check_trace(trace)
    events = trace["traceEvents"]
    names = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names >= {"rank 0 host", "rank 0 device", "rank 3 device", "links"}
    links_pid = next(
        e["pid"] for e in events if e["name"] == "process_name" and e["args"]["name"] == "links"
    )
    lanes = {
        e["args"]["name"] for e in events if e["name"] == "thread_name" and e["pid"] == links_pid
    }
    assert lanes == {"hccs0-1 d0→d1", "hccs1-2 d1→d2", "hccs2-3 d2→d3", "hccs0-3 d3→d0"}
    slices = [e for e in events if e["ph"] == "X" and e["pid"] == links_pid]
    assert len(slices) == len(result.transfers) == 24
    pids = {e["pid"] for e in events if e["ph"] == "X"}
    assert len(pids) == 4 + 1  # the hardware of each rank (no host slices: ioctls are free)


def test_cluster_trace_packs_transfers_sharing_a_direction_and_shows_every_hop():
    bs = [ProgramBuilder(2, name=f"r{r}") for r in range(6)]
    for dst in (4, 5):
        send(bs[0], dst - 4, bs[0].tensor(f"x{dst}", (1000,)), peer=dst, tag=dst)
        recv(bs[dst], 0, bs[dst].tensor("y", (1000,)), peer=0, tag=dst)
    result = run_cluster([b.build() for b in bs], toy_cluster("toy-2x4"))
    trace = cluster_trace(result)
    check_trace(trace)
    events = trace["traceEvents"]
    links_pid = 2 * 6
    lanes = {
        e["tid"]: e["args"]["name"]
        for e in events
        if e["name"] == "thread_name" and e["pid"] == links_pid
    }
    on = sorted(
        (lanes[e["tid"]], e["args"]["tag"])
        for e in events
        if e["ph"] == "X" and e["pid"] == links_pid
    )
    assert on == [
        ("nic0 d0→switch0", 4),
        ("nic0 d0→switch0 #1", 5),
        ("nic4 switch1→d4", 4),
        ("nic5 switch1→d5", 5),
    ]
