"""Grammar reductions → :mod:`~rtgraph.frontend.ast` nodes, each with its exact span.

The LALR driver in :mod:`~rtgraph.frontend.parser` calls one :class:`AstBuilder` method per
grammar rule (named after the rule or its alias) with all of the rule's children — tokens
(``(kind, text, offset)`` tuples, :mod:`~rtgraph.frontend.lexer`) included, so every node's
span runs exactly from its first token to its last. A span is a
:class:`~rtgraph.frontend.positions.SourceSpan` (two offsets; a line and a column only when
asked). Pipes are desugared here (``x |> f(a)`` is the call ``f(x, a)``). Malformed literals
(``1e999``, an integer beyond 2**63 - 1) are collected as errors and stand as numbers without a
value, which the checker treats as already reported.
"""

from __future__ import annotations

import dataclasses
import re

from rtgraph.errors import RtgError, RtgSyntaxError, Source
from rtgraph.frontend import ast
from rtgraph.frontend.lexer import Token
from rtgraph.frontend.positions import Lines, SourceSpan

#: Largest integer literal; compile-time arithmetic stays below it too.
INT_LIMIT = 2**63 - 1

_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}


def _unescape(body: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), body)


@dataclasses.dataclass(frozen=True)
class _Block:
    """A braced statement list, kept only until its owner takes the statements."""

    stmts: tuple
    span: SourceSpan


def _nodes(children: list) -> list:
    """The children that are AST nodes (tokens, the tuples, dropped)."""
    return [c for c in children if type(c) is not tuple]


def _tokens(children: list, kind: str) -> list[Token]:
    return [c for c in children if type(c) is tuple and c[0] == kind]


