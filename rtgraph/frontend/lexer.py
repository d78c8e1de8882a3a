"""The tokenizer of the fast parse path: one compiled regular expression, statement separators.

It produces exactly the tokens lark's own lexer and the separator post-lexer give for the
grammar in ``rtg.lark`` (tests compare the two on the models and on random text), but several
times faster: a 10,000-line program must parse in well under a second. Statements end at a
newline or ';' (both become ``_SEP``); newlines inside ``( )`` and ``[ ]`` are dropped, runs of
separators merge, and a separator before an infix operator (``|> + - * / % @``) is dropped:
no statement starts with one, so such a line continues the expression above it. Any character
the grammar does not know stops the fast path (the caller then asks lark for a properly worded
error).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_MASTER = re.compile(
    r"""
    (?P<WS>[ \t\r]+)
    |(?P<COMMENT>\#[^\n]*)
    |(?P<NL>\n)
    |(?P<HEX>0[xX][0-9a-fA-F][0-9a-fA-F_]*)
    |(?P<FLOAT>[0-9][0-9_]*\.[0-9][0-9_]*(?:[eE][+-]?[0-9]+)?|[0-9][0-9_]*[eE][+-]?[0-9]+)
    |(?P<INT>[0-9][0-9_]*)
    |(?P<NAME>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<STRING>"[^"\\\n]*(?:\\.[^"\\\n]*)*")
    |(?P<PUNCT>\|>|\.\.|[-+*/%@()\[\]{},:;=])
    """,
    re.VERBOSE,
)


#: Tokens one program may have (a 50,000-line program has about 400,000): the token list and
#: the tree built from it grow with them, so they are counted as they are made.
MAX_TOKENS = 1_000_000

#: Infix operators: a line that starts with one continues the expression above it.
_CONTINUING = frozenset({"|>", "+", "-", "*", "/", "%", "@"})


class Tok:
    """A token: terminal name, text and 1-based position (tokens never span lines)."""

    __slots__ = ("column", "end_column", "end_line", "line", "type", "value")

    def __init__(self, type_: str, value: str, line: int, column: int, end_column: int) -> None:
        self.type = type_
        self.value = value
        self.line = line
        self.end_line = line
        self.column = column
        self.end_column = end_column

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return f"Tok({self.type}, {self.value!r}, {self.line}:{self.column})"


class LexError(Exception):
    """A character no token starts with, at ``line``:``column``."""

    def __init__(self, line: int, column: int) -> None:
        super().__init__(f"unexpected character at {line}:{column}")
        self.line = line
        self.column = column


class TooManyTokens(Exception):
    """The text has more than :data:`MAX_TOKENS` tokens; the one past them is at ``line``."""

    def __init__(self, line: int, column: int, end_column: int) -> None:
        super().__init__(f"more than {MAX_TOKENS} tokens at {line}:{column}")
        self.line = line
        self.column = column
        self.end_column = end_column


def tokenize(text: str, punctuation: Mapping[str, str], keywords: Mapping[str, str]) -> list[Tok]:
    """The token list of ``text``, separators resolved, ending with a ``$END`` token.

    ``punctuation`` and ``keywords`` map token text to the grammar's terminal names. Raises
    :class:`LexError` at a character no token starts with, :class:`TooManyTokens` past
    :data:`MAX_TOKENS`.
    """
    match = _MASTER.match
    tokens: list[Tok] = []
    append = tokens.append
    brackets: list[str] = []
    pending: Tok | None = None
    pos, end = 0, len(text)
    line, line_start = 1, 0
    while pos < end:
        m = match(text, pos)
        if m is None:
            raise LexError(line, pos - line_start + 1)
        kind = m.lastgroup
        value = m.group()
        column = pos - line_start + 1
        pos = m.end()
        if kind == "WS" or kind == "COMMENT":
            continue
        if kind == "NL":
            if pending is None and not (brackets and brackets[-1] != "{"):
                pending = Tok("_SEP", value, line, column, column + 1)
            line += 1
            line_start = pos
            continue
        if kind == "NAME":
            kind = keywords.get(value, "NAME")
        elif kind == "PUNCT":
            if value == ";":
                if pending is None:
                    pending = Tok("_SEP", value, line, column, column + 1)
                continue
            kind = punctuation[value]
            if value in "([{":
                brackets.append(value)
            elif value == ")" or value == "]":
                if brackets and brackets[-1] == ("(" if value == ")" else "["):
                    brackets.pop()
            elif value == "}":
                while brackets and brackets.pop() != "{":
                    pass
        if pending is not None:
            if value not in _CONTINUING:  # no statement starts with an infix operator
                append(pending)
            pending = None
        append(Tok(kind, value, line, column, column + len(value)))
        if len(tokens) > MAX_TOKENS:
            raise TooManyTokens(line, column, column + len(value))
    if pending is not None:
        append(pending)
    column = pos - line_start + 1
    append(Tok("$END", "", line, column, column + 1))
    return tokens
