"""Declarations: inputs, params (and param arrays), consts and raw buffers, with their types.

A declared type ``dtype[dims]`` must name a dtype and positive integer dimensions (``/`` is
true division, so ``D / H`` must divide exactly). Program-level declarations stand at the top
level of the program, never inside ``for``/``on`` blocks or functions.
"""

from __future__ import annotations

from rtgraph.dtypes import DTYPES
from rtgraph.errors import CapacityError, did_you_mean
from rtgraph.frontend import ast, consteval
from rtgraph.frontend.buffers import PlacedBuffer
from rtgraph.frontend.emit import ADDRESS_LIMIT, format_bytes
from rtgraph.frontend.expressions import ExpressionChecker
from rtgraph.frontend.values import (
    POISON,
    Bound,
    ParamArray,
    Scope,
    Value,
    describe,
    format_number,
    is_number,
)
from rtgraph.ir.graph import TensorType

#: Elements of one ``param w[N]`` array (each is a tensor of its own, planned and seeded).
MAX_PARAM_ARRAY = 4096

_INPUT_HINTS = {"pinned": True, "pageable": False}
_PARAM_HINTS = ("direct", "cached")
#: The param hint that makes seeded values ``|x|`` (a variance; :func:`rtgraph.ir.data.generate`).
NONNEGATIVE = "nonnegative"
_KIND_WORDS = {
    "binding": "a value",
    "input": "an input",
    "param": "a param",
    "const": "a const",
    "buffer": "a buffer",
    "stream": "a stream",
    "event": "an event",
    "fn": "a function",
    "loop": "a loop variable",
    "arg": "a function parameter",
}


