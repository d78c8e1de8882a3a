"""Loop iterations replayed from a recorded one make exactly what checking each one makes.

The checker replays the iterations of a ``for`` body that never reads its loop variable
(:mod:`rtgraph.frontend.loop_replay`). Every test here checks a program twice — as the
checker runs it, and with replay switched off so every iteration is checked in full — and
compares the programs name for name: tensors (in order, every field) and nodes. Tests of
programs the replay must take also count that it did, so a replay that silently never runs
cannot pass them.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rtgraph
from rtgraph.errors import RtgError
from rtgraph.frontend import loop_replay


def _check(text: str, *, replay: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[object, int]:
    """The program (or the error messages) and how many iterations were replayed."""
    counted = {"n": 0}
    original = loop_replay.LoopReplay.replay

    def counting(self, prefix: str) -> bool:
        if not replay:
            return False
        done = original(self, prefix)
        counted["n"] += done
        return done

    with monkeypatch.context() as m:
        m.setattr(loop_replay.LoopReplay, "replay", counting)
        try:
            program = rtgraph.parse(text, "loop.rtg")
        except RtgError as e:
            errors = getattr(e, "errors", [e])
            return [(x.message, x.span and (x.span.line, x.span.col)) for x in errors], counted["n"]
    return (list(program.tensors.items()), program.nodes, program.outputs), counted["n"]


def _same(text: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """Assert replayed == fully checked; returns the number of replayed iterations."""
    replayed, n = _check(text, replay=True, monkeypatch=monkeypatch)
    full, none = _check(text, replay=False, monkeypatch=monkeypatch)
    assert none == 0
    assert replayed == full
    return n


CARRIED = """
program p(N = 6) {{
    input a: f32[4, 8]
    param w: f32[8, 8]
    x = relu(a)
    t = kernel(unit = vector, us = 1)
    for i in 0..N {{
{body}
    }}
    output x
}}
"""


def test_a_loop_of_real_ops_with_temporaries_and_constants_is_replayed(monkeypatch):
    body = """
        y = relu(x @ w) + x * 2.0
        z = exp(y - 1.5)
        x = y + z
        t = kernel(unit = cube, us = 2, after = [t])
"""
    assert _same(CARRIED.format(body=body), monkeypatch) == 6 - 2


def test_fused_blocks_and_kernel_footprints_in_a_loop_are_replayed(monkeypatch):
    text = """
program p(N = 6) {
    input a: f32[4, 8]
    buffer B : bytes[4096]
    x = relu(a)
    t = kernel(unit = vector, us = 1, writes = [B])
    for i in 0..N {
        x = fused { s = x * 0.5
                    return relu(s) }
        t = kernel(unit = dma, us = 2, reads = [B], writes = [B], after = [t])
    }
    output x
}
"""
    assert _same(text, monkeypatch) == 6 - 2


def test_a_body_that_reads_its_loop_variable_is_checked_in_full(monkeypatch):
    body = """
        y = x * (i + 1)
        x = y
"""
    assert _same(CARRIED.format(body=body), monkeypatch) == 0


def test_a_carried_value_whose_type_changes_is_checked_in_full(monkeypatch):
    text = """
program p(N = 5) {
    input a: f32[2, 8]
    x = relu(a)
    for i in 0..N {
        x = concat(x, a, axis = 0)
    }
    output x
}
"""
    assert _same(text, monkeypatch) == 0


def test_a_body_calling_a_function_is_checked_in_full(monkeypatch):
    text = """
fn step(v) {
    h = relu(v)
    return h * 0.5
}
program p(N = 5) {
    input a: f32[4, 4]
    x = relu(a)
    for i in 0..N {
        x = step(x)
    }
    output x
}
"""
    assert _same(text, monkeypatch) == 0


def test_nested_loops_and_a_carried_value_rebound_to_an_outer_tensor(monkeypatch):
    text = """
program p(N = 4, M = 3) {
    input a: f32[4, 4]
    x = relu(a)
    y = relu(a)
    for i in 0..N {
        for j in 0..M {
            y = y + x
        }
        x = relu(y)
        y = relu(a)
    }
    output x
}
"""
    assert _same(text, monkeypatch) > 0


def test_a_name_rebound_only_in_an_inner_loop_is_carried_by_the_outer_one(monkeypatch):
    text = """
program p(N = 5, M = 2) {
    input a: f32[4, 4]
    x = relu(a)
    y = exp(a)
    for i in 0..N {
        for j in 0..M {
            x = x + a
            y = relu(a)
        }
    }
    output x
    output y
}
"""
    assert _same(text, monkeypatch) > 0


def test_errors_in_a_loop_are_the_same_with_or_without_replay(monkeypatch):
    body = """
        y = x @ a
        x = y
"""
    replayed, _ = _check(CARRIED.format(body=body), replay=True, monkeypatch=monkeypatch)
    full, _ = _check(CARRIED.format(body=body), replay=False, monkeypatch=monkeypatch)
    assert isinstance(replayed, list) and replayed == full


def test_the_operation_limit_is_reported_where_the_full_check_reports_it(monkeypatch):
    monkeypatch.setenv("RTGRAPH_MAX_OPS", "40")
    body = """
        x = relu(x)
"""
    text = CARRIED.format(body=body).replace("N = 6", "N = 100")
    replayed, _ = _check(text, replay=True, monkeypatch=monkeypatch)
    full, _ = _check(text, replay=False, monkeypatch=monkeypatch)
    assert isinstance(replayed, list) and replayed == full
    assert "more than 40 operations" in replayed[0][0]


def test_two_loops_with_one_variable_name_keep_distinct_names(monkeypatch):
    text = """
program p(N = 8) {
    input a: f32[4, 4]
    x = relu(a)
    for i in 3..N {
        x = relu(x)
    }
    for i in 0..N {
        x = exp(x)
    }
    output x
}
"""
    assert _same(text, monkeypatch) > 0


# --- random kernel DAGs and op chains ------------------------------------------------------
_STATEMENTS = st.sampled_from(
    [
        "k{n} = kernel(unit = cube, us = 1, after = [{a}])",
        "k{n} = kernel(unit = vector, us = 0.5, after = [{a}, {b}])",
        "c{c} = kernel(unit = dma, us = 2, after = [{a}])",
        "v{n} = relu({m}) + x0",
        "v{n} = {m} * 3.0 - {m}",
        "x{c} = exp({m})",
    ]
)


@st.composite
def loop_programs(draw) -> str:
    lines = []
    for n, template in enumerate(draw(st.lists(_STATEMENTS, min_size=1, max_size=8))):
        tokens = ["c0", "c1", *(f"k{j}" for j in range(n) if f"k{j} =" in "\n".join(lines))]
        values = ["x0", "x1", *(f"v{j}" for j in range(n) if f"v{j} =" in "\n".join(lines))]
        lines.append(
            template.format(
                n=n,
                m=draw(st.sampled_from(values)),
                a=draw(st.sampled_from(tokens)),
                b=draw(st.sampled_from(tokens)),
                c=draw(st.integers(0, 1)),
            )
        )
    body = "\n".join(f"        {line}" for line in lines)
    return f"""
program p(N = {draw(st.integers(1, 6))}) {{
    input a: f32[4, 4]
    x0 = relu(a)
    x1 = exp(a)
    c0 = kernel(unit = cube, us = 1)
    c1 = kernel(unit = vector, us = 1)
    for i in 0..N {{
{body}
    }}
    output x0
}}
"""


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(loop_programs())
def test_random_loop_bodies_check_alike_with_and_without_replay(monkeypatch, text):
    _same(text, monkeypatch)
