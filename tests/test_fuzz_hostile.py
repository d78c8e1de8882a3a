"""Hostile programs: every limit of the front end holds, fast, in bounded memory.

A hypothesis generator writes programs an attacker or a careless generator would: deep
nesting, huge literals, long lines, many statements, chains of functions that each call the
next twice, giant param arrays, runaway loops, many errors, random byte mutations of the
models. Each example must end in a checked program or an :class:`RtgError` (never another
exception), within :data:`CPU_LIMIT` seconds of CPU and :data:`MEMORY_LIMIT` bytes of peak
Python allocation (``tracemalloc``, which also slows the run: the bounds are generous guards
against a runaway, not benchmarks). The default suite runs 5,000 examples; the soak one
(``-m soak``) 100,000. The hand-written corpus ``tests/hostile/frontend/*.rtg`` checks each
input's exact message; the limits that need big inputs are generated here.
"""

from __future__ import annotations

import os
import re
import time
import tracemalloc
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtgraph.errors import RtgError, RtgErrors, RtgSyntaxError
from rtgraph.frontend import MAX_SOURCE_BYTES, limits, load, parse
from rtgraph.frontend.emit import MAX_ERRORS
from rtgraph.frontend.lexer import MAX_TOKENS

ROOT = Path(__file__).parent.parent
MODELS = [p.read_bytes() for p in sorted((ROOT / "models").glob("*.rtg"))]
CORPUS = sorted((ROOT / "tests" / "hostile" / "frontend").glob("*.rtg"))

#: CPU seconds one example may take (a runaway takes minutes; a limit stops one in far less).
CPU_LIMIT = 1.0
#: Peak bytes Python may allocate for one example (a runaway takes gigabytes).
MEMORY_LIMIT = 256 * 2**20
#: One example in this many also has its peak memory traced (tracing is slow: it re-runs the
#: example several times slower, so this sample is most of the memory check's cost).
MEMORY_SAMPLE = 32
#: Examples per strategy in the default run: 5,000 in all (fewer of the strategies whose
#: programs are long).
DEFAULT_EXAMPLES = {
    "doubling": 700,
    "loops": 700,
    "literals": 700,
    "params": 700,
    "mutated_bytes": 700,
    "nesting": 500,
    "many_statements": 400,
    "long_lines": 600,
}
#: The soak run (``pytest -m soak``) runs this many times as many: 100,000 programs.
SLOW_FACTOR = 20

_PROGRAM = "program p(N = 4) {{\n    input x : f32[4]\n{}\n}}\n"

#: The step and operation limits these programs are written for (RTGRAPH_MAX_STEPS and
#: RTGRAPH_MAX_OPS, set for every test here): at the default limits, sized for programs of
#: millions of operations, a valid program near them takes seconds to check, not one.
MAX_STEPS = 100_000
MAX_OPS = 200_000


@pytest.fixture(autouse=True)
def _hostile_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(limits.STEPS, str(MAX_STEPS))
    monkeypatch.setenv(limits.OPS, str(MAX_OPS))


def _outcome(text: str) -> str:
    """'ok' or 'error'; any exception but RtgError propagates and fails the test."""
    try:
        parse(text, "hostile.rtg")
    except RtgError as e:
        for error in e.errors if isinstance(e, RtgErrors) else [e]:
            assert "internal error" not in error.message, error.render()
        e.render()  # rendering must not fail either
        return "error"
    return "ok"


def run_bounded(text: str) -> str:
    """:func:`_outcome` of ``text``, failing past :data:`CPU_LIMIT` or :data:`MEMORY_LIMIT`.

    The time is taken without ``tracemalloc``, which slows allocation-heavy parsing several
    times over; peak memory is then traced on a fixed sample of one example in
    :data:`MEMORY_SAMPLE` (chosen by the text's checksum, so a failure reproduces).
    """
    start = time.process_time()
    outcome = _outcome(text)
    cpu = time.process_time() - start
    assert cpu < CPU_LIMIT, f"{cpu:.2f} s of CPU for a {len(text):,}-character program"
    if zlib.crc32(text.encode("utf-8", "surrogatepass")) % MEMORY_SAMPLE == 0:
        tracemalloc.start()
        try:
            _outcome(text)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < MEMORY_LIMIT, f"{peak:,} bytes at peak"
    return outcome


