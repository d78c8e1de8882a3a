"""The static check of a cluster's transfers (rtgraph.stream_program.transfers): compiled
programs of every parallel mode pass; hand-broken ones — a send dropped, a tag changed or
reused, a receive of another dtype or size, two ranks' transfers swapped into a cycle — are
refused, located and named."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_parallel_place import CHAIN

import rtgraph
from rtgraph.cluster_api import compile_cluster
from rtgraph.emulator.cluster import run_cluster as run_ranks
from rtgraph.errors import DeadlockError, StreamProgramError
from rtgraph.stream_program import Launch, Operand
from rtgraph.stream_program.transfers import check_transfers

DP = """device "toy"
program dp(B = 8, D = 4) {
    input x : f32[B, D]
    param w : f32[D, D]
    h = x @ w
    output y = h
    output g = allreduce(transpose(x, [1, 0]) @ h)
}
"""


def programs(source: str, **how) -> list:
    return list(compile_cluster(rtgraph.parse(source), cluster="toy", **how).programs)


def link(program, op=None):
    return [t for t in program.tasks if t.unit == "link" and (op is None or t.op == op)]


def with_task(programs, rank, task):
    """``programs`` with rank ``rank``'s task ``task.id`` replaced by ``task``."""
    p = programs[rank]
    tasks = list(p.tasks)
    tasks[task.id] = task
    out = list(programs)
    out[rank] = replace(p, tasks=tasks)
    return out


def refused(programs) -> StreamProgramError:
    with pytest.raises(StreamProgramError) as caught:
        check_transfers(programs)
    return caught.value


def test_compiled_placement_passes():
    check_transfers(programs(CHAIN))


def test_a_dropped_send_leaves_its_recv_unmatched():
    ps = programs(CHAIN)
    send = link(ps[1], "send")[0]  # rank 1 sends a to rank 2
    ps = with_task(ps, 1, replace(send, op="relu", unit="vector", attrs={}))
    err = refused(ps)
    assert "rank 2's task" in err.message and "(recv) receives from rank 1" in err.message
    assert f"tag {send.attrs['tag']}" in err.message
    assert "rank 1 sends no message to rank 2" in err.message
    assert err.span is not None and err.span.line == 6  # where a is made: its recv on rank 2
    assert "peer 2" in err.hint


def test_a_changed_tag_is_a_recv_without_a_send():
    ps = programs(CHAIN)
    recv = link(ps[2], "recv")[-1]
    ps = with_task(ps, 2, replace(recv, attrs={**recv.attrs, "tag": 99}))
    err = refused(ps)
    assert f"rank 2's task {recv.id} '{recv.name}' (recv)" in err.message
    assert "tag 99" in err.message


def test_a_send_nobody_receives():
    ps = programs(CHAIN)
    recv = link(ps[1], "recv")[0]
    ps = with_task(ps, 1, replace(recv, op="relu", unit="vector", attrs={}))
    err = refused(ps)
    assert "rank 0's task" in err.message and "(send) sends to rank 1" in err.message
    assert "rank 1 receives no message from rank 0" in err.message


def test_a_tag_used_twice():
    ps = programs(DP, data_parallel=2)
    first, second = link(ps[0], "send")[:2]
    ps = with_task(ps, 0, replace(second, attrs={**second.attrs, "tag": first.attrs["tag"]}))
    err = refused(ps)
    assert f"tag {first.attrs['tag']} is used twice for messages from rank 0 to rank 1" in (
        err.message
    )
    assert f"task {first.id} '{first.name}'" in err.message
    assert f"task {second.id} '{second.name}'" in err.message


def test_a_recv_of_another_dtype_names_the_collective():
    ps = programs(DP, data_parallel=2)
    recv = link(ps[1], "recv")[0]
    out = recv.output
    ps = with_task(ps, 1, replace(recv, output=replace(out, dtype="f16")))
    err = refused(ps)
    assert "disagrees on its dtype in the collective that makes 'g'" in err.message
    assert f"rank 1's task {recv.id} '{recv.name}' (recv) receives" in err.message
    assert "of f32" in err.message and "of f16" in err.message
    assert err.span is not None and err.span.line == 7  # output g = allreduce(…)


def test_a_recv_reduce_of_another_size_names_the_collective_and_step():
    ps = programs(DP, data_parallel=2)
    recv = link(ps[0], "recv_reduce")[0]
    out: Operand = recv.output
    ps = with_task(ps, 0, replace(recv, output=replace(out, shape=(out.shape[0] + 1,))))
    err = refused(ps)
    assert "disagrees on its size in the collective that makes 'g' (step 0)" in err.message
    n = out.shape[0] * 4
    assert f"sends {n} bytes of f32" in err.message
    assert f"receives {n + 4} bytes of f32" in err.message


