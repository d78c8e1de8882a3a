"""The parser: grammar as package data, tokens, separators, precedence, spans, literals.

The fast path (own tokenizer + LALR driver over lark's tables) must accept exactly what lark's
own parser accepts and tokenize exactly as lark's lexer does; both are checked here, on the
models and on generated text.
"""

from __future__ import annotations

import importlib.resources
import string
from pathlib import Path

import pytest
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st
from lark.exceptions import UnexpectedInput

from rtgraph.errors import RtgSyntaxError
from rtgraph.frontend import ast
from rtgraph.frontend.lexer import LexError, tokenize
from rtgraph.frontend.parser import grammar, parse_module

MODELS = sorted((Path(__file__).resolve().parent.parent / "models").glob("*.rtg"))


def body(text: str) -> tuple:
    """The statements of the only program in ``text``."""
    module, errors = parse_module(text)
    assert not errors
    (program,) = [i for i in module.items if isinstance(i, ast.ProgramDef)]
    return program.body


def value_of(expr_text: str) -> ast.Expr:
    (stmt,) = body(f"program p() {{ y = {expr_text} }}")
    return stmt.value


def shape(e) -> object:
    """An expression as nested tuples, for comparing structure."""
    if isinstance(e, ast.Name):
        return e.id
    if isinstance(e, ast.Number):
        return e.value
    if isinstance(e, ast.BinOp):
        return (e.op, shape(e.left), shape(e.right))
    if isinstance(e, ast.Neg):
        return ("neg", shape(e.operand))
    if isinstance(e, ast.Call):
        kws = tuple((k.name.name, shape(k.value)) for k in e.kwargs)
        return (e.func.name, *map(shape, e.args), *kws)
    if isinstance(e, ast.ListExpr):
        return [shape(i) for i in e.items]
    if isinstance(e, ast.Index):
        return ("index", e.target.name, *map(shape, e.indices))
    if isinstance(e, ast.String):
        return ("str", e.value)
    raise AssertionError(e)


# --- the grammar ---------------------------------------------------------------------------


def test_grammar_is_package_data_and_built_once() -> None:
    """The repository's top-level grammars/rtg.lark is installed as the package rtgraph.grammars
    (tests/test_wheel.py checks the same from a built wheel)."""
    resource = importlib.resources.files("rtgraph.grammars").joinpath("rtg.lark")
    assert resource.is_file()
    assert resource.read_text(encoding="utf-8") == (ROOT / "grammars" / "rtg.lark").read_text(
        encoding="utf-8"
    )
    assert grammar() is grammar()


def test_models_parse() -> None:
    for path in MODELS:
        module, errors = parse_module(path.read_text(), str(path))
        assert not errors
        assert any(isinstance(i, ast.ProgramDef) for i in module.items)


# --- precedence and desugaring -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a + b * c", ("+", "a", ("*", "b", "c"))),
        ("a - b - c", ("-", ("-", "a", "b"), "c")),
        ("a * b @ c", ("@", ("*", "a", "b"), "c")),
        ("a @ b * c", ("*", ("@", "a", "b"), "c")),
        ("a / b % c", ("%", ("/", "a", "b"), "c")),
        ("-a @ b", ("@", ("neg", "a"), "b")),
        ("-(a + b)", ("neg", ("+", "a", "b"))),
        ("(a + b) * c", ("*", ("+", "a", "b"), "c")),
        ("a + b |> relu", ("relu", ("+", "a", "b"))),
        ("x |> f(a, k = 2) |> g", ("g", ("f", "x", "a", ("k", 2)))),
        ("x |> transpose([1, 0])", ("transpose", "x", [1, 0])),
        ("w[l + 1] @ v", ("@", ("index", "w", ("+", "l", 1)), "v")),
        ("-2", -2),
        ("--2", 2),
        ("f()", ("f",)),
        ("[]", []),
        ("[1, 2,]", [1, 2]),
        ('"text"', ("str", "text")),
        ("k(after = [t1, t2])", ("k", ("after", ["t1", "t2"]))),
    ],
)
def test_expressions(text: str, expected: object) -> None:
    assert shape(value_of(text)) == expected


def test_pipe_marks_the_call() -> None:
    call = value_of("x |> relu")
    assert isinstance(call, ast.Call) and call.piped
    assert not value_of("relu(x)").piped


@pytest.mark.parametrize(
    ("text", "value"),
    [("42", 42), ("0x1000", 4096), ("0XF_F", 255), ("4_096", 4096), ("1.5", 1.5),
     ("1e-5", 1e-5), ("2.5E+3", 2500.0), ("9223372036854775807", 2**63 - 1)],
)  # fmt: skip
def test_number_literals(text: str, value: float) -> None:
    number = value_of(text)
    assert isinstance(number, ast.Number)
    assert number.value == value and type(number.value) is type(value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("9223372036854775808", "integer literal 9223372036854775808 is too large"),
        ("1" * 5000, "is too large"),
        ("1e999", "float literal 1e999 is out of range"),
    ],
)
def test_literals_out_of_range_are_collected(text: str, message: str) -> None:
    _, errors = parse_module(f"program p() {{ y = {text} + {text} }}")
    assert len(errors) == 2 and message in errors[0].message


