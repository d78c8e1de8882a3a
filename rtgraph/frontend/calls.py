"""Op calls: arguments, attributes, and the op's own rule from the registry.

A call ``op(t1, t2, a1, k = v, block_dim = n, after = [t])`` is checked in order: the number
and kind of tensor arguments (a number where a tensor is expected becomes a scalar ``const``
of the other operands' dtype), then positional attributes (``OpDef.positional_attrs``), keyword
attributes against their :class:`~rtgraph.ops.AttrSpec` kinds (unknown ones with a
did-you-mean), ``block_dim`` and ``after`` (accepted by every op), and finally the op's
``infer`` rule, whose :class:`~rtgraph.ops.OpError` becomes a located
:class:`~rtgraph.errors.ShapeError`, :class:`~rtgraph.errors.DTypeError` or
:class:`~rtgraph.errors.CheckError` at the argument or attribute it names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rtgraph.dtypes import DTYPES
from rtgraph.errors import (
    CheckError,
    DTypeError,
    RtgError,
    ShapeError,
    Source,
    Span,
    did_you_mean,
)
from rtgraph.frontend import ast, consteval
from rtgraph.frontend.attrs import SYMBOLIC_KINDS, AttrError, Symbol, convert
from rtgraph.frontend.call_plans import CallPlan, plan_call
from rtgraph.frontend.emit import Diagnostics, IRBuilder
from rtgraph.frontend.positions import SourceSpan
from rtgraph.frontend.values import POISON, Scope, Value, describe, format_number, is_number
from rtgraph.ir.graph import OpNode, Tensor, TensorType
from rtgraph.ops import OpDef, OpError

#: The IR name and user's name for the tensor an expression makes when it is bound.
Bind = tuple[str, str]

_ERROR_KIND = {"shape": ShapeError, "dtype": DTypeError, "attr": CheckError}
#: Attributes every op accepts besides its own.
COMMON_ATTRS = ("block_dim", "after")
#: Tensor kinds that some task produces (so they can be waited for with after=/callback).
PRODUCED_KINDS = ("value", "token", "input")
#: Tensor kinds that carry no data (no op takes them as an operand).
_NO_DATA = ("token", "buffer")


def _has_poison(value: Value) -> bool:
    if value is POISON:
        return True
    return isinstance(value, tuple) and any(_has_poison(v) for v in value)


def _arity(op: OpDef) -> str:
    lo, hi = op.min_args, op.max_args
    noun = "tensor argument" if (hi if hi is not None else 2) == 1 else "tensor arguments"
    if hi is None:
        return f"at least {lo} {noun}"
    if lo == hi:
        return f"{lo} {noun}" if lo else "no tensor arguments"
    return f"{lo} to {hi} {noun}"


class CallChecker:
    """Op calls and the reporting helpers every part of the checker uses."""

    scope: Scope
    stream: str | None

    def __init__(self, source: Source, diagnostics: Diagnostics, ir: IRBuilder) -> None:
        self.source = source
        self.diagnostics = diagnostics
        self.ir = ir
        self.depth = 0
        #: Per op call written (by ``id``), the op, the call and the parts of its check that
        #: depend on no name (:mod:`~rtgraph.frontend.call_plans`).
        self.plans: dict[int, tuple[OpDef, ast.Call, CallPlan]] = {}
        self.checked_once: set[int] = set()

    # --- reporting -------------------------------------------------------------------------
    def error(
        self, message: str, span: Span | None, hint: str | None = None, cls=CheckError
    ) -> Any:
        self.diagnostics.add(cls(message, span, hint))
        return POISON

    def report(self, error: RtgError) -> Any:
        self.diagnostics.add(error)
        return POISON

    def text(self, span: Span) -> str:
        """The source text of a one-line span ('' for a longer one)."""
        if isinstance(span, SourceSpan):  # the offsets say it without a line or column
            text, start, end = self.source.text, span.start_offset, span.end_offset
            return "" if text.find("\n", start, end) >= 0 else text[start:end]
        if span.line != span.end_line:
            return ""
        return self.source.line(span.line)[span.col - 1 : span.end_col - 1]

    def display(self, span: Span, fallback: str) -> str:
        text = self.text(span)
        return text if text and len(text) <= 48 else fallback

    def eval(self, expr: ast.Expr, bind: Bind | None = None) -> Value:
        raise NotImplementedError  # expressions are the ExpressionChecker's

    # --- op calls --------------------------------------------------------------------------
    def call_op(
        self,
        op: OpDef,
        call: ast.Call,
        bind: Bind | None,
        evaluated: Sequence[Value] | None = None,
    ) -> Value:
        """Check one op call: argument count and kinds, attributes, then the op's rule.

        Every check runs (so one call reports all its mistakes), in source order: tensor
        arguments, extra positional attributes, keywords, attribute values, ``block_dim``,
        ``after``, a kernel's footprint. ``evaluated`` are the arguments' values when the
        caller has already evaluated them.
        """
        planned = self.plans.get(id(call))
        if planned is not None and planned[0] is op and planned[1] is call:
            return self.call_planned(op, planned[2], call, bind, evaluated)
        args = call.args
        n_tensors = len(args)
        if op.positional_attrs and op.max_args is not None:
            n_tensors = min(n_tensors, op.max_args)
        values = (
            list(evaluated[:n_tensors]) if evaluated else [self.eval(a) for a in args[:n_tensors]]
        )
        spans = [a.span for a in args[:n_tensors]]
        arity_ok = self._check_arity(op, call, n_tensors)
        given, after_expr, given_ok = self._given_attrs(op, call, n_tensors)
        attrs, attr_spans, attrs_ok = self._attr_values(op, call, given)
        after, after_ok = self._after(after_expr)
        ok = arity_ok and given_ok and attrs_ok and after_ok
        if op.name == "kernel" and ok and not self.kernel_footprint(attrs, given):
            ok = False
        _dedupe_names(op, attrs)
        if arity_ok and given_ok:  # planned where it repeats: in a loop, or seen before
            key = id(call)
            if not self.scope.loop and key not in self.checked_once:
                self.checked_once.add(key)
            elif (plan := plan_call(op, n_tensors, given, after_expr)) is not None:
                self.plans[key] = (op, call, plan)
        if not ok or any(v is POISON for v in values):
            return POISON
        return self.apply(
            op, values, spans, attrs, attr_spans, after, call.span, call.func.span, bind
        )

    def call_planned(
        self,
        op: OpDef,
        plan: CallPlan,
        call: ast.Call,
        bind: Bind | None,
        evaluated: Sequence[Value] | None,
    ) -> Value:
        """:meth:`call_op` for a call checked before: only what depends on names is checked
        again (the arguments, attributes that are not literals, ``after``, the footprint)."""
        n = plan.n_tensors
        args = call.args[:n] if n else ()
        values = list(evaluated[:n]) if evaluated else [self.eval(a) for a in args]
        ok = True
        if plan.known is not None:
            attrs = plan.known.copy()
        else:
            attrs = {}
            for name, value, dynamic in plan.items:
                if dynamic is not None:
                    kind, choices, expr, span, block_dim = dynamic
                    if block_dim:
                        value = self._block_dim(op, expr, span)
                    else:
                        value = self.attr_value(op, name, kind, choices, expr, span)
                    if value is POISON:
                        ok = False
                attrs[name] = value
        after: tuple[str, ...] | None = ()
        if plan.after is not None:
            after = self.after_names(plan.after.value)
            if after is None:
                after, ok = (), False
        if plan.footprint and ok and not self.kernel_footprint(attrs, plan.given):
            ok = False
        for k in plan.names:
            if isinstance(attrs[k], tuple):
                attrs[k] = tuple(
                    dict.fromkeys(r.name if isinstance(r, Tensor) else r for r in attrs[k])
                )
        if not ok or (values and any(v is POISON for v in values)):
            return POISON
        spans = [a.span for a in args] if n else []
        return self.apply(
            op, values, spans, attrs, plan.attr_spans, after, call.span, call.func.span, bind
        )

    def _check_arity(self, op: OpDef, call: ast.Call, n_tensors: int) -> bool:
        """Report a tensor-argument count outside the op's ``min_args..max_args``."""
        too_many = op.max_args is not None and n_tensors > op.max_args
        if n_tensors < op.min_args or too_many:
            where = call.args[op.max_args].span if too_many else call.span
            self.error(f"{op.name} takes {_arity(op)}, got {n_tensors}", where)
            return False
        return True

    def _given_attrs(
        self, op: OpDef, call: ast.Call, n_tensors: int
    ) -> tuple[dict[str, tuple[ast.Expr, Span]], ast.Keyword | None, bool]:
        """The attributes written, by name — positional ones first, then keywords — and the
        ``after=`` keyword; extra positionals, repeats and unknown names are reported."""
        ok = True
        given: dict[str, tuple[ast.Expr, Span]] = {}
        extra = call.args[n_tensors:]
        if len(extra) > len(op.positional_attrs):
            first = extra[len(op.positional_attrs)]
            named = ", ".join(op.positional_attrs)
            self.error(
                f"{op.name} takes {_arity(op)} and {len(op.positional_attrs)} positional "
                f"attribute{'s' if len(op.positional_attrs) != 1 else ''} ({named}), "
                f"got {len(call.args)} arguments",
                first.span,
            )
            ok = False
        for attr_name, expr in zip(op.positional_attrs, extra, strict=False):
            given[attr_name] = (expr, expr.span)
        after_expr: ast.Keyword | None = None
        for kw in call.kwargs:
            k = kw.name.name
            if k in given or (k == "after" and after_expr is not None):
                self.error(f"{op.name}: attribute '{k}' given twice", kw.name.span)
                ok = False
            elif k == "after":
                after_expr = kw
            elif k in op.attrs or k == "block_dim":
                given[k] = (kw.value, kw.span)
            else:
                known = [*op.attrs, *COMMON_ATTRS]
                hint = did_you_mean(k, known) or (
                    f"{op.name} takes the attributes {', '.join(known)}"
                )
                self.error(f"unknown attribute '{k}' for {op.name}", kw.name.span, hint)
                ok = False
        return given, after_expr, ok

    def _attr_values(
        self, op: OpDef, call: ast.Call, given: dict[str, tuple[ast.Expr, Span]]
    ) -> tuple[dict[str, Any], dict[str, Span], bool]:
        """Every attribute of the op converted to its kind (defaults for the ones not given,
        an error for a missing required one), then ``block_dim`` if given; and their spans."""
        ok = True
        attrs: dict[str, Any] = {}
        attr_spans: dict[str, Span] = {}
        for k, spec in op.attrs.items():
            if k in given:
                expr, span = given[k]
                attr_spans[k] = span
                value = self.attr_value(op, k, spec.kind, spec.choices, expr, span)
                if value is POISON:
                    ok = False
                attrs[k] = value
            elif spec.required:
                self.error(
                    f"{op.name} needs the attribute '{k}'",
                    call.func.span,
                    hint=f"write {op.name}(..., {k} = ...)",
                )
                ok = False
            else:
                attrs[k] = spec.default
        if "block_dim" in given and "block_dim" not in op.attrs:
            expr, span = given["block_dim"]
            attr_spans["block_dim"] = span
            attrs["block_dim"] = self._block_dim(op, expr, span)
            if attrs["block_dim"] is POISON:
                ok = False
        return attrs, attr_spans, ok

    def _block_dim(self, op: OpDef, expr: ast.Expr, span: Span) -> Any:
        """The ``block_dim`` every op accepts: a positive number of cores (POISON if not)."""
        value = self.attr_value(op, "block_dim", "int", (), expr, span)
        if value is not POISON and value < 1:
            value = self.error(
                f"{op.name}: block_dim must be at least 1, got {value}",
                span,
                hint="block_dim is the number of cores of its unit the task occupies",
            )
        return value

    def _after(self, after_expr: ast.Keyword | None) -> tuple[tuple[str, ...], bool]:
        """The names an ``after=`` keyword waits for (none without one), and whether it is ok."""
        if after_expr is None:
            return (), True
        resolved = self.after_names(after_expr.value)
        return (resolved, True) if resolved is not None else ((), False)

    # --- attributes ------------------------------------------------------------------------
    def attr_value(
        self, op: OpDef, name: str, kind: str, choices: tuple[str, ...], expr: ast.Expr, span: Span
    ) -> Any:
        if kind == "names":
            refs = self.name_list(expr, f"{op.name}: {name}=")
            return POISON if refs is None else tuple(refs)
        if kind in SYMBOLIC_KINDS and isinstance(expr, ast.Name):
            value: Any = Symbol(expr.id)
        elif kind in ("ints", "axes") and isinstance(expr, ast.ListExpr):
            return self.int_list(op, name, expr)
        else:
            value = self.eval(expr)
        if _has_poison(value):
            return POISON
        try:
            return convert(kind, value, choices)
        except AttrError as e:
            return self.error(f"{op.name}: attribute '{name}' {e.message}", span, e.hint)

    def int_list(self, op: OpDef, name: str, expr: ast.ListExpr) -> Any:
        """A list attribute, each element checked where it was written."""
        values: list[int] = []
        ok = True
        for item in expr.items:
            value = self.eval(item)
            n = consteval.as_int(value)
            if n is not None:
                values.append(n)
                continue
            ok = False
            if value is not POISON:
                text = self.text(item.span)
                said = describe(value)
                if text and is_number(value) and text != format_number(value):
                    said = f"{text} = {format_number(value)}"
                self.error(
                    f"{op.name}: attribute '{name}' needs integers; {said} is not one",
                    item.span,
                )
        return tuple(values) if ok else POISON

    def name_list(self, expr: ast.Expr, what: str) -> list[Tensor] | None:
        """The tensors named by a ``[a, b]`` list (or a single name), or None after an error."""
        items = expr.items if isinstance(expr, ast.ListExpr) else (expr,)
        refs: list[Tensor] = []
        ok = True
        for item in items:
            if not isinstance(item, ast.Name):
                self.error(f"{what} takes a list of names", item.span)
                ok = False
                continue
            bound = self.scope.lookup(item.id)
            if bound is None:
                self.undefined(item.id, item.span)
                ok = False
            elif bound.value is POISON:
                ok = False
            elif not isinstance(bound.value, Tensor):
                self.error(
                    f"{what} needs tensors or buffers, not {describe(bound.value)}",
                    item.span,
                )
                ok = False
            else:
                refs.append(bound.value)
        return refs if ok else None

    def after_names(self, expr: ast.Expr) -> tuple[str, ...] | None:
        """The tensor names ``after=`` waits for, each once (None after reporting why not)."""
        items = expr.items if isinstance(expr, ast.ListExpr) else (expr,)
        found: list[str] = []
        lookup = self.scope.lookup
        for item in items:  # the common case, every name a task's result, without a detour
            bound = lookup(item.id) if isinstance(item, ast.Name) else None
            value = bound.value if bound is not None else None
            if not isinstance(value, Tensor) or value.kind not in PRODUCED_KINDS:
                return self.checked_after_names(expr)
            found.append(value.name)
        return tuple(dict.fromkeys(found))

    def checked_after_names(self, expr: ast.Expr) -> tuple[str, ...] | None:
        """:meth:`after_names`, reporting every name that is not a task's result."""
        refs = self.name_list(expr, "after=")
        if refs is None:
            return None
        items = expr.items if isinstance(expr, ast.ListExpr) else (expr,)
        for ref, item in zip(refs, items, strict=True):
            if ref.kind not in PRODUCED_KINDS:
                self.error(
                    "after= needs a kernel token or a computed tensor; no task computes "
                    f"{describe(ref)}",
                    item.span,
                )
                return None
        return tuple(dict.fromkeys(r.name for r in refs))

    def kernel_footprint(self, attrs: dict[str, Any], given: dict) -> bool:
        """A synthetic kernel writes only raw buffers and reads no tokens."""
        ok = True
        for key in ("reads", "writes"):
            if key not in given:
                continue
            expr = given[key][0]
            items = expr.items if isinstance(expr, ast.ListExpr) else (expr,)
            for ref, item in zip(attrs[key], items, strict=True):
                if ref.kind == "token":
                    self.error(
                        f"kernel {key} a kernel token ('{ref.label}')",
                        item.span,
                        hint="tokens order tasks; use after= for that",
                    )
                    ok = False
                elif key == "writes" and ref.kind != "buffer":
                    self.error(
                        f"kernel writes '{ref.label}', which is not a buffer",
                        item.span,
                        hint="synthetic kernels write only raw buffers (buffer B : bytes[N]); "
                        "tensors are bound once",
                    )
                    ok = False
        return ok

    # --- applying an op --------------------------------------------------------------------
    def apply(
        self,
        op: OpDef,
        values: list[Value],
        spans: list[Span],
        attrs: dict[str, Any],
        attr_spans: dict[str, Span],
        after: tuple[str, ...],
        span: Span,
        op_span: Span,
        bind: Bind | None,
    ) -> Value:
        """Type ``op`` applied to ``values`` with its rule and emit the node.

        The operands are checked (tensors that carry data, at least one of them), numbers
        become scalar constants, the op's ``infer`` rule gives the result type, and the node
        is emitted with its output bound to ``bind`` or to a new temporary.
        """
        if not values or all(isinstance(v, Tensor) and v.kind not in _NO_DATA for v in values):
            inputs = values  # the common case: every operand a tensor that carries data
        else:
            wrong = self._operand_error(op, values, spans, op_span)
            if wrong is not None:
                return wrong
            inputs = self._operands(op, values, spans)
            if inputs is None:
                return POISON
        out_type = self._infer(op, inputs, attrs, spans, attr_spans, op_span)
        if out_type is None:
            return POISON
        if bind is not None:
            name, label = bind
        else:
            name, label = self.ir.temp_name(), self.display(span, op.name)
        kind = "token" if op.unit == "synthetic" else "value"
        if kind != "token" and not self.ir.fits(label, out_type, span):
            return POISON
        out = self.ir.tensor(name, out_type, kind, span, label)
        inputs_named = tuple([t.name for t in inputs])
        self.ir.emit(OpNode(op.name, inputs_named, out.name, attrs, span, self.stream, after))
        return out

    def _operand_error(
        self, op: OpDef, values: list[Value], spans: list[Span], op_span: Span
    ) -> Value | None:
        """POISON after reporting the first operand that is no data tensor nor a number, or
        an all-numbers call; None when the operands are fine."""
        for i, v in enumerate(values):
            if isinstance(v, Tensor):
                if v.kind == "token":
                    return self.error(
                        f"'{v.label}' is the token of a synthetic kernel; it carries no data",
                        spans[i],
                        hint="tokens can only be used in after=[...]",
                    )
                if v.kind == "buffer":
                    return self.error(
                        f"'{v.label}' is a raw buffer, not a tensor",
                        spans[i],
                        hint="buffers can only be named in a kernel's reads=/writes=",
                    )
            elif not is_number(v):
                return self.error(
                    f"argument {i + 1} of {op.name} must be a tensor, got {describe(v)}", spans[i]
                )
        if values and not any(isinstance(v, Tensor) for v in values):
            return self.error(
                f"{op.name} needs at least one tensor argument; all are compile-time numbers",
                op_span,
                hint="compile-time arithmetic is written with + - * / % and min, max, sqrt, "
                "exp, log, rsqrt",
            )
        return None

    def _operands(self, op: OpDef, values: list[Value], spans: list[Span]) -> list[Tensor] | None:
        """The input tensors, each number made a scalar ``const`` (None after an error).

        Weak typing: a number takes the dtype of the nearest tensor operand (a tie goes to the
        later one: ``where(c, 0.0, x)`` takes x's dtype, not the condition's).
        """
        tensor_at = [i for i, v in enumerate(values) if isinstance(v, Tensor)]
        inputs: list[Tensor] = []
        for i, v in enumerate(values):
            if isinstance(v, Tensor):
                inputs.append(v)
                continue
            nearest = min(tensor_at, key=lambda j, i=i: (abs(j - i), -j))
            dtype = values[nearest].type.dtype
            if not DTYPES[dtype].is_float and consteval.as_int(v) is None:
                self.error(
                    f"{op.name}: the number {format_number(v)} is not an integer, but the "
                    f"tensor operand is {dtype}",
                    spans[i],
                    hint="cast the tensor first: cast(x, dtype = f32)",
                    cls=DTypeError,
                )
                return None
            inputs.append(self.ir.const(v, dtype, spans[i]))
        return inputs

    def _infer(
        self,
        op: OpDef,
        inputs: list[Tensor],
        attrs: dict[str, Any],
        spans: list[Span],
        attr_spans: dict[str, Span],
        op_span: Span,
    ) -> TensorType | None:
        """The result type by the op's rule, or None after reporting its error where the rule
        points (an argument, an attribute, else the op's name)."""
        try:
            out_type = op.infer([t.type for t in inputs], attrs)
        except OpError as e:
            if e.arg is not None and 0 <= e.arg < len(spans):
                where = spans[e.arg]
            else:
                where = attr_spans.get(e.attr or "", op_span)
            self.error(e.message, where, e.hint, _ERROR_KIND.get(e.kind, CheckError))
            return None
        except Exception as e:  # a bug in an op's rule must still not reach the user raw
            self.error(
                f"internal error in the rule of op '{op.name}': {type(e).__name__}: {e}",
                op_span,
                hint="this is a bug in rtgraph, not in the program; please report it",
            )
            return None
        if not isinstance(out_type, TensorType):
            self.error(f"internal error: op '{op.name}' inferred no type", op_span)
            return None
        return out_type


def _dedupe_names(op: OpDef, attrs: dict[str, Any]) -> None:
    """Name-list attributes (a kernel's reads/writes) as tensor names, each once, in order."""
    for k, spec in op.attrs.items():
        if spec.kind == "names" and isinstance(attrs[k], tuple):
            attrs[k] = tuple(
                dict.fromkeys(r.name if isinstance(r, Tensor) else r for r in attrs[k])
            )


# Dispatch on the node type (unbound functions: a table of bound methods would make a cycle).