class DeclarationChecker(ExpressionChecker):
    """Names and declarations; :class:`~rtgraph.frontend.checker.Checker` builds on it."""

    globals: Scope
    program_scope: Scope
    active_fns: list[str]
    abstract: bool
    buffers: list[PlacedBuffer]

    def at_top(self, stmt: ast.Stmt, keyword: str) -> bool:
        """Whether a declaration stands at the top level of the program (reports if not)."""
        if self.active_fns:
            return False  # reported once, on the function's definition
        if self.scope is self.program_scope and self.stream is None:
            return True
        self.error(
            f"'{keyword}' declarations belong at the top level of the program",
            stmt.span,
            hint="move it out of the for/on block",
        )
        return False

    def rebound(self, ident: ast.Ident, bound: Bound | None = None) -> None:
        bound = bound or self.scope.lookup(ident.name)
        where = f" at line {bound.span.line}" if bound and bound.span else ""
        what = _KIND_WORDS.get(bound.kind, "a value") if bound else "a value"
        self.error(
            f"name '{ident.name}' is already bound",
            ident.span,
            hint=f"it is {what}{where}; a name is bound once (only a for body may rebind a "
            "name bound before the loop)",
        )
        # From here on the name is poisoned: its uses are the mistake already reported.
        self.scope.names[ident.name] = Bound(POISON, "binding", ident.span)

    def declare(self, ident: ast.Ident, value: Value, kind, scope: Scope | None = None) -> None:
        """Bind a new name (in ``scope``, by default the current one)."""
        bound = self.scope.lookup(ident.name)
        if bound is not None:
            self.rebound(ident, bound)
            return
        (scope or self.scope).names[ident.name] = Bound(value, kind, ident.span)

    def tensor_type(self, t: ast.TypeExpr) -> TensorType | None:
        """The type written as ``dtype[dims]``; None after reporting a bad dtype or dim."""
        ok = True
        dtype = t.dtype.name
        if dtype not in DTYPES:
            hint = (
                "bytes[N] is the type of a raw buffer"
                if dtype == "bytes"
                else did_you_mean(dtype, DTYPES) or f"dtypes are {', '.join(DTYPES)}"
            )
            self.error(f"unknown dtype '{dtype}'", t.dtype.span, hint)
            ok = False
        dims = [self.dim(d) for d in t.dims or ()]
        if not ok or any(d is None for d in dims):
            return None
        return TensorType(tuple(dims), dtype)  # type: ignore[arg-type]

    def dim(self, expr: ast.Expr) -> int | None:
        value = self.eval(expr)
        if value is POISON:
            return None
        n = consteval.as_int(value)
        if n is not None and n > 0:
            return n
        text = self.text(expr.span) or "here"
        if not is_number(value):
            self.error(
                f"shape expression {text} is {describe(value)}, not a compile-time integer",
                expr.span,
            )
            return None
        shown = format_number(value)
        said = text if text == shown else f"{text} = {shown}"
        self.error(
            f"shape expression {said} is not a positive integer",
            expr.span,
            hint="dimensions are positive integers; '/' is true division",
        )
        return None

    def s_input(self, st: ast.InputDecl) -> None:
        if not self.at_top(st, "input"):
            return
        pinned = True
        if st.hint is not None:
            if st.hint.name in _INPUT_HINTS:
                pinned = _INPUT_HINTS[st.hint.name]
            else:
                self.error(
                    f"unknown host memory hint '@{st.hint.name}' for an input",
                    st.hint.span,
                    hint="use @pinned (the default) or @pageable",
                )
        type_ = self.tensor_type(st.type)
        name = st.name.name
        if self.scope.lookup(name) is not None:
            self.rebound(st.name)
            return
        value: Value = POISON
        if type_ is not None and self.ir.fits(name, type_, st.span):
            value = self.ir.tensor(name, type_, "input", st.span, name, pinned=pinned)
        self.declare(st.name, value, "input")

    def s_param(self, st: ast.ParamDecl) -> None:
        if not self.at_top(st, "param"):
            return
        alloc, nonnegative = "auto", False
        for hint in st.hints:
            if hint.name not in (*_PARAM_HINTS, NONNEGATIVE):
                self.error(
                    f"unknown hint '@{hint.name}' for a param",
                    hint.span,
                    hint=did_you_mean(hint.name, (*_PARAM_HINTS, NONNEGATIVE))
                    or "use @direct or @cached (allocation), @nonnegative (seeded values)",
                )
            elif nonnegative if hint.name == NONNEGATIVE else alloc != "auto":
                what = (
                    "@nonnegative twice"
                    if hint.name == NONNEGATIVE
                    else f"two allocation hints, @{alloc} and @{hint.name}"
                )
                self.error(
                    f"param '{st.name.name}' has {what}",
                    hint.span,
                    hint="a param takes one of @direct and @cached at most, and @nonnegative once",
                )
            elif hint.name == NONNEGATIVE:
                nonnegative = True
            else:
                alloc = hint.name
        count: int | None = None
        if st.count is not None:
            count = self.compile_time_int(st.count, "the length of a param array")
            if count is not None and count <= 0:
                self.error(f"param array length {count} is not a positive integer", st.count.span)
                count = None
            elif count is not None and count > MAX_PARAM_ARRAY:
                self.error(
                    f"param array length {count:,} is more than {MAX_PARAM_ARRAY:,}",
                    st.count.span,
                    hint="each element is a tensor of its own; stack them into one param "
                    "with one more dimension",
                )
                count = None
        type_ = self.tensor_type(st.type)
        name = st.name.name
        if self.scope.lookup(name) is not None:
            self.rebound(st.name)
            return
        value: Value = POISON
        if type_ is not None and self.ir.fits(name, type_, st.span):
            if count is not None and not self.array_fits(name, count, type_.nbytes, st):
                count = None
            marks = {"alloc": alloc, "nonnegative": nonnegative}
            if st.count is None:
                value = self.ir.tensor(name, type_, "param", st.span, name, **marks)
            elif count is not None:
                self.ir.make_room(st.span, count)  # for every element, before making any
                elements = tuple(
                    self.ir.tensor(f"{name}[{i}]", type_, "param", st.span, f"{name}[{i}]", **marks)
                    for i in range(count)
                )
                value = ParamArray(name, elements)
        self.declare(st.name, value, "param")

    def array_fits(self, name: str, count: int, nbytes: int, st: ast.ParamDecl) -> bool:
        """Whether ``count`` params of ``nbytes`` each fit together; reports why not."""
        total = count * nbytes
        capacity = self.ir.device_capacity
        if total < ADDRESS_LIMIT and (capacity is None or total <= capacity):
            return True
        where = (
            "more than any device can address (2**48)"
            if total >= ADDRESS_LIMIT
            else f"more than the device's memory ({format_bytes(capacity)})"
        )
        self.error(
            f"param array '{name}' ({count:,} × {format_bytes(nbytes)}) needs {total:,} bytes, "
            f"{where}",
            st.span,
            hint="lower the array length or the shape (-D NAME=value)",
            cls=CapacityError,
        )
        return False

    def s_const(self, st: ast.ConstDecl) -> None:
        value = self.eval(st.value)
        if value is not POISON and not (
            is_number(value) or (isinstance(value, tuple) and all(map(is_number, value)))
        ):
            value = self.error(
                f"const '{st.name.name}' must be a compile-time number, got {describe(value)}",
                st.value.span,
                hint="bind tensors with `name = expr`",
            )
        self.declare(st.name, value, "const")

    def s_buffer(self, st: ast.BufferDecl) -> None:
        if not self.at_top(st, "buffer"):
            return
        size: int | None = None
        t = st.type
        if t.dtype.name != "bytes" or t.dims is None or len(t.dims) != 1:
            self.error(
                f"a buffer's type is bytes[N], got {self.text(t.span) or t.dtype.name}",
                t.span,
                hint="buffers are raw byte regions: buffer A : bytes[4096] at 0x1000",
            )
        else:
            size = self.dim(t.dims[0])
        address: int | None = None
        if st.address is not None:
            address = self.compile_time_int(st.address, "a buffer address")
            if address is not None and address < 0:
                self.error(f"buffer address {address} is negative", st.address.span)
                address = None
        name = st.name.name
        if self.scope.lookup(name) is not None:
            self.rebound(st.name)
            return
        value: Value = POISON
        if size is not None and (st.address is None or address is not None):
            type_ = TensorType((size,), "i8")
            if self.ir.fits(name, type_, st.span):
                value = self.ir.tensor(name, type_, "buffer", st.span, name, address=address)
                if address is not None:
                    where = st.address.span if st.address is not None else st.span
                    self.buffers.append(
                        PlacedBuffer(name, address, size, st.span.to(where), len(self.buffers))
                    )
        self.declare(st.name, value, "buffer")
