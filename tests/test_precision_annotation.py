"""``@precision(…)`` on a binding: one token, a suffix of its line, carried to ``Tensor.precision``.

The annotation pins the precision of the op that makes a binding's tensor (issue 17): these
tests check the language side — it parses on both parse paths alike, lands on the bound tensor
(through functions, loops and fused blocks), is refused where it cannot mean anything with a
located error and a hint, leaves the matmul ``@`` alone, and a program carrying it compiles and
runs.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import rtgraph
from rtgraph.errors import CheckError, RtgError, RtgErrors, RtgSyntaxError
from rtgraph.frontend import ast, parse
from rtgraph.frontend.lexer import tokenize
from rtgraph.frontend.parser import grammar, parse_module
from rtgraph.ir.graph import OpNode

HEADER = "program p() {\n    input x : f32[4, 4]\n    param w : f32[4, 4]\n"


def program(*lines: str) -> str:
    """A program declaring ``x`` and ``w`` (lines 2 and 3), then ``lines`` from line 4."""
    return HEADER + "".join(f"    {line}\n" for line in lines) + "}\n"


def errors_of(text: str) -> list[RtgError]:
    with pytest.raises(RtgError) as info:
        parse(text, "a.rtg")
    e = info.value
    return e.errors if isinstance(e, RtgErrors) else [e]


def the_error(text: str) -> RtgError:
    (error,) = errors_of(text)
    return error


def assert_located(error: RtgError, text: str, line: int, col: int, underlined: str) -> None:
    """``error`` is at ``line:col`` of ``text``, its caret row underlines ``underlined`` there,
    and it renders as ``file:line:col: error: …`` with a hint."""
    assert (error.span.line, error.span.col) == (line, col)
    head, shown, carets = error.render().splitlines()[:3]
    assert head.startswith(f"a.rtg:{line}:{col}: error: ")
    source_line = text.splitlines()[line - 1]
    assert shown.strip() == source_line.strip()
    start = carets.index("^")
    assert shown[start : start + len(underlined)] == underlined
    assert carets.strip() == "^" * len(underlined)
    assert error.hint


def precisions(p: rtgraph.Program) -> dict[str, str]:
    return {name: t.precision for name, t in p.tensors.items() if t.precision is not None}


def producer(p: rtgraph.Program, name: str) -> str:
    (op,) = [n.op for n in p.nodes if isinstance(n, OpNode) and n.output == name]
    return op


# --- tokens and syntax ---------------------------------------------------------------------


def kinds(text: str) -> list[tuple[str, str]]:
    g = grammar()
    fast = [(t.type, t.value) for t in tokenize(text, g.punctuation, g.keywords)][:-1]
    assert fast == [(t.type, t.value) for t in g.lark.lex(text)]  # both paths alike
    return fast


def test_at_precision_is_one_token_on_both_paths() -> None:
    assert kinds("h = x @precision(f32)")[3:] == [
        ("AT_PRECISION", "@precision"),
        ("LPAR", "("),
        ("NAME", "f32"),
        ("RPAR", ")"),
    ]


@pytest.mark.parametrize(
    ("text", "right"),
    [
        ("x @ w", "w"),
        ("x@w", "w"),
        ("x @precisions", "precisions"),
        ("x@precision_2", "precision_2"),
    ],
)
def test_the_matmul_at_is_left_alone(text: str, right: str) -> None:
    assert kinds(f"h = {text}")[3:] == [("AT", "@"), ("NAME", right)]
    p = parse(program(f"input {right} : f32[4, 4]" if right != "w" else "", f"h = {text}"))
    assert producer(p, "h") == "matmul" and p.tensors["h"].precision is None


def test_with_a_space_it_is_a_matmul_by_a_call_of_an_unknown_op() -> None:
    assert kinds("h = x @ precision(f32)")[3:5] == [("AT", "@"), ("NAME", "precision")]
    messages = [e.message for e in errors_of(program("h = x @ precision(f32)"))]
    assert "unknown op 'precision'" in messages


def test_the_annotation_is_a_node_of_the_binding_with_its_span() -> None:
    text = "program p() {\n  h = relu(x) @precision(f16)\n  output y = h @ w @precision(bf16)\n}"
    module, errors = parse_module(text)
    assert not errors
    binding, output = module.items[0].body
    assert isinstance(binding.precision, ast.Precision)
    assert binding.precision.value.name == "f16"
    assert (binding.precision.span.line, binding.precision.span.col) == (2, 15)
    assert binding.precision.span.end_col == 30
    assert binding.span.end_col == 30  # the annotation ends the binding
    assert isinstance(binding.value, ast.Call) and binding.value.func.name == "relu"
    assert output.precision.value.name == "bf16"
    assert isinstance(output.value, ast.BinOp) and output.value.op == "@"


def test_an_expression_continued_on_the_next_line_takes_the_annotation_at_its_end() -> None:
    p = parse(program("h = x", "    @ w @precision(f16)"))
    assert precisions(p) == {"h": "f16"} and producer(p, "h") == "matmul"


def test_a_line_starting_with_the_annotation_does_not_join_the_line_above() -> None:
    text = program("h = relu(x)", "@precision(f32)")
    error = the_error(text)
    assert isinstance(error, RtgSyntaxError)
    assert error.message == "expected '}' or a statement, found '@precision'"
    assert_located(error, text, 5, 5, "@precision")
    assert "same line" in error.hint


@pytest.mark.parametrize(
    ("line", "col", "underlined", "message"),
    [
        ("h = relu(x) @precision f32", 28, "f32", "expected '(', found name 'f32'"),
        ("h = relu(x) @precision", 27, "", "expected '(', found end of line"),
        ("h = relu(x) @precision()", 28, ")", "expected a name, found ')'"),
        ("h = relu(x) @precision(f32 f16)", 32, "f16", "expected ')', found name 'f16'"),
    ],
)
def test_missing_parentheses_are_syntax_errors_with_a_hint(
    line: str, col: int, underlined: str, message: str
) -> None:
    text = program(line)
    error = the_error(text)
    assert isinstance(error, RtgSyntaxError) and error.message == message
    assert (error.span.line, error.span.col) == (4, col)
    if underlined:
        assert_located(error, text, 4, col, underlined)
    assert error.hint == "write the precision in parentheses: @precision(f32) (or f16, bf16, int8)"


@pytest.mark.parametrize(
    "line",
    [
        "h = (relu(x) @precision(f16))",  # inside brackets: not the end of a binding
        "h = relu(x) @precision(f16) @ w",  # the annotation ends the binding
        "output x @precision(f16)",  # an output without `= expr` binds nothing
        "input z : f32[4] @precision(f16)",  # a declaration
        "const c = 2 @precision(f16)",
        "return relu(x) @precision(f16)",
    ],
)
def test_the_annotation_stands_only_at_the_end_of_a_binding_or_an_output(line: str) -> None:
    error = the_error(program(line))
    assert isinstance(error, RtgSyntaxError)
    assert error.span.line == 4
    assert "found '@precision'" in error.message or "found '@'" in error.message


# --- carried to the IR ---------------------------------------------------------------------


def test_the_annotation_lands_on_the_bound_tensor_of_the_last_op() -> None:
    p = parse(
        program(
            "param b : f32[4]",
            "h = gelu(x @ w + b) @precision(f32)",
            "s = softmax(h @ w, axis = -1) @precision(f16)",
            "output y = s @ w @precision(int8)",
            "output z = relu(s) @precision(bf16)",
        )
    )
    assert precisions(p) == {"h": "f32", "s": "f16", "y": "int8", "z": "bf16"}
    assert producer(p, "h") == "gelu" and producer(p, "s") == "softmax"
    assert producer(p, "y") == "matmul"
    assert p.outputs == ["y", "z"]


def test_through_functions_each_inlined_op_and_the_callers_binding() -> None:
    text = """
