"""Every diagnostic of the front end, one bad program each (tests/bad/*.rtg).

Each file starts with its expectations::

    # expect: 9:9: unknown op 'sofmax'       (one line per error, in source order)
    # hint: did you mean 'softmax'?           (optional: the first error's hint)
    # params: SS=1024                         (optional: parameters given by the caller)
    # capacity: 1048576                       (optional: the device's memory in bytes)

and the test checks the rendered report: ``file:line:col: error: message``, the caret under
the column, and the hint.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rtgraph.errors import (
    SHOWN_WIDTH,
    CapacityError,
    CheckError,
    DTypeError,
    RtgError,
    RtgErrors,
    RtgSyntaxError,
    ShapeError,
    Source,
    Span,
    highlight,
)
from rtgraph.frontend import load, parse

BAD = Path(__file__).parent / "bad"
FILES = sorted(BAD.glob("*.rtg"))


def _header(text: str) -> tuple[list[tuple[int, int, str]], str | None, dict, int | None]:
    expected, hint, params, capacity = [], None, {}, None
    for line in text.splitlines():
        if m := re.fullmatch(r"# expect: (\d+):(\d+): (.*)", line):
            expected.append((int(m[1]), int(m[2]), m[3]))
        elif m := re.fullmatch(r"# hint: (.*)", line):
            hint = m[1]
        elif m := re.fullmatch(r"# params: (.*)", line):
            params = {k.strip(): int(v) for k, v in (kv.split("=") for kv in m[1].split(","))}
        elif m := re.fullmatch(r"# capacity: (\d+)", line):
            capacity = int(m[1])
    return expected, hint, params, capacity


def _errors(e: RtgError) -> list[RtgError]:
    return e.errors if isinstance(e, RtgErrors) else [e]


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_bad_program_reports_expected_errors(path: Path) -> None:
    text = path.read_text()
    expected, hint, params, capacity = _header(text)
    assert expected, f"{path.name} has no '# expect:' line"
    with pytest.raises(RtgError) as info:
        load(path, params or None, device_capacity=capacity)
    rendered = info.value.render()
    heads = [line for line in rendered.splitlines() if ": error: " in line]
    assert heads == [f"{path}:{line}:{col}: error: {msg}" for line, col, msg in expected]
    errors = _errors(info.value)
    for error, (line, col, _) in zip(errors, expected, strict=True):
        assert (error.span.line, error.span.col) == (line, col)
        _, shown, caret_row = error.render().splitlines()[:3]
        lines = text.splitlines()
        source_line = lines[line - 1] if line <= len(lines) else ""  # an error at end of file
        if len(source_line) <= SHOWN_WIDTH:
            assert caret_row.index("^") == 4 + col - 1, "the caret sits under the column"
        else:  # a long line is shown as a window: the caret still marks the same character
            assert shown[caret_row.index("^")] == source_line[col - 1]
    if hint is not None:
        assert errors[0].hint == hint
        assert f"hint: {hint}" in rendered


# The diagnostics the language reference promises, each with its own bad program.
REQUIRED = [
    "syntax_expected_paren",
    "syntax_expected_expression",
    "unknown_op",
    "undefined_name",
    "rebound_name",
    "wrong_argument_count",
    "wrong_argument_kind",
    "wrong_attribute_kind",
    "unknown_attribute",
    "shape_mismatch",
    "dtype_mismatch",
    "shape_not_positive",
    "wait_never_recorded",
    "record_outside_on",
    "barrier_outside_on",
    "unknown_stream",
    "unknown_event",
    "recursion",
    "tensor_larger_than_device",
    "buffer_overlap",
    "buffer_outside_memory",
    "undeclared_parameter",
    "kernel_writes_tensor",
    "duplicate_function",
    "duplicate_program",
    "no_program",
    "nested_too_deeply",
    "multiple_errors",
    "device_path",
    "too_many_errors",
    "inlining_doubles",
    "loop_too_many_operations",
    "param_array_too_long",
    "param_array_too_large",
    "too_many_declarations",
    "tensor_too_many_dimensions",
    "event_index_out_of_range",
    "event_index_not_constant",
    "event_array_needs_index",
    "to_device_outside_on",
    "to_device_after_use",
    "to_host_not_output",
    "fused_not_fusible",
    "fused_without_return",
]


def test_every_required_diagnostic_has_a_bad_program() -> None:
    missing = [name for name in REQUIRED if not (BAD / f"{name}.rtg").exists()]
    assert not missing


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("syntax_expected_paren", RtgSyntaxError),
        ("literal_int_too_large", RtgSyntaxError),
        ("unknown_op", CheckError),
        ("shape_mismatch", ShapeError),
        ("dtype_mismatch", DTypeError),
        ("scalar_not_integer", DTypeError),
        ("tensor_larger_than_device", CapacityError),
        ("tensor_absurd_size", CapacityError),
        ("buffer_outside_memory", CapacityError),
    ],
)
def test_errors_have_the_kind_of_their_stage(name: str, kind: type) -> None:
    path = BAD / f"{name}.rtg"
    _, _, params, capacity = _header(path.read_text())
    with pytest.raises(kind):
        load(path, params or None, device_capacity=capacity)


def test_independent_errors_come_together_in_source_order() -> None:
    with pytest.raises(RtgErrors) as info:
        load(BAD / "multiple_errors.rtg")
    lines = [e.span.line for e in info.value.errors]
    assert lines == sorted(lines) and len(lines) == 4
    assert info.value.message == info.value.errors[0].message


def test_a_mistake_inside_a_loop_or_function_is_reported_once() -> None:
    text = """
    fn f(x) { return relu(xx) }
    program p() {
        input x : f32[4]
        for i in 0..5 { y = f(x) }
        z = f(x)
    }
    """
    with pytest.raises(RtgError) as info:
        parse(text)
    assert [e.message for e in _errors(info.value)] == ["undefined name 'xx'"]


def test_a_failed_name_poisons_its_uses() -> None:
    text = "program p() {\n input x : f32[4, 4]\n y = x @ reshape(x, [8])\n z = relu(y) + y\n}"
    with pytest.raises(RtgError) as info:
        parse(text)
    assert len(_errors(info.value)) == 1


def test_shape_errors_point_at_the_offending_operand() -> None:
    text = "program p() {\n input a : f32[2, 3]\n input b : f32[4]\n y = a + b\n}"
    with pytest.raises(ShapeError) as info:
        parse(text)
    span = info.value.span
    assert (span.line, span.col, span.end_col) == (4, 10, 11)


def test_attribute_errors_point_at_the_attribute() -> None:
    text = "program p() {\n input x : f32[2, 3]\n y = softmax(x, axis = 5)\n}"
    with pytest.raises(CheckError) as info:
        parse(text)
    span = info.value.span
    assert (span.line, span.col, span.end_col) == (3, 17, 25)
    assert "axis" in info.value.message


def test_unknown_parameters_are_suggested() -> None:
    with pytest.raises(CheckError) as info:
        parse("program p(S = 4, D = 8) { }", params={"D": 4, "SS": 2})
    assert info.value.message == "parameter 'SS' is not declared by program 'p'"
    assert info.value.hint == "did you mean 'S'?"


def test_parameters_must_be_integers() -> None:
    with pytest.raises(CheckError, match="must be an integer"):
        parse("program p(S = 4) { }", params={"S": 2.5})  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda p: p / "missing.rtg", "no such file"),
        (lambda p: p, "it is a directory"),
    ],
)
def test_unreadable_files_are_errors(tmp_path: Path, setup, message: str) -> None:
    with pytest.raises(RtgError, match=message):
        load(setup(tmp_path))


def test_a_file_that_is_not_utf8_is_located(tmp_path: Path) -> None:
    path = tmp_path / "latin1.rtg"
    path.write_bytes(b"program p() {\n  # caf\xe9\n}\n")
    with pytest.raises(RtgSyntaxError) as info:
        load(path)
    assert "not UTF-8" in info.value.message
    assert (info.value.span.line, info.value.span.col) == (2, 8)


def test_a_utf8_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.rtg"
    path.write_bytes(b"\xef\xbb\xbfprogram p() { }\n")
    assert load(path).name == "p"


def test_syntax_errors_name_the_expected_tokens_in_words() -> None:
    cases = {
        "program p() { y = f(a b) }": "expected ')' or ',', found name 'b'",
        "program p() { y = }": "expected an expression, found '}'",
        "program p() { y = a b }": "expected '}' or a line break, found name 'b'",
        "fn f x": "expected '(', found name 'x'",
        "x": "expected 'program', 'fn' or 'device', found name 'x'",
        "program p() { input x f32 }": "expected ':', found name 'f32'",
        "program p() { y = (a + b }": "expected ')', found '}'",
        "program p() { for i in 0 { } }": "expected '..', found '{'",
    }
    for text, message in cases.items():
        with pytest.raises(RtgSyntaxError) as info:
            parse(text)
        assert info.value.message == message, text


def test_functions_no_call_inlines_are_still_checked() -> None:
    text = """
    fn unused(x, w) {
        h = relu(xx)
        return softmax(h @ w, axs = 1)
    }
    program p() { }
    """
    with pytest.raises(RtgErrors) as info:
        parse(text)
    assert [e.message for e in info.value.errors] == [
        "undefined name 'xx'",
        "unknown attribute 'axs' for softmax",
    ]


_PROGRAM = "program p() {{\n    input x : f32[4, 4]\n    stream s\n    {}\n}}"


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        ("y = x(1)", "'x' is not an op or a function but the input 'x' (f32[4, 4])"),
        ("buffer A : bytes[16]\n y = relu(A)", "'A' is a raw buffer, not a tensor"),
        ("y = relu(2.0)", "relu needs at least one tensor argument; all are compile-time numbers"),
        ("y = softmax(x, axis = 0, axis = 1)", "softmax: attribute 'axis' given twice"),
        ("y = relu(x, block_dim = 0)", "relu: block_dim must be at least 1, got 0"),
        ("y = x % x", "'%' applies to compile-time numbers only, not to tensors"),
        ("const c = 2 @ 3", "'@' needs tensors; both operands are compile-time numbers"),
        ("const c = 5 % 0", "modulo by zero in a compile-time expression"),
        ("const c = log(0)", "log needs a positive number, got 0"),
        ("const c = sqrt(-4)", "sqrt of a negative number (-4)"),
        ("const c = 9223372036854775807 + 1", "exceeds 2**63 - 1"),
        ("for i in 0..2.5 { }", "a loop bound must be a compile-time integer, got the number 2.5"),
        ("buffer A : bytes[16] at -1", "buffer address -1 is negative"),
        ("on x { }", "expected a stream, not the input 'x' (f32[4, 4])"),
        ("stream t(prio = 1)", "unknown stream option 'prio'"),
        ("sync q", "unknown stream or event 'q'"),
        ("for i in 0..2 { input z : f32[2] }", "'input' declarations belong at the top level"),
        ("for i in 0..2 { output x }", "output belongs at the top level of the program"),
        ("output x\n output x", "'x' is already an output"),
        (
            "t = kernel(unit = cube, us = 1)\n u = kernel(unit = cube, us = 1, reads = [t])",
            "kernel reads a kernel token ('t')",
        ),
        (
            "y = kernel(unit = gpu, us = 1)",
            "kernel: attribute 'unit' must be one of cube, vector, dma",
        ),
        ("y = cast(x, dtype = f61)", "cast: attribute 'dtype' names an unknown dtype 'f61'"),
        ("y = reduce_sum(x, keepdims = yes)", "must be true or false, got 'yes'"),
        ("y = reshape(x, [2, [8]])", "attribute 'shape' needs integers; a list is not one"),
        (
            "y = kernel(unit = cube, us = 1, reads = [x + x])",
            "kernel: reads= takes a list of names",
        ),
        ("y = relu(x, after = [s])", "after= needs tensors or buffers, not the stream 's'"),
        ("f = 1\n y = f(x)", "'f' is not an op or a function but the number 1"),
        ("y = relu(x, k = 1, x)", "positional argument after a keyword argument"),
        ("const c = x", "const 'c' must be a compile-time number, got the input 'x'"),
        ("y = nope(x)", "unknown op 'nope'"),
    ],
)
def test_messages(statement: str, message: str) -> None:
    with pytest.raises(RtgError) as info:
        parse(_PROGRAM.format(statement))
    messages = [e.message for e in _errors(info.value)]
    assert any(message in m for m in messages), messages


def test_a_long_line_is_shown_as_a_window_around_the_span() -> None:
    line = "x" * 500 + " bad " + "y" * 500
    shown = highlight(Span(Source("f.rtg", line), 1, 502, 1, 505))
    text, carets = shown.splitlines()
    assert len(text) <= 4 + SHOWN_WIDTH + 2 and text.startswith("    …") and text.endswith("…")
    assert text[carets.index("^") :].startswith("bad") and carets.count("^") == 3


_PLACED = """program p() {{
    input x : f32[4, 4]
    param w : f32[4, 4]
    stream s1, s2
    event e, f[2]
    {}
}}"""
_FUSIBLE = (
    "a fused block is one kernel: Vector ops that fuse (elementwise, softmax, …), or a matmul "
    "or conv2d and the epilogue after it"
)


@pytest.mark.parametrize(
    ("statement", "col", "message", "hint"),
    [
        ("event g[0]", 13, "event array length 0 is not between 1 and 65,536", None),
        (
            "event g[x]",
            13,
            "the length of an event array must be a compile-time integer, got the input 'x' "
            "(f32[4, 4])",
            None,
        ),
        (
            "on s1 { record e[0] }",
            22,
            "'e' is a single event, not an array",
            "declare an array to index it: event e[N]",
        ),
        (
            "on s1 { record f[1.5] }",
            22,
            "index of event array 'f' must be a compile-time integer, got the number 1.5",
            "events are resolved at compile time: index with a constant or a loop variable "
            "(e.g. e[i % 2])",
        ),
        (
            "on s1 { record f[0] }; sync f",
            33,
            "event array 'f' needs an index",
            "name one of its events: f[0] to f[1]",
        ),
        (
            "sync f[2]",
            12,
            "index 2 is out of range for event array 'f' of length 2",
            "valid indices are 0 to 1",
        ),
        ("on s1 { record x }", 20, "expected an event, not the input 'x' (f32[4, 4])", None),
        (
            "on s1 { xd = to_device(x, pinned = 1) }",
            31,
            "unknown attribute 'pinned' for to_device",
            "to_device takes one attribute, rows = [a, b]",
        ),
        ("on s1 { xd = to_device(x, x) }", 18, "to_device takes 1 tensor argument, got 2", None),
        (
            "on s1 { wd = to_device(w) }",
            28,
            "to_device copies a host input, not the param 'w' (f32[4, 4])",
            "inputs live on the host; everything else is already on the device",
        ),
        (
            "on s1 { xd = to_device(s2) }",
            28,
            "to_device copies a tensor, not the stream 's2'",
            None,
        ),
        (
            "on s1 { a = to_device(x); b = to_device(x) }",
            35,
            "input 'x' is already copied to the device at line 6",
            "copy each input once and use its device name from then on",
        ),
        (
            "y = relu(x); on s1 { output y = to_host(y); output z = to_host(y) }",
            60,
            "'y' is already copied to the host at line 6",
            None,
        ),
        (
            "output y = to_host(relu(x))",
            16,
            "to_host must be inside an `on` block",
            "write `on s { ... = to_host(...) }` to say which stream copies it",
        ),
        (
            "y = fused { t = relu(x); on s1 { }; return t }",
            30,
            "a fused block holds only bindings and a final return",
            None,
        ),
        (
            "y = fused { return x }",
            17,
            "a fused block returns the result of its last op, not the input 'x' (f32[4, 4])",
            None,
        ),
        (
            "y = fused { t = relu(x, block_dim = 2); return exp(t) }",
            21,
            "a fused block's ops take no block_dim",
            None,
        ),
        (
            "y = fused { t = kernel(unit = vector, us = 1); return relu(x) }",
            21,
            "a fused block holds only ops on tensors",
            None,
        ),
        (
            "y = fused { t = reshape(x, [16]); return relu(t) }",
            21,
            "fused: body step 0: 'reshape' is not a fusible op",
            _FUSIBLE,
        ),
    ],
)
def test_event_array_host_copy_and_fused_block_messages(
    statement: str, col: int, message: str, hint: str | None
) -> None:
    """Each mistake with event arrays, placed host copies and fused blocks: its exact message
    and hint, at its column of line 6 (the one-line statement); nothing else is reported."""
    with pytest.raises(RtgError) as info:
        parse(_PLACED.format(statement))
    reported = [(e.span.line, e.span.col, e.message, e.hint) for e in _errors(info.value)]
    assert reported == [(6, col, message, hint)]


def test_fused_is_a_keyword() -> None:
    with pytest.raises(RtgSyntaxError) as info:
        parse("program p() {\n    input x : f32[4]\n    fused = relu(x)\n}")
    assert info.value.message == "expected '}' or a statement, found 'fused'"
    assert info.value.hint == "'fused' is a keyword and cannot be used as a name"