def test_string_escapes() -> None:
    assert value_of(r'"a\"b\\c\n"').value == 'a"b\\c\n'


# --- statements and separators -------------------------------------------------------------


def test_every_statement_form() -> None:
    text = """
    program p(S = 4, D) {
        input x : f16[S, D] @pageable
        param w : f16[D, D] @direct; param ws[2] : f32[4]
        const eps = 1e-5
        buffer A : bytes[4096] at 0x1000
        buffer B : bytes[64]
        stream s1, s2(priority = 1)
        event e
        on s1 { y = x @ w; record e }
        on s2 { wait e; barrier }
        sync; sync e; sync s1
        callback "log" after y blocking
        callback "log2" after y
        for l in 0..2 { h = relu(y) }
        output y
        output z = relu(y)
        s = f32
    }
    """
    kinds = [type(s).__name__ for s in body(text)]
    assert kinds == [
        "InputDecl", "ParamDecl", "ParamDecl", "ConstDecl", "BufferDecl", "BufferDecl",
        "StreamDecl", "EventDecl", "OnBlock", "OnBlock", "Sync", "Sync", "Sync", "Callback",
        "Callback", "ForLoop", "Output", "Output", "Binding",
    ]  # fmt: skip
    stmts = body(text)
    assert stmts[0].hint.name == "pageable"
    assert stmts[2].count is not None
    assert stmts[5].address is None
    assert [i.name.name for i in stmts[6].streams] == ["s1", "s2"]
    assert stmts[6].streams[1].options[0].name.name == "priority"
    assert [type(s).__name__ for s in stmts[8].body] == ["Binding", "Record"]
    assert stmts[10].target is None and stmts[11].target.name.name == "e"
    assert stmts[11].target.index is None
    assert stmts[13].blocking and not stmts[14].blocking
    assert stmts[16].value is None and stmts[17].value is not None
    assert stmts[18].value.id == "f32"


def test_event_arrays_host_copies_and_fused_blocks_parse() -> None:
    text = """
    program p(N = 2) {
        input x : f16[4]
        stream s
        event e[N], f
        on s { xd = to_device(x); record e[1]; wait e[N - 1] }
        sync e[0]
        y = fused { t = xd * 0.5; return relu(t) }
    }
    """
    stmts = body(text)
    decl = stmts[2]
    assert [i.name.name for i in decl.events] == ["e", "f"]
    assert decl.events[0].count is not None and decl.events[1].count is None
    on = stmts[3]
    assert on.body[1].event.name.name == "e" and on.body[1].event.index.value == 1
    assert isinstance(on.body[2].event.index, ast.BinOp)
    assert stmts[4].target.index.value == 0
    fused = stmts[5].value
    assert isinstance(fused, ast.Fused)
    assert [type(s).__name__ for s in fused.body] == ["Binding", "Return"]


def test_fused_is_a_keyword_so_the_op_cannot_be_called() -> None:
    with pytest.raises(RtgSyntaxError) as info:
        parse_module("program p() {\n    input x : f16[4]\n    y = fused(x)\n}\n", "t.rtg")
    assert "expected '{'" in str(info.value)


def test_newlines_inside_brackets_do_not_end_statements() -> None:
    text = """program p() {
        y = matmul(
            a,          # comments are fine here too
            b,
        )
        z = reshape(y, [
            4, 4])
    }"""
    assert [s.name.name for s in body(text)] == ["y", "z"]


def test_a_pipeline_may_continue_on_the_next_line() -> None:
    text = "program p() {\n y = x\n   |> relu\n   # a comment\n   |> softmax(axis = -1)\n}"
    (stmt,) = body(text)
    assert shape(stmt.value) == ("softmax", ("relu", "x"), ("axis", -1))


def test_semicolons_and_blank_lines_separate_statements() -> None:
    assert len(body("program p() {;; a = 1;;\n\n b = 2 ;\n}")) == 2


def test_empty_input_and_only_comments_parse_to_no_items() -> None:
    for text in ("", "\n\n", "# nothing here\n", "  ;  "):
        module, _ = parse_module(text)
        assert module.items == ()


def test_items() -> None:
    module, _ = parse_module('device "ascend-910b"\nfn f(a, b,) { return a }\nprogram p() { }')
    device, fn, program = module.items
    assert device.name == "ascend-910b"
    assert [p.name for p in fn.params] == ["a", "b"] and isinstance(fn.body[0], ast.Return)
    assert program.name.name == "p" and program.params == ()


# --- spans ---------------------------------------------------------------------------------


def test_spans_are_exact() -> None:
    text = "program p() {\n    y = softmax(q @ k, axis = -1)\n}"
    (stmt,) = body(text)
    call = stmt.value
    assert (call.func.span.line, call.func.span.col, call.func.span.end_col) == (2, 9, 16)
    assert (call.span.col, call.span.end_col) == (9, 34)
    matmul = call.args[0]
    assert (matmul.span.col, matmul.span.end_col) == (17, 22)
    assert (matmul.op_span.col, matmul.op_span.end_col) == (19, 20)
    kw = call.kwargs[0]
    assert (kw.span.col, kw.span.end_col) == (24, 33)
    assert (stmt.name.span.col, stmt.name.span.end_col) == (5, 6)
    assert call.span.source is not None and call.span.file == "<string>"