fn ffn(x, w) {
    h = relu(x @ w) @precision(f16)
    return h @ w
}
program p(L = 3) {
    input x : f32[4, 4]
    param w : f32[4, 4]
    a = ffn(x, w)
    h = x
    for l in 0..L {
        h = ffn(h, w) @precision(bf16)
    }
    output y = relu(h)
}
"""
    p = parse(text)
    assert precisions(p) == {
        "ffn.1/h": "f16",
        **{f"l={i}/ffn.{i + 2}/h": "f16" for i in range(3)},
        **{f"l={i}/h": "bf16" for i in range(3)},
    }
    assert p.tensors["a"].precision is None  # ffn's matmul result, bound without annotation
    assert all(producer(p, name) == "relu" for name in precisions(p) if "ffn" in name)


def test_a_fused_block_is_one_op_and_is_annotated_as_one() -> None:
    p = parse(program("g = fused { t = x * 2.0; return relu(t) } @precision(f16)"))
    assert precisions(p) == {"g": "f16"} and producer(p, "g") == "fused"


def test_an_annotation_changes_nothing_but_the_precision() -> None:
    lines = ("h = relu(x @ w)", "s = softmax(h, axis = -1)", "output y = s @ w")
    plain = parse(program(*lines))
    pinned = parse(program(*(f"{line} @precision(f16)" for line in lines)))
    assert pinned.nodes == plain.nodes and pinned.outputs == plain.outputs
    assert precisions(pinned) == {"h": "f16", "s": "f16", "y": "f16"}
    assert {k: t.type for k, t in pinned.tensors.items()} == {
        k: t.type for k, t in plain.tensors.items()
    }


_OPS = ("relu(H)", "H @ w", "softmax(H, axis = -1)", "H * 0.5", "gelu(H + x)", "exp(-H) @ w")


@given(
    st.lists(
        st.tuples(st.sampled_from(_OPS), st.sampled_from((None, "f32", "f16", "bf16"))),
        min_size=1,
        max_size=8,
    )
)
def test_each_annotated_binding_and_no_other_tensor_is_pinned(
    chain: list[tuple[str, str | None]],
) -> None:
    """A chain of bindings, some annotated: exactly the annotated names are pinned, each to its
    own precision, and the graph is the one without annotations."""
    lines, expected, previous = [], {}, "x"
    for k, (op, precision) in enumerate(chain):
        name = f"h{k}"
        suffix = f" @precision({precision})" if precision else ""
        lines.append(f"{name} = {op.replace('H', previous)}{suffix}")
        if precision:
            expected[name] = precision
        previous = name
    pinned = parse(program(*lines, f"output y = {previous}"))
    plain = parse(
        program(*(line.split(" @precision")[0] for line in lines), f"output y = {previous}")
    )
    assert precisions(pinned) == expected
    assert pinned.nodes == plain.nodes and pinned.outputs == plain.outputs


# --- refused, located ----------------------------------------------------------------------


def test_an_unknown_precision_is_refused_at_the_value_with_the_four_it_may_be() -> None:
    text = program("h = relu(x) @precision(f64)")
    error = the_error(text)
    assert isinstance(error, CheckError)
    assert error.message == "unknown precision 'f64'"
    assert_located(error, text, 4, 28, "f64")
    assert error.hint == (
        "did you mean 'f16'? @precision takes f32, f16, bf16 or int8 (int8: a matmul or conv2d)"
    )


def test_int8_is_refused_on_an_op_without_an_int8_form() -> None:
    text = program("s = softmax(x @ w, axis = -1) @precision(int8)")
    error = the_error(text)
    assert error.message == "@precision(int8) applies to a matmul or conv2d, not to 'softmax'"
    assert_located(error, text, 4, 46, "int8")
    assert "f16, bf16 or f32" in error.hint


def test_int8_is_allowed_on_a_conv2d() -> None:
    text = """program p() {
    input x : f32[1, 3, 8, 8]
    param k : f32[4, 3, 3, 3]
    output y = conv2d(x, k) @precision(int8)
}"""
    assert precisions(parse(text)) == {"y": "int8"}


@pytest.mark.parametrize(
    ("lines", "what"),
    [
        (("h = x @precision(f32)",), "the input 'x' (f32[4, 4])"),
        (("h = w @precision(f16)",), "the param 'w' (f32[4, 4])"),
        (("h = 3 @precision(f16)",), "the number 3"),
        (("g = relu(x)", "h = g @precision(bf16)"), "tensor 'g' (f32[4, 4])"),
        (("output h = x @precision(f32)",), "the input 'x' (f32[4, 4])"),
    ],
)
def test_a_binding_no_op_computes_is_refused_at_the_annotation(
    lines: tuple[str, ...], what: str
) -> None:
    text = program(*lines)
    error = the_error(text)
    line = 3 + len(lines)
    assert isinstance(error, CheckError)
    name = lines[-1].split("=")[0].split()[-1]
    precision = lines[-1].split("(")[-1].rstrip(")")
    assert error.message == (
        f"@precision({precision}) pins the precision of the op a binding computes; "
        f"'{name}' is {what}, computed by no op here"
    )
    col = lines[-1].index("@precision") + 5
    assert_located(error, text, line, col, f"@precision({precision})")
    assert "annotate the binding whose expression computes the value" in error.hint


def test_a_refused_annotation_leaves_the_binding_usable_and_checked() -> None:
    errors = errors_of(program("h = x @precision(f32)", "y = softmax(h, axs = 1)"))
    assert [(e.span.line, e.message.split(";")[0]) for e in errors] == [
        (4, "@precision(f32) pins the precision of the op a binding computes"),
        (5, "unknown attribute 'axs' for softmax"),
    ]


def test_a_function_returning_its_argument_computes_nothing_to_pin() -> None:
    text = "fn same(a) {\n    return a\n}\n" + program("h = same(x) @precision(f16)")
    error = the_error(text)
    assert "'h' is the input 'x' (f32[4, 4]), computed by no op here" in error.message
    assert (error.span.line, error.span.col) == (7, 17)


def test_an_op_with_an_integer_result_is_refused() -> None:
    text = program("h = cast(x, dtype = i32) @precision(f16)")
    error = the_error(text)
    assert (
        error.message
        == "@precision(f16) needs an op with a floating-point result; 'cast' makes i32"
    )
    assert_located(error, text, 4, 30, "@precision(f16)")


def test_a_binding_inside_a_fused_block_is_refused() -> None:
    text = program("g = fused { t = x * 2.0 @precision(f16); return relu(t) }")
    error = the_error(text)
    assert error.message == (
        "a fused block computes in one precision; its bindings take no @precision"
    )
    assert_located(error, text, 4, 29, "@precision(f16)")
    assert "h = fused { ... } @precision(f32)" in error.hint


def test_a_mistake_in_a_loop_or_a_function_is_reported_once_even_uncalled() -> None:
    text = """
