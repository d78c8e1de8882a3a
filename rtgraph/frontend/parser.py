"""Text → :mod:`~rtgraph.frontend.ast`: the grammar, the fast LALR driver, the slow error path.

The grammar (``grammars/rtg.lark``, installed as the package ``rtgraph.grammars``) is compiled
by lark once per process.

Parsing itself does not go through lark's generic parser loop, which at several microseconds a
token could not read a 10,000-line program in well under a second: the text is tokenized by
:mod:`~rtgraph.frontend.lexer`, a block of lines at a time (the token list of the whole text
is never held), and driven through lark's own LALR table by :func:`_drive`, which calls
:class:`~rtgraph.frontend.build_ast.AstBuilder` on each reduction, so no parse tree is ever
built and the lark tree never leaves this module. When the fast path fails, lark's parser runs
on the same text, and its exception becomes a worded error
(:mod:`~rtgraph.frontend.syntax_errors`). Tests check that both paths tokenize alike and accept
the same texts.

A syntax error stops the parse (it is reported alone); malformed literals are collected and
reported with the checker's errors.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Iterator
from importlib import resources
from itertools import chain
from pathlib import Path

from lark import Lark
from lark import Token as LarkToken
from lark.exceptions import UnexpectedInput
from lark.parsers.lalr_analysis import Shift

from rtgraph.errors import RtgError, RtgSyntaxError, Source, Span
from rtgraph.frontend import ast
from rtgraph.frontend.build_ast import INT_LIMIT, AstBuilder
from rtgraph.frontend.lexer import (
    AT_WORD_PATTERN,
    AT_WORDS,
    LexError,
    Token,
    TooManyTokens,
    scan,
)
from rtgraph.frontend.syntax_errors import syntax_error

__all__ = ["INT_LIMIT", "grammar", "parse_module"]

_CONTINUING = frozenset({"PIPE", "PLUS", "MINUS", "STAR", "SLASH", "PERCENT", "AT"})
_OPEN = {"LPAR": "(", "LSQB": "["}
_CLOSE = {"RPAR": "(", "RSQB": "["}
#: rtg.lark's pattern of each ``@word`` token → the word (the fast tokenizer's text for it).
_AT_WORD_PATTERNS = {AT_WORD_PATTERN.format(w): w for w in AT_WORDS}


class _Separators:
    """Lark's post-lexer (for the error path): the separator rules of :func:`tokenize`.

    Newlines and ';' end statements, except newlines inside ( ) or [ ]; runs merge; a
    separator before an infix operator is dropped.
    """

    always_accept = ("_NL", "_SEMI")

    def process(self, stream: Iterator[LarkToken]) -> Iterator[LarkToken]:
        open_brackets: list[str] = []
        pending: LarkToken | None = None
        for tok in stream:
            kind = tok.type
            if kind == "_NL" or kind == "_SEMI":
                if kind == "_NL" and open_brackets and open_brackets[-1] != "{":
                    continue
                if pending is None:
                    pending = LarkToken.new_borrow_pos("_SEP", tok.value, tok)
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


def grammar_text() -> str:
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
        grammar_text(),
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
        else:  # an ``@word`` token is a regular expression: the word, no name character after
            word = _AT_WORD_PATTERNS.get(t.pattern.value)
            if word is not None:
                punctuation[word] = t.name
    missing = [w for w in AT_WORDS if w not in punctuation]
    if missing:
        raise AssertionError(f"rtg.lark has no terminal for {missing} (lexer.AT_WORDS)")
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

    def __init__(self, tok: Token) -> None:
        super().__init__(tok[0])
        self.tok = tok


def _drive(g: _Grammar, blocks: Iterable[list[Token]], builder: AstBuilder):
    """Run the LALR automaton over the tokens of ``blocks``, building the AST with ``builder``.

    A ``?rule`` with one child (``atom`` → ``unary`` → … → ``expr``) only changes the state;
    the state such a chain of reductions ends in depends only on the two states on top of the
    stack and the lookahead, so it is found once and remembered (``chains``).
    """
    states = g.states
    # Per rule: (size, goto, callback, inlined); callback None with a goto not starting
    # with "_" is a ``?rule`` passing its one child through: only the state changes.
    reductions = [
        (r.size, r.goto, getattr(builder, r.method) if r.method else None, r.inlined)
        for r in g.rules
    ]
    passes = [r.method is None and r.size == 1 and r.goto[0] != "_" for r in g.rules]
    chains: dict[tuple[int, int, str], int] = {}
    end_state = g.end
    stack = [g.start]
    values: list = []
    push_state, push_value = stack.append, values.append
    for tok in chain.from_iterable(blocks):
        kind = tok[0]
        while True:
            top = stack[-1]
            action = states[top].get(kind)
            if action is None:
                raise _Stuck(tok)
            if action >= 0:
                push_state(action)
                push_value(tok)
                break
            if passes[~action]:
                key = (stack[-2], top, kind)
                state = chains.get(key)
                if state is None:
                    state = chains[key] = _pass_through(states, passes, reductions, key)
                stack[-1] = state
                continue
            size, goto, callback, inlined = reductions[~action]
            if size:
                children = values[-size:]
                del values[-size:]
                del stack[-size:]
                if inlined:
                    children = _splice(children, inlined)
            else:
                children = []
            value = callback(children) if callback is not None else children
            push_state(states[stack[-1]][goto])
            push_value(value)
            if kind == "$END" and stack[-1] == end_state:
                return value
    raise _Stuck(tok)  # the input ended (tok is $END) before the start rule did


def _pass_through(states: dict, passes: list[bool], reductions: list, key: tuple) -> int:
    """The state after every one-child ``?rule`` reduction the lookahead causes in a row,
    from the top two states ``key[:2]`` (the one below stays: each reduction replaces only
    the top)."""
    below, state, kind = key
    action = states[state][kind]
    while action < 0 and passes[~action]:
        state = states[below][reductions[~action][1]]
        action = states[state].get(kind, 0)
    return state


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
    blocks = scan(text, g.punctuation, g.keywords)
    try:
        try:
            items = _drive(g, blocks, builder)
        except _Stuck:
            # Tokenize the rest: a bad character or the token limit further on is what
            # tokenizing the whole text first reports, so it comes before this error.
            for _ in blocks:
                pass
            raise
    except (LexError, _Stuck) as stuck:
        where = stuck.offset if isinstance(stuck, LexError) else stuck.tok[2]
        raise _explain(g, source, builder.lines.span(where, where + 1)) from None
    except TooManyTokens as e:
        raise RtgSyntaxError(
            f"the program has more than {e.limit:,} tokens",
            builder.tok_span(e.token),
            hint="split the program; for loops and functions write repetition once",
        ) from None
    return ast.Module(items, source), builder.errors


def _explain(g: _Grammar, source: Source, where: Span) -> RtgSyntaxError:
    """The worded error for text the fast path refused (at ``where``), from lark's own
    parser."""
    try:
        g.lark.parse(source.text)
    except UnexpectedInput as e:
        return syntax_error(e, source, g.lark)
    # Unreachable while both paths agree (tests/test_parser.py checks that they do).
    return RtgSyntaxError("syntax error", where)