def test_parentheses_belong_to_the_span() -> None:
    e = value_of("(a + b)")
    assert e.span.end_col - e.span.col == len("(a + b)")


def test_multiline_span() -> None:
    (stmt,) = body("program p() {\n y = f(a,\n   b)\n}")
    assert (stmt.value.span.line, stmt.value.span.end_line) == (2, 3)


# --- the fast path agrees with lark --------------------------------------------------------


def _lark_tokens(text: str) -> list[tuple] | None:
    try:
        return [(t.type, t.value, t.line, t.column) for t in grammar().lark.lex(text)]
    except UnexpectedInput:
        return None


def _fast_tokens(text: str) -> list[tuple] | None:
    g = grammar()
    try:
        toks = tokenize(text, g.punctuation, g.keywords)
    except LexError:
        return None
    return [(t.type, t.value, t.line, t.column) for t in toks[:-1]]


def test_tokenizer_matches_lark_on_the_models() -> None:
    for path in MODELS:
        text = path.read_text()
        assert _fast_tokens(text) == _lark_tokens(text)


_ALPHABET = string.ascii_letters[:8] + 'xX_0189.eE+-*/%@()[]{},:;=|>"\\# \t\n\r'
_WORDS = ["input", "param", "at", "after", "on", "inputs", "0x1f", "1.5e3", "1..4", "|>", "\n"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.text(_ALPHABET, max_size=6), st.sampled_from(_WORDS)), max_size=30))
def test_tokenizer_matches_lark_on_any_text(parts: list[str]) -> None:
    text = "".join(parts)
    assert _fast_tokens(text) == _lark_tokens(text)


def _accepted_by_lark(text: str) -> bool:
    try:
        grammar().lark.parse(text)
    except UnexpectedInput:
        return False
    return True


def _accepted_by_fast_path(text: str) -> bool:
    try:
        parse_module(text)
    except RtgSyntaxError:
        return False
    return True


_PIECES = [
    "program p() {", "fn f(x) {", "}", "\n", ";", "y", "=", "x", "@", "+", "-", "(", ")", "[",
    "]", ",", "|>", "relu", "input", ":", "f32", "1", "2.5", "for", "in", "..", "on", "record",
    "e", "after", "callback", '"c"', "return", "output", "=", "k", "@direct", "buffer", "at",
]  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=25))
def test_fast_path_accepts_exactly_what_lark_accepts(pieces: list[str]) -> None:
    text = " ".join(pieces)
    assert _accepted_by_fast_path(text) == _accepted_by_lark(text)


def test_a_line_starting_with_an_infix_operator_continues_the_expression() -> None:
    (stmt,) = body("program p() {\n y = a\n   + b\n   * c\n   - d\n}")
    assert shape(stmt.value) == ("-", ("+", "a", ("*", "b", "c")), "d")


# --- @precision(…): one token, on both paths ---------------------------------------------

_AT_WORDS = ["@precision", "@precisions", "@ precision", "precision", "@precision_", "@", "(f32)"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.text(_ALPHABET, max_size=4), st.sampled_from(_AT_WORDS)), max_size=30))
def test_tokenizer_matches_lark_around_at_precision(parts: list[str]) -> None:
    text = "".join(parts)
    assert _fast_tokens(text) == _lark_tokens(text)


_ANNOTATED = [*_PIECES, "@precision", "@precision(f16)", "(f32)", "precision", "@precisions"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_ANNOTATED), max_size=25))
def test_fast_path_accepts_exactly_what_lark_accepts_with_annotations(pieces: list[str]) -> None:
    text = " ".join(pieces)
    assert _accepted_by_fast_path(text) == _accepted_by_lark(text)


@pytest.mark.parametrize(
    "text",
    [
        "program p() { y = x @precision(f16) }",
        "program p() {\n y = a\n   @ b @precision(bf16)\n}",
        "program p() { output y = relu(x) @precision(f32); z = y @precision(int8) }",
        "program p() { y = x @precision(f16)\n}",
    ],
)
def test_annotated_bindings_parse_on_both_paths(text: str) -> None:
    assert _accepted_by_fast_path(text) and _accepted_by_lark(text)


@pytest.mark.parametrize(
    "text",
    [
        "program p() { y = x\n @precision(f16) }",  # a separator before it stays
        "program p() { y = x; @precision(f16) }",
        "program p() { y = (x @precision(f16)) }",
        "program p() { y = x @precision f16 }",
        "program p() { output y @precision(f16) }",
        "program p() { input x : f32 @precision(f16) }",
    ],
)
def test_misplaced_annotations_are_refused_on_both_paths(text: str) -> None:
    assert not _accepted_by_fast_path(text) and not _accepted_by_lark(text)
