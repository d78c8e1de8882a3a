"""The fast front end keeps its promises: one pass, lazy positions, limits sized for 1M ops.

``rtgraph.load``/``rtgraph.parse`` parse and check a program once, even when the device whose
memory bounds its tensors comes from the program's own ``device`` line, and report exactly
what checking without a device and then with one reported. Positions are offsets until a
message asks for a line and a column, and then they are the ones the tokens were written at.
The limits are module constants an environment variable overrides; a program of a million
operations parses. No test here asserts a time.
"""

from __future__ import annotations

import random
from dataclasses import fields, is_dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rtgraph
from rtgraph import frontend
from rtgraph.errors import CapacityError, DeviceSpecError, RtgError, Source, Span, UsageError
from rtgraph.frontend import checker, emit, lexer, limits
from rtgraph.frontend.parser import grammar, parse_module
from rtgraph.frontend.positions import Lines, SourceSpan

MODELS = sorted((Path(__file__).resolve().parent.parent / "models").glob("*.rtg"))
TOY = rtgraph.device("toy").memory.capacity


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often the front end parses and checks, counted."""
    counted = {"parse": 0, "check": 0}

    def counting(name: str, real):
        def wrapper(*args, **kwargs):
            counted[name] += 1
            return real(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(frontend, "parse_module", counting("parse", frontend.parse_module))
    monkeypatch.setattr(frontend, "check_module", counting("check", frontend.check_module))
    return counted


# --- parse once ----------------------------------------------------------------------------


@pytest.mark.parametrize("device", [None, "toy"])
def test_load_parses_and_checks_once(calls, device) -> None:
    program = rtgraph.load(MODELS[0].parent / "mlp.rtg", device=device)
    assert program.nodes
    assert calls == {"parse": 1, "check": 1}


def test_parse_reads_the_device_from_the_program_and_checks_once(calls) -> None:
    text = 'device "toy"\nprogram p(N = 4) { input x : f32[N, N]\n output y = relu(x) }'
    rtgraph.parse(text, N=8192)  # 256 MiB: fits the toy device's 1 GiB
    assert calls == {"parse": 1, "check": 1}
    with pytest.raises(CapacityError, match="larger than the device's memory"):
        rtgraph.parse(text, N=32768)  # 4 GiB: the toy device, named by the program, refuses
    # Refused for size: checked once more without the device, for the program's own mistakes.
    assert calls == {"parse": 2, "check": 3}


_TOO_BIG = """program p(N = 8) {
    input x : f32[N, N]
    y = reshape(x, [N, N, 1]) @ reshape(x, [N, 1, N])
    output z = relu(y)
}"""


def _rendered(call) -> str:
    with pytest.raises(RtgError) as info:
        call()
    return info.value.render()


def test_a_tensor_too_large_for_the_device_is_reported_as_by_two_passes() -> None:
    params = {"N": 1024}  # y: 4 GiB
    expected = _rendered(lambda: frontend.parse(_TOO_BIG, params=params, device_capacity=TOY))
    assert _rendered(lambda: rtgraph.parse(_TOO_BIG, params=params, device="toy")) == expected


def test_the_programs_own_mistakes_come_before_the_device_memory() -> None:
    text = _TOO_BIG.replace("output z = relu(y)", "output z = relu(y, axis = 1)")
    params = {"N": 1024}
    expected = _rendered(lambda: frontend.parse(text, params=params))  # no device: no size
    assert "relu" in expected and "device's memory" not in expected
    assert _rendered(lambda: rtgraph.parse(text, params=params, device="toy")) == expected


def test_a_device_that_does_not_load_comes_after_the_programs_mistakes() -> None:
    text = 'device "nonesuch"\nprogram p() { input x : f32[4]\n output y = relu(x) }'
    with pytest.raises(DeviceSpecError):
        rtgraph.parse(text)
    wrong = text.replace("relu(x)", "relu(w)")
    assert _rendered(lambda: rtgraph.parse(wrong)) == _rendered(lambda: frontend.parse(wrong))


def test_the_device_named_is_the_first_well_formed_device_line() -> None:
    text = 'device "toy"\ndevice "ascend-910b"\nprogram p() { }'
    module, _ = parse_module(text)
    assert checker.named_device(module) == "toy"
    module, _ = parse_module('device "no such/thing"\nprogram p() { }')
    assert checker.named_device(module) is None


# --- positions -----------------------------------------------------------------------------


def _spans(node, found: list) -> list:
    """Every span in an AST, depth first."""
    if isinstance(node, tuple | list):
        for item in node:
            _spans(item, found)
    elif is_dataclass(node) and not isinstance(node, Span):
        for f in fields(node):
            value = getattr(node, f.name)
            if isinstance(value, Span):
                found.append(value)
            else:
                _spans(value, found)
    return found


def _reference(text: str, start: int, end: int) -> tuple[int, int, int, int]:
    """Line and column of the first and past the last character, counted the slow way."""

    def at(offset: int) -> tuple[int, int]:
        line_start = text.rfind("\n", 0, offset) + 1
        return text.count("\n", 0, offset) + 1, offset - line_start + 1

    line, col = at(start)
    if end == start:
        return line, col, line, col + 1
    end_line, end_col = at(end - 1)
    return line, col, end_line, end_col + 1


@pytest.mark.parametrize("path", MODELS, ids=[p.stem for p in MODELS])
def test_every_span_of_every_model_is_where_its_text_is(path: Path) -> None:
    text = path.read_text()
    module, _ = parse_module(text, path.name)
    spans = _spans(module.items, [])
    assert len(spans) > 50
    for span in spans:
        assert isinstance(span, SourceSpan)
        coords = _reference(text, span.start_offset, span.end_offset)
        assert (span.line, span.col, span.end_line, span.end_col) == coords
        plain = Span(span.source, *coords)
        assert span == plain and plain == span and hash(span) == hash(plain)
        if span.line == span.end_line:
            assert span.text_line()[span.col - 1 : span.end_col - 1] == text[
                span.start_offset : span.end_offset
            ].rstrip("\r")


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab\n\r\t é", max_size=60), st.data())
def test_lines_find_the_line_and_column_of_any_offset(text: str, data) -> None:
    lines = Lines(Source("t", text))
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    span = lines.span(start, end)
    assert (span.line, span.col, span.end_line, span.end_col) == _reference(text, start, end)
    assert lines.line_col(start) == _reference(text, start, start)[:2]


def test_an_error_deep_in_a_long_program_is_located_exactly() -> None:
    body = "\n".join(f"    h{i} = relu(h{i - 1})" for i in range(1, 20_000))
    text = f"program p() {{\n    input h0 : f32[4]\n{body}\n    y = relu(h19999, axis = 1)\n}}"
    with pytest.raises(RtgError) as info:
        frontend.parse(text, "long.rtg")
    error = info.value
    assert (error.span.line, error.span.col) == (20_002, 22)
    assert error.render().splitlines()[0] == (
        "long.rtg:20002:22: error: unknown attribute 'axis' for relu"
    )


# --- limits --------------------------------------------------------------------------------


def test_the_default_limits_take_a_million_operations() -> None:
    assert emit.MAX_NODES >= 1_000_000
    assert checker.MAX_STEPS >= 2 * emit.MAX_NODES


def test_an_environment_variable_overrides_each_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    program = "program p() {\n input x : f32[4]\n for i in 0..100 { y = relu(x) }\n}"
    frontend.parse(program)
    monkeypatch.setenv(limits.OPS, "50")
    with pytest.raises(RtgError) as info:
        frontend.parse(program, "ops.rtg")
    assert info.value.message == "the program expands to more than 50 operations"
    assert (info.value.span.line, info.value.span.col) == (3, 2)  # the loop, before it runs
    monkeypatch.setenv(limits.OPS, "1_000")
    monkeypatch.setenv(limits.STEPS, "150")
    with pytest.raises(RtgError, match="runs more than 150 statements when unrolled"):
        frontend.parse(program)
    monkeypatch.setenv(limits.STEPS, "1000")
    monkeypatch.setenv(limits.TOKENS, "12")
    with pytest.raises(RtgError, match="the program has more than 12 tokens"):
        frontend.parse(program)
    monkeypatch.setenv(limits.TOKENS, "1000")
    monkeypatch.setenv(limits.SOURCE_BYTES, "40")
    with pytest.raises(RtgError, match="the program is longer than 40 characters"):
        frontend.parse(program)


@pytest.mark.parametrize("value", ["many", "0", "-5", "1.5"])
def test_a_malformed_limit_is_a_usage_error(monkeypatch: pytest.MonkeyPatch, value) -> None:
    monkeypatch.setenv(limits.OPS, value)
    with pytest.raises(UsageError) as info:
        frontend.parse("program p() { }")
    assert info.value.message == f"RTGRAPH_MAX_OPS={value!r} is not a positive whole number"
    assert info.value.hint is not None and "unset it" in info.value.hint


def _tokens(text: str) -> list[lexer.Tok]:
    g = grammar()
    return lexer.tokenize(text, g.punctuation, g.keywords)[:-1]  # without $END


def test_too_many_tokens_are_found_before_a_later_syntax_error_is(monkeypatch) -> None:
    # The tokens are counted as the parser reads them, yet the error is the one counting them
    # all first would give: the limit passed at the 13th token, not the syntax error after it.
    text = "program p() {\n y = relu(x) + relu(x) + relu(x)\n ) \n}"
    with pytest.raises(RtgError, match="found"):
        frontend.parse(text)
    past = next(t for t in _tokens(text)[12:] if t.type != "_SEP")
    monkeypatch.setenv(limits.TOKENS, "12")
    with pytest.raises(RtgError) as info:
        frontend.parse(text)
    assert info.value.message == "the program has more than 12 tokens"
    assert (info.value.span.line, info.value.span.col) == (past.line, past.column) == (2, 14)


def test_the_token_limit_counts_like_the_tokens_listed(monkeypatch) -> None:
    text = "program p() {\n input x : f32[4]\n y = relu(x)\n}"
    listed = _tokens(text)
    monkeypatch.setenv(limits.TOKENS, str(len(listed)))
    frontend.parse(text)
    monkeypatch.setenv(limits.TOKENS, str(len(listed) - 1))
    with pytest.raises(RtgError) as info:
        frontend.parse(text)
    last = listed[-1]
    assert last.value == "}"
    assert (info.value.span.line, info.value.span.col) == (last.line, last.column) == (4, 1)


def _million_op_program(width: int = 1_000, repeats: int = 1_000, seed: int = 0) -> str:
    """A loop of ``repeats`` layers of ``width`` synthetic kernels, each after one to three
    kernels of the layer before: ``width * (repeats + 1)`` operations."""
    rng = random.Random(seed)
    units = ("cube", "vector", "dma")
    lines = [f"program big(N = {repeats}) {{"]
    lines += [f"    c{j} = kernel(unit = vector, us = 1)" for j in range(width)]
    lines.append("    for i in 0..N {")
    for j in range(width):
        after = ", ".join(f"c{k}" for k in sorted(rng.sample(range(width), rng.randint(1, 3))))
        unit, us = rng.choice(units), rng.randint(1, 8) / 4
        lines.append(f"        k{j} = kernel(unit = {unit}, us = {us}, after = [{after}])")
    lines += [f"        c{j} = k{j}" for j in range(width)]
    lines += ["    }", "}"]
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_a_program_of_a_million_operations_parses() -> None:
    text = _million_op_program()
    program = rtgraph.parse(text, "big.rtg")
    assert len(program.nodes) == 1_001_000
    last = program.nodes[-1]
    assert last.op == "kernel" and last.output.startswith("i=999/k")
    assert program.tensors[last.output].span.line == 2 + 1_000 + 1_000  # k999, in the loop