def swap_launches(program, a: int, b: int):
    """``program`` with the launches of tasks ``a`` and ``b`` swapped in host order."""
    cmds = list(program.commands)
    i = next(k for k, c in enumerate(cmds) if isinstance(c, Launch) and c.task == a)
    j = next(k for k, c in enumerate(cmds) if isinstance(c, Launch) and c.task == b)
    cmds[i], cmds[j] = replace(cmds[i], task=b), replace(cmds[j], task=a)
    return replace(program, commands=cmds)


def test_two_ranks_receiving_before_they_send_is_a_cycle():
    ps = programs(DP, data_parallel=2)
    # a ring allreduce of two: each rank sends its chunk, then receives the other's — swapped
    # on both ranks, each waits for a send the other issues only after its own receive
    for r in (0, 1):
        send, recv = link(ps[r], "send")[0], link(ps[r], "recv_reduce")[0]
        ps[r] = swap_launches(ps[r], send.id, recv.id)
    err = refused(ps)
    assert err.message.startswith("a cycle of cross-device waits over ranks 0, 1: ")
    for r in (0, 1):
        send, recv = link(ps[r], "send")[0], link(ps[r], "recv_reduce")[0]
        assert f"rank {r}'s task {send.id} '{send.name}' (send)" in err.message
        assert f"rank {r}'s task {recv.id} '{recv.name}' (recv_reduce)" in err.message
    assert err.span is not None and err.span.line == 7


def test_swapping_one_rank_only_still_finishes():
    """One rank receiving first is no cycle: the other's send does not wait for anything."""
    ps = programs(DP, data_parallel=2)
    send, recv = link(ps[0], "send")[0], link(ps[0], "recv_reduce")[0]
    ps[0] = swap_launches(ps[0], send.id, recv.id)
    check_transfers(ps)


def test_a_peer_outside_the_ranks():
    ps = programs(CHAIN)
    send = link(ps[0], "send")[0]
    ps = with_task(ps, 0, replace(send, attrs={**send.attrs, "peer": 7}))
    err = refused(ps)
    assert "needs a 'peer' among the other ranks (0..2)" in err.message and "peer 7" in err.message


LAYERS = """device "toy"
program layers(B = 16, D = 8, L = 4) {
    input  x    : f32[B, D]
    param  w[L] : f32[D, D]
    t = x
    for l in 0..L { t = relu(t @ w[l]) }
    output y = t
}
"""


MLP = """program mlp(S = 32, D = 16, F = 64) {
    input  x  : f32[S, D]
    param  w1 : f32[D, F]
    param  w2 : f32[F, D]
    output y = gelu(x @ w1) @ w2
}
"""


@pytest.mark.parametrize(
    ("source", "how"),
    [
        (DP, {"data_parallel": 2}),
        (DP, {"data_parallel": 4}),
        (DP, {"data_parallel": 8}),
        (LAYERS, {"pipeline": 2, "micro_batches": 4, "schedule": "gpipe"}),
        (LAYERS, {"pipeline": 4, "micro_batches": 8, "schedule": "1f1b"}),
        (LAYERS, {"pipeline": 4, "micro_batches": 4, "schedule": "gpipe"}),
        (MLP, {"tensor_parallel": 2}),
        (MLP, {"tensor_parallel": 4}),
    ],
)
def test_every_compiled_parallel_mode_passes(source, how):
    ps = programs(source, **how)
    assert any(link(p) for p in ps)
    check_transfers(ps)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=8))
def test_any_placement_of_a_chain_passes(devices):
    lines = ['device "toy"', "program p() {", "    input x : f32[4, 4]", "    t0 = relu(x)"]
    for k, d in enumerate(devices):
        lines.append(f"    device[{d}] {{ t{k + 1} = t{k} @ t{k} + t{k // 2} }}")
    lines += [f"    output y = t{len(devices)}", "}"]
    check_transfers(programs("\n".join(lines)))


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_the_check_finds_a_cycle_exactly_when_the_emulator_deadlocks(data):
    """Each rank's transfers launched in a random order (the other commands where they were):
    the static check refuses the programs if and only if running them deadlocks."""
    n = data.draw(st.sampled_from([2, 3, 4]), label="ranks")
    source = DP.replace("B = 8", "B = 24")
    compiled = compile_cluster(rtgraph.parse(source), cluster="toy", data_parallel=n)
    ps = list(compiled.programs)
    for r, p in enumerate(ps):
        ids = [t.id for t in link(p)]
        order = data.draw(st.permutations(ids), label=f"rank {r}")
        swap = dict(zip(ids, order, strict=True))
        cmds = [
            replace(c, task=swap[c.task]) if isinstance(c, Launch) and c.task in swap else c
            for c in p.commands
        ]
        ps[r] = replace(p, commands=cmds)
    try:
        check_transfers(ps)
        refused_statically = None
    except StreamProgramError as err:
        refused_statically = err
    try:
        run_ranks(ps, compiled.cluster, numerics=False)  # the emulator alone, unchecked
        deadlocked = None
    except DeadlockError as err:
        deadlocked = err
    assert (refused_statically is None) == (deadlocked is None), (refused_statically, deadlocked)
    if refused_statically is not None:
        assert "a cycle of cross-device waits" in refused_statically.message