# --- the generator -------------------------------------------------------------------------


def _chain(leaf: str, depth: int) -> str:
    """``f0 .. f{depth}``, each calling the one before twice: 2**depth leaves if inlined."""
    fns = [f"fn f0(x) {{ return {leaf} }}"]
    fns += [f"fn f{i}(x) {{ return f{i - 1}(f{i - 1}(x)) }}" for i in range(1, depth + 1)]
    return "\n".join(fns) + "\n"


@st.composite
def doubling(draw) -> str:
    leaf, arg = draw(
        st.sampled_from(
            [("x * 2", "1"), ("x + 1", "1"), ("relu(x)", "x"), ("x + 1", "x"), ("max(x, 3)", "2")]
        )
    )
    # Depth 16 on is refused before any call (2**17 - 1 steps). Depths 11 to 15 are valid
    # programs of 2,048 to 32,768 inlined leaves, which take seconds to check (~10 µs a call,
    # ~50 µs an op): correct, but not what a 1-second bound is about, so they are left out.
    depth = draw(st.one_of(st.integers(0, 10), st.integers(16, 70)))
    if arg != "x":
        arg = str(draw(st.integers(-(10**6), 10**6)))
    stmt = f"y = f{depth}({arg})" if arg == "x" else f"const c = f{depth}({arg})"
    return _chain(leaf, depth) + _PROGRAM.format("    " + stmt)


@st.composite
def loops(draw) -> str:
    # Small bounds multiply to at most 8**4 iterations (a valid program of 4,096 ops); a
    # large one passes the limits, which a loop's known bounds reveal before it runs. Between
    # them lie valid programs of up to 100,000 steps, which take a second or more to check.
    bound = st.one_of(st.integers(0, 8), st.integers(10**5, 10**15), st.just("N"))
    depth = draw(st.integers(1, 4))
    body = draw(st.sampled_from(["", "const c = i0 * 2", "y = relu(x)", "y = x + 1"]))
    text = body
    for level in reversed(range(depth)):
        text = f"for i{level} in 0..{draw(bound)} {{ {text} }}"
    return _PROGRAM.format("    " + text)


@st.composite
def nesting(draw) -> str:
    n = draw(st.one_of(st.integers(1, 300), st.integers(1, 4_000)))
    kind = draw(st.sampled_from(["paren", "neg", "call", "list", "for", "on", "unclosed"]))
    if kind == "paren":
        stmt = "y = " + "(" * n + "x" + ")" * n
    elif kind == "neg":
        stmt = "y = " + "-" * n + "x"
    elif kind == "call":
        stmt = "y = " + "relu(" * n + "x" + ")" * n
    elif kind == "list":
        stmt = "y = " + "[" * n + "]" * n
    elif kind == "for":
        levels = min(n, 1_200)  # past Python's recursion limit, which the checker survives
        stmt = "for i in 0..1 { " * levels + "}" * levels
    elif kind == "on":
        stmt = "stream s\n" + "on s { " * n + "}" * n
    else:
        stmt = "y = " + "(" * n
    return _PROGRAM.format("    " + stmt)