class AstBuilder:
    """Lark callbacks, one per grammar rule, each returning an AST node."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.lines = Lines(source)
        self.errors: list[RtgError] = []

    # --- spans -----------------------------------------------------------------------------
    def tok_span(self, tok: Token) -> SourceSpan:
        start = tok[2]
        return SourceSpan(self.lines, start, start + len(tok[1]))

    def span(self, children: list) -> SourceSpan:
        first, last = children[0], children[-1]
        start = first[2] if type(first) is tuple else first.span.start_offset
        end = last[2] + len(last[1]) if type(last) is tuple else last.span.end_offset
        return SourceSpan(self.lines, start, end)

    def ident(self, tok: Token) -> ast.Ident:
        return ast.Ident(tok[1], self.tok_span(tok))

    def names(self, children: list) -> list[ast.Ident]:
        return [self.ident(t) for t in _tokens(children, "NAME")]

    # --- items -----------------------------------------------------------------------------
    def start(self, children: list) -> tuple:
        return tuple(_nodes(children))

    def device(self, c: list) -> ast.DeviceDirective:
        return ast.DeviceDirective(self.string(c[1:2]).value, self.span(c))

    def fn_def(self, c: list) -> ast.FnDef:
        names = self.names(c)
        return ast.FnDef(names[0], tuple(names[1:]), c[-1].stmts, self.span(c))

    def program_def(self, c: list) -> ast.ProgramDef:
        params = tuple(n for n in c if isinstance(n, ast.ProgramParam))
        return ast.ProgramDef(self.ident(c[1]), params, c[-1].stmts, self.span(c))

    def prog_param(self, c: list) -> ast.ProgramParam:
        gears = next((n for n in c if isinstance(n, ast.GearSet)), None)
        equals = len(c) >= 3 and type(c[-2]) is tuple and c[-2][1] == "="
        default = c[-1] if equals else None
        return ast.ProgramParam(self.ident(c[0]), default, self.span(c), gears)

    def gear_set(self, c: list) -> ast.GearSet:
        return ast.GearSet(tuple(_nodes(c)), self.span(c))

    def gear_range(self, c: list) -> ast.GearSet:
        return ast.GearSet((c[0], c[2]), self.span(c), range=True)

    def block(self, c: list) -> _Block:
        return _Block(tuple(_nodes(c)), self.span(c))

    # --- statements ------------------------------------------------------------------------
    def input_decl(self, c: list) -> ast.InputDecl:
        hint = c[4] if len(c) > 4 else None
        return ast.InputDecl(self.ident(c[1]), c[3], hint, self.span(c))

    def param_decl(self, c: list) -> ast.ParamDecl:
        nodes = _nodes(c)
        count = nodes[0] if len(nodes) > 1 and not isinstance(nodes[0], ast.TypeExpr) else None
        rest = nodes[1:] if count is not None else nodes
        return ast.ParamDecl(self.ident(c[1]), count, rest[0], tuple(rest[1:]), self.span(c))

    def alloc_hint(self, c: list) -> ast.Ident:
        return ast.Ident(c[1][1], self.span(c))

    def type(self, c: list) -> ast.TypeExpr:
        dims = tuple(_nodes(c)) if len(c) > 1 else None
        return ast.TypeExpr(self.ident(c[0]), dims, self.span(c))

    def const_decl(self, c: list) -> ast.ConstDecl:
        return ast.ConstDecl(self.ident(c[1]), c[3], self.span(c))

    def buffer_decl(self, c: list) -> ast.BufferDecl:
        address = c[5] if len(c) > 5 else None
        return ast.BufferDecl(self.ident(c[1]), c[3], address, self.span(c))

    def binding(self, c: list) -> ast.Binding:
        precision = c[3] if len(c) > 3 else None
        return ast.Binding(self.ident(c[0]), c[2], self.span(c), precision)

    def output(self, c: list) -> ast.Output:
        value = c[3] if len(c) > 3 else None
        precision = c[4] if len(c) > 4 else None
        return ast.Output(self.ident(c[1]), value, self.span(c), precision)

    def precision(self, c: list) -> ast.Precision:
        return ast.Precision(self.ident(c[2]), self.span(c))

    def stream_decl(self, c: list) -> ast.StreamDecl:
        return ast.StreamDecl(tuple(_nodes(c)), self.span(c))

    def stream_item(self, c: list) -> ast.StreamItem:
        return ast.StreamItem(self.ident(c[0]), tuple(_nodes(c)), self.span(c))

    def event_decl(self, c: list) -> ast.EventDecl:
        return ast.EventDecl(tuple(_nodes(c)), self.span(c))

    def event_item(self, c: list) -> ast.EventItem:
        return ast.EventItem(self.ident(c[0]), c[2] if len(c) > 1 else None, self.span(c))

    def event_ref(self, c: list) -> ast.EventRef:
        return ast.EventRef(self.ident(c[0]), c[2] if len(c) > 1 else None, self.span(c))

    def on_block(self, c: list) -> ast.OnBlock:
        return ast.OnBlock(self.ident(c[1]), c[2].stmts, self.span(c))

    def device_block(self, c: list) -> ast.DeviceBlock:
        return ast.DeviceBlock(c[2], c[4].stmts, self.span(c))

    def record(self, c: list) -> ast.Record:
        return ast.Record(c[1], self.span(c))

    def wait(self, c: list) -> ast.Wait:
        return ast.Wait(c[1], self.span(c))

    def barrier(self, c: list) -> ast.Barrier:
        return ast.Barrier(self.span(c))

    def sync(self, c: list) -> ast.Sync:
        return ast.Sync(c[1] if len(c) > 1 else None, self.span(c))

    def callback(self, c: list) -> ast.Callback:
        name = self.string(c[1:2]).value
        return ast.Callback(name, self.ident(c[3]), len(c) > 4, self.span(c))

    def for_loop(self, c: list) -> ast.ForLoop:
        return ast.ForLoop(self.ident(c[1]), c[3], c[5], c[6].stmts, self.span(c))

    def return_stmt(self, c: list) -> ast.Return:
        return ast.Return(c[1], self.span(c))

    def graph_def(self, c: list) -> ast.GraphDef:
        return ast.GraphDef(self.ident(c[1]), c[2].stmts, self.span(c))

    def replay(self, c: list) -> ast.Replay:
        options = tuple(n for n in c[3:] if isinstance(n, ast.Keyword))
        return ast.Replay(self.ident(c[1]), c[2], options, self.span(c))

    # --- expressions -----------------------------------------------------------------------
    def name(self, c: list) -> ast.Name:
        tok = c[0]
        return ast.Name(tok[1], self.tok_span(tok))

    def int(self, c: list) -> ast.Number:
        tok = c[0]
        span = self.tok_span(tok)
        digits = tok[1].replace("_", "")
        # Python refuses int() of very long digit strings; anything that long is too large.
        value = None if len(digits) > 40 else int(digits, 16 if tok[0] == "HEX" else 10)
        if value is None or value > INT_LIMIT:
            self.errors.append(
                RtgSyntaxError(
                    f"integer literal {short(tok[1])} is too large",
                    span,
                    hint=f"integers must be at most 2**63 - 1 = {INT_LIMIT}",
                )
            )
            return ast.Number(None, span)  # type: ignore[arg-type]
        return ast.Number(value, span)

    def float(self, c: list) -> ast.Number:
        tok = c[0]
        span = self.tok_span(tok)
        value = float(tok[1].replace("_", ""))
        if value == float("inf"):
            self.errors.append(
                RtgSyntaxError(
                    f"float literal {short(tok[1])} is out of range",
                    span,
                    hint="the largest float is about 1.8e308",
                )
            )
            return ast.Number(None, span)  # type: ignore[arg-type]
        return ast.Number(value, span)

    def string(self, c: list) -> ast.String:
        tok = c[0]
        return ast.String(_unescape(tok[1][1:-1]), self.tok_span(tok))

    def list(self, c: list) -> ast.ListExpr:
        return ast.ListExpr(tuple(_nodes(c)), self.span(c))

    def fused(self, c: list) -> ast.Fused:
        return ast.Fused(c[1].stmts, self.span(c))

    def paren(self, c: list):
        return dataclasses.replace(c[1], span=self.span(c))

    def neg(self, c: list) -> ast.Expr:
        operand = c[1]
        if isinstance(operand, ast.Number) and operand.value is not None:
            return ast.Number(-operand.value, self.span(c))
        return ast.Neg(operand, self.span(c))

    def binop(self, c: list) -> ast.BinOp:
        return ast.BinOp(c[1][1], c[0], c[2], self.span(c), self.tok_span(c[1]))

    def index(self, c: list) -> ast.Index:
        return ast.Index(self.ident(c[0]), tuple(_nodes(c)), self.span(c))

    def call(self, c: list) -> ast.Call:
        args, kwargs = self.arguments(_nodes(c))
        return ast.Call(self.ident(c[0]), tuple(args), tuple(kwargs), self.span(c))

    def pipe_name(self, c: list) -> ast.Call:
        return ast.Call(self.ident(c[2]), (c[0],), (), self.span(c), piped=True)

    def pipe_call(self, c: list) -> ast.Call:
        args, kwargs = self.arguments(_nodes(c[3:]))
        return ast.Call(self.ident(c[2]), (c[0], *args), tuple(kwargs), self.span(c), piped=True)

    def kwarg(self, c: list) -> ast.Keyword:
        return ast.Keyword(self.ident(c[0]), c[2], self.span(c))

    def arguments(self, nodes: list) -> tuple[list, list]:
        args: list = []
        kwargs: list = []
        for n in nodes:
            if isinstance(n, ast.Keyword):
                kwargs.append(n)
            elif kwargs:
                self.errors.append(
                    RtgSyntaxError(
                        "positional argument after a keyword argument",
                        n.span,
                        hint="write tensor arguments first, then name = value attributes",
                    )
                )
            else:
                args.append(n)
        return args, kwargs


def short(text: str, limit: int = 24) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
