"""Text → :mod:`~rtgraph.frontend.ast`: the grammar, the fast LALR driver, the slow error path.

The grammar (``grammars/rtg.lark``, installed as the package ``rtgraph.grammars``) is compiled
by lark once per process.

Parsing itself does not go through lark's generic parser loop, which at several microseconds a
token could not read a 10,000-line program in well under a second: the text is tokenized by
:mod:`~rtgraph.frontend.lexer` and driven through lark's own LALR table by :func:`_drive`,
which calls :class:`~rtgraph.frontend.build_ast.AstBuilder` on each reduction, so no parse tree
is ever built and the lark tree never leaves this module. When the fast path fails, lark's
parser runs on the same text, and its exception becomes a worded error
(:mod:`~rtgraph.frontend.syntax_errors`). Tests check that both paths tokenize alike and accept
the same texts.

A syntax error stops the parse (it is reported alone); malformed literals are collected and
reported with the checker's errors.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

from lark import Lark, Token
from lark.exceptions import UnexpectedInput
from lark.parsers.lalr_analysis import Shift

from rtgraph.errors import RtgError, RtgSyntaxError, Source, Span
from rtgraph.frontend import ast
from rtgraph.frontend.build_ast import INT_LIMIT, AstBuilder
from rtgraph.frontend.lexer import MAX_TOKENS, LexError, Tok, TooManyTokens, tokenize
from rtgraph.frontend.syntax_errors import syntax_error

__all__ = ["INT_LIMIT", "grammar", "parse_module"]

_CONTINUING = frozenset({"PIPE", "PLUS", "MINUS", "STAR", "SLASH", "PERCENT", "AT"})
_OPEN = {"LPAR": "(", "LSQB": "["}
_CLOSE = {"RPAR": "(", "RSQB": "["}


class _Separators:
    """Lark's post-lexer (for the error path): the separator rules of :func:`tokenize`.

    Newlines and ';' end statements, except newlines inside ( ) or [ ]; runs merge; a
    separator before an infix operator is dropped.
    """

    always_accept = ("_NL", "_SEMI")

    def process(self, stream: Iterator[Token]) -> Iterator[Token]:
        open_brackets: list[str] = []
        pending: Token | None = None
        for tok in stream:
            kind = tok.type
            if kind == "_NL" or kind == "_SEMI":
                if kind == "_NL" and open_brackets and open_brackets[-1] != "{":
                    continue
                if pending is None:
                    pending = Token.new_borrow_pos("_SEP", tok.value, tok)
                continue
            if pending is not None:
                if kind not in _CONTINUING:  # no statement starts with an infix operator
                    yield pending
                pending = None
            if kind in _OPEN:
                open_brackets.append(_OPEN[kind])
            elif kind == "LBRACE":
                open_brackets.append("{")
            elif kind in _CLOSE:
                if open_brackets and open_brackets[-1] == _CLOSE[kind]:
                    open_brackets.pop()
            elif kind == "RBRACE":
                while open_brackets and open_brackets.pop() != "{":
                    pass
            yield tok
        if pending is not None:
            yield pending


@dataclasses.dataclass(frozen=True)
class _Rule:
    """A grammar rule as the fast driver needs it."""

    size: int
    goto: str
    method: str | None  # the AstBuilder callback; None: the children pass on as they are
    inlined: tuple[int, ...]  # positions of inlined ``_rule`` children to splice


@dataclasses.dataclass(frozen=True)
class _Grammar:
    """The compiled grammar: lark's parser (for error reports) and its LALR tables."""

    lark: Lark
    states: dict[int, dict[str, int]]  # shift: state >= 0; reduce: ~rule index
    rules: tuple[_Rule, ...]
    start: int
    end: int
    punctuation: dict[str, str]
    keywords: dict[str, str]


def _grammar_text() -> str:
    """The grammar's source: package data of an installed rtgraph, or, when rtgraph runs from a
    source checkout that was not installed, the repository's own ``grammars/``."""
    try:
        found = resources.files("rtgraph.grammars").joinpath("rtg.lark")
    except ModuleNotFoundError:
        found = Path(__file__).resolve().parents[2] / "grammars" / "rtg.lark"
    return found.read_text(encoding="utf-8")


