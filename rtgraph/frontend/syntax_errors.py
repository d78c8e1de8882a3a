"""Syntax errors in words: what the parser expected, what it found, and a hint.

On the rare text the fast path refuses, lark's own parser is run to get its
``UnexpectedInput``; this module turns that into an :class:`~rtgraph.errors.RtgSyntaxError`
with the expected tokens said as a person would (``expected ')' or ','``, ``expected an
expression``), the offending token underlined, and a hint for the common slips.
"""

from __future__ import annotations

import re

from lark import Lark, Token
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from rtgraph.errors import RtgSyntaxError, Source, Span
from rtgraph.frontend.build_ast import short

_WORDS = {
    "NAME": "a name",
    "INT": "a number",
    "HEX": "a number",
    "FLOAT": "a number",
    "STRING": "a string",
    "_SEP": "a line break",
    "AT_PRECISION": "'@precision'",
    "$END": "end of file",
}
_EXPRESSION_START = {"NAME", "INT", "HEX", "FLOAT", "STRING", "LPAR", "LSQB", "MINUS", "FUSED"}
_STATEMENT_START = {
    "INPUT", "PARAM", "CONST", "BUFFER", "OUTPUT", "STREAM", "EVENT", "ON",
    "RECORD", "WAIT", "BARRIER", "SYNC", "CALLBACK", "FOR", "RETURN", "DEVICE",
    "GRAPH", "REPLAY",
}  # fmt: skip
_CONTINUATIONS = {"PLUS", "MINUS", "STAR", "SLASH", "PERCENT", "AT", "PIPE", "LPAR", "LSQB"}


def _terminal_word(name: str, parser: Lark) -> str:
    if name in _WORDS:
        return _WORDS[name]
    try:
        pattern = parser.get_terminal(name).pattern
    except KeyError:
        return name.lower()
    return f"'{pattern.value}'" if pattern.type == "str" else name.lower()


def expected_words(expected: set[str], parser: Lark) -> list[str]:
    """The expected terminals said in words, grouped (expression, statement) and ordered."""
    pending = set(expected)
    words: list[str] = []
    if {"NAME", "INPUT", "RECORD"} <= pending:
        words.append("a statement")
        pending -= _STATEMENT_START | {"NAME"}
    if {"NAME", "INT", "LPAR", "LSQB"} <= pending:
        words.append("an expression")
        pending -= _EXPRESSION_START | {"AFTER"}
    if {"DEVICE", "FN", "PROGRAM"} <= pending:
        words.append("'program', 'fn' or 'device'")
        pending -= {"DEVICE", "FN", "PROGRAM", "_SEP", "$END"}
    if "PLUS" in pending:  # the state could continue an expression: operators are noise
        continuations = pending & (_CONTINUATIONS | {"EQUAL", "AT_PRECISION"})
        others = pending - continuations
        if not others and not words:
            words.append("an operator")
        pending = others
    said = {_terminal_word(t, parser) for t in pending}
    quoted = sorted(w for w in said if w.startswith("'"))
    plain = sorted(w for w in said if not w.startswith("'"))
    return quoted + words + plain


def _join(words: list[str]) -> str:
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " or " + words[-1]


def _found(tok: Token) -> str:
    kind = tok.type
    if kind == "$END":
        return "end of file"
    if kind == "_SEP":
        return "';'" if tok.value == ";" else "end of line"
    if kind == "NAME":
        return f"name '{tok}'"
    if kind in ("INT", "HEX", "FLOAT"):
        return f"number {short(str(tok))}"
    if kind == "STRING":
        return f"string {short(str(tok))}"
    return f"'{tok}'"


def _end_span(source: Source) -> Span:
    lines = source.text.split("\n")
    line = len(lines)
    col = len(lines[-1]) + 1
    return Span(source, line, col, line, col + 1)


