"""The tokenizer of the fast parse path: one regular expression, statement separators.

It produces exactly the tokens lark's own lexer and the separator post-lexer give for the
grammar in ``rtg.lark`` (tests compare the two on the models and on random text), but many
times faster. Statements end at a newline or ';' (both become ``_SEP``); newlines inside
``( )`` and ``[ ]`` are dropped, runs of separators merge, and a separator before an infix
operator (``|> + - * / % @``) is dropped: no statement starts with one, so such a line
continues the expression above it. ``@precision`` not followed by a name character is one
token (the annotation ``h = x @ w @precision(f32)``), not the matmul ``@``; a separator before
it stays, so an annotation cannot join the line above. Any character the grammar does not know
stops the fast path (the caller then asks lark for a properly worded error).

:func:`scan` gives the tokens as ``(kind, text, offset)`` tuples, a list per block of lines,
so that the parser reads a program of any size in bounded memory and no line or column is
worked out until a message needs one (:mod:`~rtgraph.frontend.positions`).
:func:`tokenize` gives them as :class:`Tok` objects with lines and columns, for tests and
tools.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from rtgraph.frontend import limits

#: Words written with a leading ``@`` that are one token each when no name character follows
#: (rtg.lark's ``AT_PRECISION: /@precision(?![A-Za-z0-9_])/``); ``@ precision`` and
#: ``@precisions`` are the matmul ``@`` and a name.
AT_WORDS = ("@precision",)
AT_WORD_PATTERN = "{}(?![A-Za-z0-9_])"

#: Blanks and comments (group 1), then one token or any other character (group 2; empty only
#: at the end). ``findall`` over it walks the text without a gap: every position matches.
_MASTER = re.compile(
    r"""
    ((?:[ \t\r]+|\#[^\n]*)*)
    (
        0[xX][0-9a-fA-F][0-9a-fA-F_]*
        |[0-9][0-9_]*\.[0-9][0-9_]*(?:[eE][+-]?[0-9]+)?|[0-9][0-9_]*[eE][+-]?[0-9]+
        |[0-9][0-9_]*
        |[A-Za-z_][A-Za-z0-9_]*
        |"[^"\\\n]*(?:\\.[^"\\\n]*)*"
        |AT_WORDS
        |\|>|\.\.|[-+*/%@()\[\]{},:;=\n]
        |[\s\S]
    )?
    """.replace("AT_WORDS", "|".join(AT_WORD_PATTERN.format(w) for w in AT_WORDS)),
    re.VERBOSE,
)

#: Characters of text the tokenizer reads in one ``findall`` (a block ends at a line break).
_BLOCK = 1 << 16

#: Tokens one program may have (``RTGRAPH_MAX_TOKENS`` overrides it): the syntax tree grows
#: with them, so they are counted as they are made.
MAX_TOKENS = 1_000_000

#: Infix operators: a line that starts with one continues the expression above it.
_CONTINUING = frozenset({"|>", "+", "-", "*", "/", "%", "@"})
_NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_DIGITS = frozenset("0123456789")
#: Tokens that open or close brackets or end statements: the separator rules look at them.
_STRUCTURE = frozenset("()[]{};\n")

Token = tuple[str, str, int]  # (terminal name, text, offset of its first character)


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
    """A character no token starts with, at ``offset``."""

    def __init__(self, offset: int) -> None:
        super().__init__(f"unexpected character at offset {offset}")
        self.offset = offset


class TooManyTokens(Exception):
    """The text has more than :data:`MAX_TOKENS` tokens; ``token`` is the one past them."""

    def __init__(self, token: Token, limit: int) -> None:
        super().__init__(f"more than {limit} tokens at offset {token[2]}")
        self.token = token
        self.limit = limit


def scan(
    text: str, punctuation: Mapping[str, str], keywords: Mapping[str, str]
) -> Iterator[list[Token]]:
    """The tokens of ``text``, separators resolved, in lists (a block of lines each), the last
    ending with a ``$END`` token.

    ``punctuation`` and ``keywords`` map token text to the grammar's terminal names. Raises
    :class:`LexError` at a character no token starts with, :class:`TooManyTokens` past
    :data:`MAX_TOKENS` (read when the scan starts).
    """
    kinds = {**punctuation, **keywords, "\n": "_NL"}
    findall = _MASTER.findall
    limit = limits.effective(limits.TOKENS, MAX_TOKENS)
    room = limit
    brackets: list[str] = []
    pending: Token | None = None
    pos, end = 0, len(text)
    while True:
        stop = text.find("\n", pos + _BLOCK)
        stop = end if stop < 0 else stop + 1
        out: list[Token] = []
        append = out.append
        for blank, value in findall(text, pos, stop):
            if blank:
                pos += len(blank)
            if not value:
                continue
            start = pos
            pos += len(value)
            kind = kinds.get(value)
            if kind is None:
                c = value[0]
                if c in _NAME_START:
                    kind = "NAME"
                elif c in _DIGITS:
                    kind = _number_kind(value)
                elif c == '"' and len(value) > 1:
                    kind = "STRING"
                else:  # tokens up to here may pass the limit first, as if counted first
                    _too_many(out, room - len(out), limit)
                    raise LexError(start)
            elif value in _STRUCTURE:
                if value == "\n" or value == ";":
                    if pending is None and not (value == "\n" and brackets and brackets[-1] != "{"):
                        pending = ("_SEP", value, start)
                    continue
                if value in "([{":
                    brackets.append(value)
                elif value == "}":
                    while brackets and brackets.pop() != "{":
                        pass
                elif brackets and brackets[-1] == ("(" if value == ")" else "["):
                    brackets.pop()
            if pending is not None:
                if value not in _CONTINUING:  # no statement starts with an infix operator
                    append(pending)
                pending = None
            append((kind, value, start))
        room -= len(out)
        if room < 0:
            _too_many(out, room, limit)
        if pos < end:
            yield out
            continue
        if pending is not None:
            out.append(pending)
        out.append(("$END", "", end))
        yield out
        return


def _number_kind(value: str) -> str:
    if len(value) > 1 and value[1] in "xX":
        return "HEX"
    if "." in value or "e" in value or "E" in value:
        return "FLOAT"
    return "INT"


def _too_many(block: list[Token], room: int, limit: int) -> None:
    """Raise :class:`TooManyTokens` at the first token (not a separator) past the limit in
    ``block``, the block that took the count ``-room`` tokens past it."""
    if room >= 0:
        return
    first_past = max(0, len(block) + room)  # the first token in block past the limit
    for token in block[first_past:]:
        if token[0] != "_SEP":
            raise TooManyTokens(token, limit)


def tokenize(text: str, punctuation: Mapping[str, str], keywords: Mapping[str, str]) -> list[Tok]:
    """The tokens of :func:`scan` as :class:`Tok` objects with lines and columns."""
    tokens: list[Tok] = []
    line, line_start, counted = 1, 0, 0
    for block in scan(text, punctuation, keywords):
        for kind, value, start in block:
            line += text.count("\n", counted, start)
            line_start = text.rfind("\n", 0, start) + 1
            counted = start
            column = start - line_start + 1
            tokens.append(Tok(kind, value, line, column, column + max(1, len(value))))
    return tokens