@st.composite
def literals(draw) -> str:
    digits = draw(st.one_of(st.integers(1, 40), st.integers(1, 20_000)))
    kind = draw(st.sampled_from(["int", "float", "hex", "exp", "dim", "mul", "funcs"]))
    if kind == "int":
        stmt = "const c = " + "9" * digits
    elif kind == "float":
        stmt = f"const c = 1.5e{draw(st.integers(-5000, 5000))}"
    elif kind == "hex":
        stmt = "const c = 0x" + "f" * digits
    elif kind == "exp":
        stmt = f"const c = exp({draw(st.integers(-(10**6), 10**6))})"
    elif kind == "dim":
        stmt = f"input z : f32[{draw(st.integers(0, 10**40))}, {draw(st.integers(-5, 10**20))}]"
    elif kind == "mul":
        stmt = "const c = " + " * ".join(["4294967296"] * draw(st.integers(1, 150)))
    else:
        fn = draw(st.sampled_from(["sqrt", "log", "rsqrt", "exp", "min", "max"]))
        stmt = f"const c = {fn}({draw(st.floats(allow_nan=False))}, 1)"
    return _PROGRAM.format("    " + stmt)


@st.composite
def params(draw) -> str:
    count = draw(st.one_of(st.integers(-3, 5000), st.integers(5000, 10**12)))
    dim = draw(st.one_of(st.integers(1, 64), st.integers(2**20, 2**40)))
    arrays = draw(st.integers(1, 4))
    stmts = [f"    param w{k}[{count}] : f32[{dim}, 4]" for k in range(arrays)]
    return _PROGRAM.format("\n".join(stmts))


@st.composite
def many_statements(draw) -> str:
    n = draw(st.one_of(st.integers(1, 100), st.integers(1, 1_000)))
    stmt = draw(
        st.sampled_from(
            [
                "y{i} = relu(x)",
                "y{i} = nope(x)",  # an error each: stops after MAX_ERRORS
                "buffer b{i} : bytes[16] at {addr}",
                "const c{i} = {i} * 3",
                "y{i} = undefined{i}",
                "input z{i} : f32[4]",
            ]
        )
    )
    lines = [stmt.format(i=i, addr=(i * 8)) for i in range(n)]
    return _PROGRAM.format("\n".join("    " + line for line in lines))