def syntax_error(e: UnexpectedInput, source: Source, parser: Lark) -> RtgSyntaxError:
    """A lark parse failure as a located error with the expected tokens in words."""
    if isinstance(e, UnexpectedCharacters):
        char = source.text[e.pos_in_stream] if e.pos_in_stream < len(source.text) else ""
        span = Span(source, e.line, e.column, e.line, e.column + 1)
        if char == '"':
            return RtgSyntaxError(
                "unterminated string", span, hint='a string ends with " on the same line'
            )
        shown = repr(char) if char.isprintable() else repr(char).strip("'")
        if not char.isprintable():
            shown = f"'{shown}'"
        return RtgSyntaxError(f"unexpected character {shown}", span)
    if isinstance(e, UnexpectedToken):
        tok = e.token
        if tok.type == "$END" or not tok.line or tok.line < 1:
            span = _end_span(source)
        elif tok.type == "_SEP":
            span = Span(source, tok.line, tok.column, tok.line, tok.column + 1)
        else:
            span = Span(source, tok.line, tok.column, tok.end_line, tok.end_column)
        expected = _accepted(e)
        words = expected_words(expected, parser)
        message = f"expected {_join(words)}, found {_found(tok)}" if words else "syntax error"
        return RtgSyntaxError(message, span, hint=_syntax_hint(tok, expected, source))
    span = _end_span(source)
    return RtgSyntaxError("unexpected end of file", span)


def _accepted(e: UnexpectedToken) -> set[str]:
    """The terminals the parser would really accept here.

    LALR merges the lookaheads of states with the same core, so ``e.expected`` may list tokens
    valid only in other contexts; feeding each candidate to a copy of the parser settles it.
    """
    if e.interactive_parser is not None:
        try:
            return set(e.interactive_parser.accepts())
        except UnexpectedInput:
            pass
    return set(e.expected)


_KEYWORDS = {
    "INPUT", "PARAM", "CONST", "BUFFER", "OUTPUT", "STREAM", "EVENT", "ON", "RECORD", "WAIT",
    "BARRIER", "SYNC", "CALLBACK", "FOR", "RETURN", "DEVICE", "FN", "PROGRAM", "AFTER",
    "BLOCKING", "IN", "FUSED", "GRAPH", "REPLAY", "DYN",
}  # fmt: skip


#: The text of a line up to a token inside an unfinished ``@precision(…)`` annotation.
_IN_ANNOTATION = re.compile(r"@precision[ \t]*(\([ \t]*[A-Za-z0-9_]*[ \t]*)?$")


#: A program parameter's ``dyn`` and what follows it, up to the token in error.
_AFTER_DYN = re.compile(r":\s*dyn\b[^{}]*$")


def _syntax_hint(tok: Token, expected: set[str], source: Source) -> str | None:
    if tok.type == "AT_PRECISION":
        return (
            "@precision(…) ends a binding or an output, after its whole expression on the same "
            "line: h = x @ w @precision(f32) (with a space, `@ precision` is a matmul)"
        )
    if tok.type != "$END" and tok.start_pos is not None:
        text = source.text
        before = text[text.rfind("\n", 0, tok.start_pos) + 1 : tok.start_pos]
        if _IN_ANNOTATION.search(before):
            return "write the precision in parentheses: @precision(f32) (or f16, bf16, int8)"
    if tok.type != "$END" and tok.start_pos is not None:
        before = source.text[: tok.start_pos]
        if _AFTER_DYN.search(before[before.rfind("(") + 1 :]):
            return (
                "a dynamic parameter lists its gears in braces, B: dyn {1, 2, 4, 8}, or gives "
                "a range, B: dyn 1..64"
            )
    if tok.type == "EQUAL" and expected == {"NAME"}:
        return "is the name before '=' a keyword? keywords cannot be used as names"
    if tok.type == "EQUAL" and "EQUAL" not in expected:
        return "'=' binds a name (`y = expr`); there is no comparison operator"
    if tok.type in _KEYWORDS and "NAME" in expected:
        return f"'{tok}' is a keyword and cannot be used as a name"
    closers = expected & {"RPAR", "RSQB"}
    if closers and tok.type not in ("$END", "_SEP") and tok.line and tok.line > 1:
        before = source.text.split("\n")[tok.line - 1][: tok.column - 1]
        if not before.strip():
            bracket = "(" if "RPAR" in closers else "["
            return (
                f"is a '{bracket}' on an earlier line left open? inside brackets a line break "
                "does not end a statement"
            )
    return None
