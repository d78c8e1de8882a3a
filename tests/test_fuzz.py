"""No input ever produces a Python traceback: only RtgError, or a checked program.

Random bytes and text, token-level mutations of the models (delete, duplicate, swap, replace),
and hand-picked pathological inputs (NUL, huge numbers, deep nesting, empty files, runaway
loops and inlining) all go through ``parse``/``load``.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtgraph.errors import RtgError, RtgErrors
from rtgraph.frontend import load, parse

MODELS = {p.stem: p.read_text() for p in sorted(Path(__file__).parent.parent.glob("models/*.rtg"))}
_TOKEN = re.compile(
    r'#[^\n]*|\n|"[^"\n]*"|0[xX][0-9a-fA-F_]+|\d[\d_]*(?:\.\d[\d_]*)?(?:[eE][+-]?\d+)?|\w+|\|>|\.\.|\S'
)
_FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _errors(e: RtgError) -> list[RtgError]:
    return e.errors if isinstance(e, RtgErrors) else [e]


def outcome(text: str, **options) -> str:
    """'ok' or 'error'; anything other than RtgError propagates and fails the test."""
    try:
        parse(text, "fuzz.rtg", **options)
    except RtgError as e:
        for error in _errors(e):
            assert "internal error" not in error.message, error.render()
            error.render()  # rendering itself must not fail either
        return "error"
    return "ok"


def tokens(text: str) -> list[str]:
    return [t for t in _TOKEN.findall(text) if not t.startswith("#")]


# --- random input --------------------------------------------------------------------------


@_FUZZ
@given(st.binary(max_size=300))
def test_random_bytes(data: bytes) -> None:
    outcome(data.decode("utf-8", errors="replace"))
    outcome(data.decode("latin-1"))


@_FUZZ
@given(st.binary(max_size=200))
def test_random_files(tmp_path_factory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "random.rtg"
    path.write_bytes(data)
    with contextlib.suppress(RtgError):
        load(path)


_SOURCE_CHARS = 'abcxyzSDNH_019.e+-*/%@()[]{},:;=|>"# \n\t'


@_FUZZ
@given(st.text(alphabet=_SOURCE_CHARS, max_size=200))
def test_random_text(text: str) -> None:
    outcome(text)


@_FUZZ
@given(st.text(max_size=120))
def test_random_unicode_inside_a_program(text: str) -> None:
    outcome("program p() {\n input x : f32[4]\n" + text + "\n}")


# --- mutations of the models ---------------------------------------------------------------

_REPLACEMENTS = [
    "x", "(", ")", "[", "]", "{", "}", ",", "=", "@", "|>", "-", "0", "1e999", "0x10",
    "99999999999999999999", "on", "record", "wait", "for", "fn", "return", "program", "\n",
    "relu", "kernel", "after", '"s"', "..", "f16", "bytes",
]  # fmt: skip


@st.composite
def mutated_model(draw) -> str:
    toks = tokens(MODELS[draw(st.sampled_from(sorted(MODELS)))])
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(toks) - 1))
        kind = draw(st.sampled_from(["delete", "duplicate", "swap", "replace"]))
        if kind == "delete":
            del toks[i]
        elif kind == "duplicate":
            toks.insert(i, toks[i])
        elif kind == "swap":
            j = draw(st.integers(0, len(toks) - 1))
            toks[i], toks[j] = toks[j], toks[i]
        else:
            toks[i] = draw(st.sampled_from(_REPLACEMENTS))
        if not toks:
            break
    return " ".join(toks)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_model(), st.sampled_from([None, 1 << 20, 1 << 34]))
def test_mutated_models(text: str, capacity: int | None) -> None:
    outcome(text, device_capacity=capacity)


def test_unmutated_token_streams_still_check() -> None:
    for name, text in MODELS.items():
        assert outcome(" ".join(tokens(text))) == "ok", name


# --- pathological inputs -------------------------------------------------------------------

_PROGRAM = "program p() {{\n input x : f32[4]\n {}\n}}"
_CHAIN = "".join(f"fn f{i}(x) {{ return f{i - 1}(x) }}\n" for i in range(1, 120))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "no program in this file"),
        ("\x00", "unexpected character"),
        ("program p() {\x00}", "unexpected character"),
        (_PROGRAM.format("y = 1e999"), "out of range"),
        (_PROGRAM.format("y = " + "9" * 100_000), "too large"),
        ("program p() { input x : f32[" + "1" + "0" * 40 + "] }", "too large"),
        ("program p() { input x : f32[1" + "0" * 18 + ", 10000] }", "more than any device"),
        ("program p(N = 3037000500) { input x : f32[N * N * N] }", "overflow"),
        (_PROGRAM.format("y = " + "(" * 10_000 + "x" + ")" * 10_000), None),
        (_PROGRAM.format("y = " + "(" * 10_000 + "x"), "expected"),
        (_PROGRAM.format("y = " + "-" * 10_000 + "x"), "nested too deeply"),
        (_PROGRAM.format("y = " + "relu(" * 3_000 + "x" + ")" * 3_000), "nested too deeply"),
        (_PROGRAM.format("y = " + "[" * 5_000 + "]" * 5_000), "nested too deeply"),
        (_PROGRAM.format("y = x" + " + x" * 2_000), "nested too deeply"),
        (_PROGRAM.format("for i in 0..1000000000000 { }"), "statements when unrolled"),
        ("fn f0(x) { return x }\n" + _CHAIN + _PROGRAM.format("y = f119(x)"), "nest more than"),
        (_PROGRAM.format("y = x" + "\n" * 100_000), None),
        ("\ufeffprogram p() { }", "unexpected character"),
    ],
)
def test_pathological_inputs(text: str, expected: str | None) -> None:
    if expected is None:
        assert outcome(text) == "ok"
        return
    with pytest.raises(RtgError) as info:
        parse(text)
    assert expected in info.value.render()