@st.composite
def long_lines(draw) -> str:
    n = draw(st.one_of(st.integers(1, 500), st.integers(1, 40_000)))
    kind = draw(st.sampled_from(["name", "sum", "comment", "string", "semicolons"]))
    if kind == "name":
        stmt = "y = " + "a" * n
    elif kind == "sum":
        stmt = "y = x" + " + x" * (n // 4)
    elif kind == "comment":
        stmt = "# " + "z" * n
    elif kind == "string":
        stmt = 'device "' + "d" * n + '"'
    else:
        stmt = ";" * n
    return _PROGRAM.format("    " + stmt)


@st.composite
def mutated_bytes(draw) -> str:
    data = bytearray(draw(st.sampled_from(MODELS)))
    for _ in range(draw(st.integers(1, 8))):
        i = draw(st.integers(0, max(0, len(data) - 1)))
        kind = draw(st.sampled_from(["flip", "insert", "delete", "repeat"]))
        if kind == "flip" and data:
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[i : i + draw(st.integers(1, 16))]
        else:  # repeat a slice many times: long lines, many statements, deep nesting
            j = min(len(data), i + draw(st.integers(1, 40)))
            data[i:i] = data[i:j] * draw(st.integers(1, 500))
    return data.decode("utf-8", errors="replace")


STRATEGIES = {
    "doubling": doubling(),
    "loops": loops(),
    "nesting": nesting(),
    "literals": literals(),
    "params": params(),
    "many_statements": many_statements(),
    "long_lines": long_lines(),
    "mutated_bytes": mutated_bytes(),
}


def _settings(examples: int):
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_hostile_programs_fail_fast_with_rtg_errors(name: str) -> None:
    @_settings(DEFAULT_EXAMPLES[name])
    @given(STRATEGIES[name])
    def check(text: str) -> None:
        run_bounded(text)

    check()


@pytest.mark.soak
@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_hostile_programs_many(name: str) -> None:
    @_settings(DEFAULT_EXAMPLES[name] * SLOW_FACTOR)
    @given(STRATEGIES[name])
    def check(text: str) -> None:
        run_bounded(text)

    check()


# --- the corpus: each hand-written input fails with its exact message ----------------------


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_hostile_corpus_fails_with_its_message(path: Path) -> None:
    expected = re.match(r"# message: (.*)", path.read_text())
    assert expected, f"{path.name} has no '# message:' line"
    start = time.process_time()
    with pytest.raises(RtgError) as info:
        load(path)
    assert time.process_time() - start < CPU_LIMIT
    assert info.value.message == expected[1]
    assert info.value.span is not None


# --- limits that need big inputs, generated here --------------------------------------------


def test_too_many_errors_stop_with_a_final_located_error() -> None:
    lines = "\n".join(f"    y{i} = nope(x)" for i in range(20_000))
    with pytest.raises(RtgErrors) as info:
        parse(_PROGRAM.format(lines), "many.rtg")
    errors = info.value.errors
    assert len(errors) == MAX_ERRORS + 1
    last = errors[-1]
    assert last.message == "too many errors; stopping"
    assert (last.span.line, last.span.col) == (MAX_ERRORS + 3, 5 + len(f"y{MAX_ERRORS} = "))
    assert last.hint == f"only the first {MAX_ERRORS} errors are reported; fix them and check again"
    assert info.value.render().splitlines()[-4].startswith(f"many.rtg:{MAX_ERRORS + 3}:")


def test_a_file_over_the_size_limit_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "big.rtg"
    with path.open("wb") as f:  # sparse: no disk is written
        f.truncate(MAX_SOURCE_BYTES + 1)
    start = time.process_time()
    with pytest.raises(RtgError) as info:
        load(path)
    assert time.process_time() - start < 0.1
    assert info.value.message == (
        f"cannot read {path}: it is {MAX_SOURCE_BYTES + 1:,} bytes, more than a program may "
        f"have ({MAX_SOURCE_BYTES:,})"
    )


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    path = tmp_path / "pipe.rtg"
    os.mkfifo(path)
    with pytest.raises(RtgError) as info:
        load(path)
    assert info.value.message == f"cannot read {path}: it is not a regular file"


def test_dev_zero_is_refused_without_reading() -> None:
    with pytest.raises(RtgError) as info:
        load("/dev/zero")
    assert info.value.message == "cannot read /dev/zero: it is not a regular file"


def test_a_string_over_the_size_limit_is_refused_where_it_passes() -> None:
    text = "#" * MAX_SOURCE_BYTES + "\nprogram p() { }"
    with pytest.raises(RtgSyntaxError) as info:
        parse(text, "long.rtg")
    assert info.value.message == f"the program is longer than {MAX_SOURCE_BYTES:,} characters"
    assert (info.value.span.line, info.value.span.col) == (1, MAX_SOURCE_BYTES + 1)


def test_too_many_tokens_are_refused_where_they_pass() -> None:
    per_line = 1_000
    line = "    y = " + "x+" * (per_line // 2)  # 4 tokens of "y = " and "x+" pairs
    text = "program p() {\n" + "\n".join([line] * (MAX_TOKENS // per_line + 2)) + "\n}"
    assert len(text) < MAX_SOURCE_BYTES
    with pytest.raises(RtgSyntaxError) as info:
        parse(text)
    assert info.value.message == f"the program has more than {MAX_TOKENS:,} tokens"
    assert info.value.span.line > MAX_TOKENS // (per_line + 3)


def test_the_step_limit_is_reached_step_by_step_when_no_bound_is_known() -> None:
    # The inner bound depends on the outer variable: nothing is known before the loops run.
    text = _PROGRAM.format("    for i in 0..100000 { for j in 0..i { } }")
    start = time.process_time()
    with pytest.raises(RtgError) as info:
        parse(text)
    assert time.process_time() - start < CPU_LIMIT * 3
    assert (
        info.value.message == f"the program runs more than {MAX_STEPS:,} statements when unrolled"
    )