@functools.cache
def grammar() -> _Grammar:
    """The grammar, compiled once per process."""
    parser = Lark(
        _grammar_text(),
        parser="lalr",
        lexer="basic",
        keep_all_tokens=True,
        propagate_positions=False,
        maybe_placeholders=False,
        postlex=_Separators(),
    )
    # lark's LALR table (an internal of lark 1.x, pinned by tests/test_parser.py).
    table = parser.parser.parser._parse_table
    index: dict[object, int] = {}
    rules: list[_Rule] = []
    states: dict[int, dict[str, int]] = {}
    for state, actions in table.states.items():
        row: dict[str, int] = {}
        for symbol, (action, arg) in actions.items():
            symbol = str(symbol)  # lark's Token compares slowly; the keys are plain names
            if action is Shift:
                row[symbol] = arg
                continue
            if arg not in index:
                index[arg] = len(rules)
                rules.append(_rule(arg))
            row[symbol] = ~index[arg]
        states[state] = row
    punctuation: dict[str, str] = {}
    keywords: dict[str, str] = {}
    for t in parser.terminals:
        if t.pattern.type == "str":
            target = keywords if t.pattern.value.isidentifier() else punctuation
            target[t.pattern.value] = t.name
    return _Grammar(
        parser,
        states,
        tuple(rules),
        table.start_states["start"],
        table.end_states["start"],
        punctuation,
        keywords,
    )


def _rule(rule) -> _Rule:
    name = rule.origin.name
    inlined = tuple(
        i for i, sym in enumerate(rule.expansion) if not sym.is_term and sym.name.startswith("_")
    )
    size = len(rule.expansion)
    if name.startswith("_"):
        method = None  # inlined into its parent: a list of children to splice
    elif rule.options.expand1 and not rule.alias:
        if size != 1:
            raise AssertionError(f"rtg.lark: alternative of ?{name} needs an alias")
        method = None  # ?rule with one child: the driver passes the child through
    else:
        method = rule.alias or name
    return _Rule(size, str(name), method, inlined)


class _Stuck(Exception):
    """The fast driver met a token the table has no action for."""

    def __init__(self, tok: Tok) -> None:
        super().__init__(tok.type)
        self.tok = tok


def _drive(g: _Grammar, tokens: list[Tok], builder: AstBuilder):
    """Run the LALR automaton over ``tokens``, building the AST with ``builder``."""
    states = g.states
    # Per rule: (size, goto, callback, inlined); callback None with a goto not starting
    # with "_" is a ``?rule`` passing its one child through: only the state changes.
    reductions = [
        (r.size, r.goto, getattr(builder, r.method) if r.method else None, r.inlined)
        for r in g.rules
    ]
    end_state = g.end
    stack = [g.start]
    values: list = []
    for tok in tokens:
        kind = tok.type
        while True:
            action = states[stack[-1]].get(kind)
            if action is None:
                raise _Stuck(tok)
            if action >= 0:
                stack.append(action)
                values.append(tok)
                break
            size, goto, callback, inlined = reductions[~action]
            if callback is None and size == 1 and goto[0] != "_":
                stack[-1] = states[stack[-2]][goto]
                continue
            if size:
                children = values[-size:]
                del values[-size:]
                del stack[-size:]
                if inlined:
                    children = _splice(children, inlined)
            else:
                children = []
            value = callback(children) if callback is not None else children
            stack.append(states[stack[-1]][goto])
            values.append(value)
            if kind == "$END" and stack[-1] == end_state:
                return value
    raise _Stuck(tokens[-1])


def _splice(children: list, positions: tuple[int, ...]) -> list:
    # A left-recursive list rule (``x (sep x)*``) splices its own previous list at position 0:
    # extending that list in place keeps long statement lists linear.
    out: list = children[0] if positions[0] == 0 else [children[0]]
    for i in range(1, len(children)):
        if i in positions:
            out.extend(children[i])
        else:
            out.append(children[i])
    return out


def parse_module(text: str, filename: str = "<string>") -> tuple[ast.Module, list[RtgError]]:
    """The AST of ``text`` and the (recoverable) literal errors found while building it.

    Raises :class:`RtgSyntaxError` for text that is not in the grammar.
    """
    source = Source(filename, text)
    g = grammar()
    builder = AstBuilder(source)
    try:
        items = _drive(g, tokenize(text, g.punctuation, g.keywords), builder)
    except (LexError, _Stuck) as stuck:
        raise _explain(g, source, stuck) from None
    except TooManyTokens as e:
        raise RtgSyntaxError(
            f"the program has more than {MAX_TOKENS:,} tokens",
            Span(source, e.line, e.column, e.line, e.end_column),
            hint="split the program; for loops and functions write repetition once",
        ) from None
    return ast.Module(items, source), builder.errors


def _explain(g: _Grammar, source: Source, stuck: LexError | _Stuck) -> RtgSyntaxError:
    """The worded error for text the fast path refused, from lark's own parser."""
    try:
        g.lark.parse(source.text)
    except UnexpectedInput as e:
        return syntax_error(e, source, g.lark)
    # Unreachable while both paths agree (tests/test_parser.py checks that they do).
    where = stuck if isinstance(stuck, LexError) else stuck.tok
    line, column = where.line, where.column
    return RtgSyntaxError("syntax error", Span(source, line, column, line, column + 1))
