"""The syntax tree of a .rtg file: what was written, where, before any meaning is given to it.

Nodes are dataclasses carrying the :class:`~rtgraph.errors.Span` they were written at (a lazy
:class:`~rtgraph.frontend.positions.SourceSpan`), so every later diagnostic can point at the
exact token. Pipes are already desugared (``x |> f(a)`` is the :class:`Call` ``f(x, a)``);
everything else mirrors the source. Nothing changes a node once the parser made it; nodes are
not frozen only because a frozen dataclass takes four times as long to make, and a large
program has millions of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from rtgraph.errors import Source, Span


@dataclass(slots=True)
class Ident:
    """A name as written, with its own span (declarations point here)."""

    name: str
    span: Span


# --- expressions ---------------------------------------------------------------------------


@dataclass(slots=True)
class Name:
    id: str
    span: Span


@dataclass(slots=True)
class Number:
    """An int (decimal or hex) or float literal, already converted."""

    value: int | float
    span: Span


@dataclass(slots=True)
class String:
    value: str
    span: Span


@dataclass(slots=True)
class ListExpr:
    items: tuple[Expr, ...]
    span: Span


@dataclass(slots=True)
class BinOp:
    """``left op right`` for op in ``+ - * / % @``; ``op_span`` is the operator token."""

    op: str
    left: Expr
    right: Expr
    span: Span
    op_span: Span


@dataclass(slots=True)
class Neg:
    operand: Expr
    span: Span


@dataclass(slots=True)
class Keyword:
    """``name = value`` inside a call's argument list."""

    name: Ident
    value: Expr
    span: Span


@dataclass(slots=True)
class Call:
    """``func(args..., kw = v...)``; ``piped`` when written ``args[0] |> func(...)``."""

    func: Ident
    args: tuple[Expr, ...]
    kwargs: tuple[Keyword, ...]
    span: Span
    piped: bool = False


@dataclass(slots=True)
class Index:
    """``name[i, ...]`` — an element of a param array."""

    target: Ident
    indices: tuple[Expr, ...]
    span: Span


@dataclass(slots=True)
class Fused:
    """``fused { t = ...; return expr }``: the body's ops run as one fused task."""

    body: tuple[Stmt, ...]
    span: Span


Expr = Name | Number | String | ListExpr | BinOp | Neg | Call | Index | Fused


# --- statements ----------------------------------------------------------------------------


@dataclass(slots=True)
class TypeExpr:
    """``dtype[dim, ...]``; ``dims`` is None for a bare dtype (a scalar)."""

    dtype: Ident
    dims: tuple[Expr, ...] | None
    span: Span


@dataclass(slots=True)
class InputDecl:
    name: Ident
    type: TypeExpr
    hint: Ident | None
    span: Span


@dataclass(slots=True)
class ParamDecl:
    name: Ident
    count: Expr | None
    type: TypeExpr
    hints: tuple[Ident, ...]
    span: Span


@dataclass(slots=True)
class ConstDecl:
    name: Ident
    value: Expr
    span: Span


@dataclass(slots=True)
class BufferDecl:
    name: Ident
    type: TypeExpr
    address: Expr | None
    span: Span


@dataclass(slots=True)
class Precision:
    """``@precision(f32)`` after a binding: the precision its op computes in (``value``)."""

    value: Ident
    span: Span


@dataclass(slots=True)
class Binding:
    name: Ident
    value: Expr
    span: Span
    precision: Precision | None = None


@dataclass(slots=True)
class Output:
    name: Ident
    value: Expr | None
    span: Span
    precision: Precision | None = None


@dataclass(slots=True)
class StreamItem:
    name: Ident
    options: tuple[Keyword, ...]
    span: Span


@dataclass(slots=True)
class StreamDecl:
    streams: tuple[StreamItem, ...]
    span: Span


@dataclass(slots=True)
class EventItem:
    """``e`` or ``e[N]`` (an array of N events) in an ``event`` declaration."""

    name: Ident
    count: Expr | None
    span: Span


@dataclass(slots=True)
class EventDecl:
    events: tuple[EventItem, ...]
    span: Span


@dataclass(slots=True)
class EventRef:
    """``e`` or ``e[i]``: one event, or one element of an event array."""

    name: Ident
    index: Expr | None
    span: Span


@dataclass(slots=True)
class OnBlock:
    stream: Ident
    body: tuple[Stmt, ...]
    span: Span


@dataclass(slots=True)
class DeviceBlock:
    """``device[rank] { … }``: the ops of the body run on device ``rank`` of the cluster."""

    rank: Expr
    body: tuple[Stmt, ...]
    span: Span


@dataclass(slots=True)
class Record:
    event: EventRef
    span: Span


@dataclass(slots=True)
class Wait:
    event: EventRef
    span: Span


@dataclass(slots=True)
class Barrier:
    span: Span


@dataclass(slots=True)
class Sync:
    target: EventRef | None
    span: Span


@dataclass(slots=True)
class Callback:
    name: str
    after: Ident
    blocking: bool
    span: Span


@dataclass(slots=True)
class ForLoop:
    var: Ident
    start: Expr
    stop: Expr
    body: tuple[Stmt, ...]
    span: Span


@dataclass(slots=True)
class Return:
    value: Expr
    span: Span


@dataclass(slots=True)
class GraphDef:
    """``graph step { … }``: work captured once, run by each ``replay step N`` (not here)."""

    name: Ident
    body: tuple[Stmt, ...]
    span: Span


@dataclass(slots=True)
class Replay:
    """``replay step N`` (``, eager = E``): graph ``step`` run N times, one launch each."""

    graph: Ident
    count: Expr
    options: tuple[Keyword, ...]
    span: Span


Stmt = (
    InputDecl
    | ParamDecl
    | ConstDecl
    | BufferDecl
    | Binding
    | Output
    | StreamDecl
    | EventDecl
    | OnBlock
    | DeviceBlock
    | Record
    | Wait
    | Barrier
    | Sync
    | Callback
    | ForLoop
    | Return
    | GraphDef
    | Replay
)


# --- items ---------------------------------------------------------------------------------


@dataclass(slots=True)
class DeviceDirective:
    name: str
    span: Span


@dataclass(slots=True)
class ProgramParam:
    name: Ident
    default: Expr | None
    span: Span
    #: ``dyn {g1, g2, …}`` or ``dyn lo..hi``: the values it may take at run time (None: a
    #: compile-time parameter)
    gears: GearSet | None = None


@dataclass(slots=True)
class GearSet:
    """The values ``{…}`` a dynamic parameter may take at run time, or (``range``) the two
    ends of ``lo..hi``."""

    values: tuple[Expr, ...]
    span: Span
    range: bool = False


@dataclass(slots=True)
class FnDef:
    name: Ident
    params: tuple[Ident, ...]
    body: tuple[Stmt, ...]
    span: Span


@dataclass(slots=True)
class ProgramDef:
    name: Ident
    params: tuple[ProgramParam, ...]
    body: tuple[Stmt, ...]
    span: Span


Item = DeviceDirective | FnDef | ProgramDef


@dataclass(slots=True)
class Module:
    """A whole .rtg file."""

    items: tuple[Item, ...]
    source: Source