fn unused(a) {
    h = relu(a) @precision(f8)
    return h
}
program p() {
    input x : f32[4, 4]
    for i in 0..4 {
        s = softmax(x, axis = -1) @precision(int8)
    }
}
"""
    errors = errors_of(text)
    assert [(e.span.line, e.message) for e in errors] == [
        (3, "unknown precision 'f8'"),
        (9, "@precision(int8) applies to a matmul or conv2d, not to 'softmax'"),
    ]


def test_errors_are_independent_and_in_source_order() -> None:
    text = program(
        "a = relu(x) @precision(f64)",
        "b = x @precision(f16)",
        "c = relu(x) @precision(f16)",
        "d = exp(x) @precision(int8)",
    )
    errors = errors_of(text)
    assert [e.span.line for e in errors] == [4, 5, 7]


# --- end to end ----------------------------------------------------------------------------

END_TO_END = """program p(n = 16) {
    input x : f32[n, n]
    param w1 : f32[n, n]
    param w2 : f32[n, n]
    param b1 : f32[n]
    h = gelu(x @ w1 + b1) @precision(PRECISION)
    s = softmax(h @ w2, axis = -1) @precision(PRECISION)
    output y = s @ w2 @precision(PRECISION)
}
"""


def run_end_to_end(precision: str) -> tuple[rtgraph.Program, dict, dict]:
    p = rtgraph.parse(END_TO_END.replace("PRECISION", precision), "e2e.rtg")
    compiled = rtgraph.compile(p, device="toy")
    result = rtgraph.run(compiled, device="toy")
    return p, result.outputs, rtgraph.reference(p)


def test_a_program_pinned_to_its_own_precision_runs_equal_to_the_reference() -> None:
    p, outputs, reference = run_end_to_end("f32")
    assert precisions(p) == {"h": "f32", "s": "f32", "y": "f32"}
    report = rtgraph.compare(outputs, reference)
    assert report["y"]["equal"], report


def test_a_program_pinned_to_f16_compiles_and_runs_close_to_the_reference() -> None:
    p, outputs, reference = run_end_to_end("f16")
    assert precisions(p) == {"h": "f16", "s": "f16", "y": "f16"}
    y = np.asarray(outputs["y"], dtype=np.float64)
    expected = np.asarray(reference["y"], dtype=np.float64)
    assert y.shape == expected.shape and np.isfinite(y).all()
    assert np.max(np.abs(y - expected)) <= 0.05 * np.max(np.abs(expected))


def test_a_precision_on_a_view_is_refused_with_a_hint():
    source = (
        "program p() {\n    input x : f32[4, 4]\n    y = x @ x\n"
        "    output t = transpose(y, [1, 0]) @precision(f16)\n}\n"
    )
    with pytest.raises(rtgraph.errors.RtgError) as e:
        rtgraph.parse(source, "p.rtg")
    text = e.value.render()
    assert "p.rtg:4:" in text and "'transpose' does none" in text
    assert "pin the op that computes the elements" in text
