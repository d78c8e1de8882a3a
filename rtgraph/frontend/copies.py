"""Host copies the program places on a stream: ``to_device(x)`` and ``to_host(y)``.

By default lowering copies each host input to the device before its first use and each output
back right after its producer, on a DMA stream of its own choosing. Inside ``on s { }`` a
program may place them itself, as a runtime program calls ``aclrtMemcpyAsync`` (CANN) or
``cudaMemcpyAsync`` (CUDA) on a stream: ``x_dev = to_device(x)`` is the H2D copy of host input
``x`` on ``s`` at that point, ``output y = to_host(t)`` the D2H copy of ``t`` there — which is
what hand-written double buffering needs. Both return the tensor they copy (the data is the
same on both sides), so ``x_dev`` and ``x`` name one device tensor and ``to_host`` is
transparent for naming: ``output y = to_host(a @ b)`` names the product ``y``. Each input and
each output is copied at most once.

A copy may also move part of a tensor, so that work on the first rows starts while the rest is
still crossing the link, and finished rows leave while the next are computed:

* ``x0 = to_device(x, rows = [0, 512])`` copies rows 0 … 511 of input ``x``. The parts of one
  input are disjoint and together cover every row; until the last one is copied, ``x`` may be
  read only by ``slice(x, start = a, stop = b, axis = 0)`` of rows already copied.
* ``h0 = to_host(y0)``, where ``y0`` is not an output but an operand of an output's
  ``concat(..., axis = 0)``, copies ``y0`` into its rows of that output as soon as it is
  computed. An output copied in parts has every part copied, and is not copied whole too.

What can only be known at the end of the program (every row of an input copied, which tensors
are parts of outputs) is checked by :meth:`CopyChecker.check_host_copies`.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from rtgraph.errors import Span, did_you_mean
from rtgraph.frontend import ast, consteval
from rtgraph.frontend.calls import Bind
from rtgraph.frontend.streams import StreamChecker
from rtgraph.frontend.values import POISON, Value, describe
from rtgraph.ir.graph import HostCopyNode, Node, OpNode, Tensor

#: The host-copy builtins and the IR direction each places.
HOST_COPIES = {"to_device": "h2d", "to_host": "d2h"}

#: The attribute ``to_device`` takes (``to_host`` takes none).
ROWS = "rows"

Rows = tuple[int, int]


@dataclass(frozen=True)
class RowPart:
    """One ``to_device(x, rows = [a, b])`` of an input: its rows, where it was written, and how
    many IR nodes there were once it was placed (uses after that are checked by the next)."""

    rows: Rows
    span: Span
    mark: int


class InputParts:
    """The parts of one input placed so far: in program order, by first row (to find the one
    a new part overlaps), and the rows they cover as sorted runs of adjacent parts (to say
    whether a slice reads copied rows). Each question costs a binary search, so a program that
    unrolls into many parts is checked in time linear in its size."""

    def __init__(self) -> None:
        self.placed: list[RowPart] = []  # program order
        self.by_row: list[RowPart] = []  # sorted by first row (the parts are disjoint)
        self.firsts: list[int] = []  # by_row's first rows
        self.runs: list[list[int]] = []  # [first, end) of each run of adjacent parts
        self.run_firsts: list[int] = []
        self.refused = False  # a part was refused for its rows: which are copied is unknown

    def overlapping(self, rows: Rows) -> RowPart | None:
        """A placed part sharing rows with ``rows``, if any."""
        k = bisect_right(self.firsts, rows[0])
        if k > 0 and self.by_row[k - 1].rows[1] > rows[0]:
            return self.by_row[k - 1]
        if k < len(self.by_row) and self.by_row[k].rows[0] < rows[1]:
            return self.by_row[k]
        return None

    def covers(self, start: int, stop: int) -> bool:
        """Whether the placed parts together copied rows ``start … stop-1``."""
        k = bisect_right(self.run_firsts, start) - 1
        return start >= stop or (k >= 0 and self.runs[k][1] >= stop)

    def add(self, part: RowPart) -> None:
        """Place ``part`` (disjoint from every placed part)."""
        a, b = part.rows
        self.placed.append(part)
        k = bisect_right(self.firsts, a)
        self.by_row.insert(k, part)
        self.firsts.insert(k, a)
        k = bisect_right(self.run_firsts, a)
        left = self.runs[k - 1] if k > 0 and self.runs[k - 1][1] == a else None
        right = self.runs[k] if k < len(self.runs) and self.runs[k][0] == b else None
        if left is not None and right is not None:  # the part joins two runs
            left[1] = right[1]
            del self.runs[k], self.run_firsts[k]
        elif left is not None:
            left[1] = b
        elif right is not None:
            right[0] = self.run_firsts[k] = a
        else:
            self.runs.insert(k, [a, b])
            self.run_firsts.insert(k, a)

    def gaps(self, n: int) -> list[Rows]:
        """The rows of ``0 … n-1`` no part copied, as ``[a, b)`` ranges in order."""
        gaps: list[Rows] = []
        row = 0
        for a, b in self.runs:
            if a > row:
                gaps.append((row, a))
            row = b
        if row < n:
            gaps.append((row, n))
        return gaps


class CopyChecker(StreamChecker):
    """``to_device`` / ``to_host`` calls, whole or in parts, and the checks at the end."""

    outputs: list[str]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.row_parts: dict[str, InputParts] = {}  # the inputs copied in parts

    def host_copy(self, call: ast.Call, bind: Bind | None) -> Value:
        """Check one ``to_device(x[, rows = [a, b]])`` / ``to_host(t)`` call and emit its copy
        node."""
        name = call.func.name
        rows_kw, attrs_ok = self.copy_attrs(name, call)
        if len(call.args) != 1:
            for arg in call.args:
                self.eval(arg)
            return self.error(f"{name} takes 1 tensor argument, got {len(call.args)}", call.span)
        direction = HOST_COPIES[name]
        arg = call.args[0]
        value = self.eval(arg, bind if direction == "d2h" else None)
        rows = self.rows_value(name, rows_kw) if rows_kw is not None else None
        if value is POISON or not attrs_ok or rows is POISON:
            return POISON
        if self.stream is None and not self.abstract:
            return self.error(
                f"{name} must be inside an `on` block",
                call.span,
                hint=f"write `on s {{ ... = {name}(...) }}` to say which stream copies it",
            )
        if not isinstance(value, Tensor) or value.kind in ("token", "buffer", "const"):
            return self.error(f"{name} copies a tensor, not {describe(value)}", arg.span)
        if direction == "d2h":
            return self.copy_out(value, arg.span, call.span)
        if rows_kw is None:
            return self.copy_in(value, arg.span, call.span)
        assert isinstance(rows, tuple)
        return self.copy_part_in(value, rows, arg.span, rows_kw.value.span, call.span)

    def copy_attrs(self, name: str, call: ast.Call) -> tuple[ast.Keyword | None, bool]:
        """The ``rows = [a, b]`` keyword of a ``to_device`` call, and whether every keyword
        given is one the call takes (``to_host`` takes none)."""
        rows: ast.Keyword | None = None
        ok = True
        for kw in call.kwargs:
            key = kw.name.name
            if name == "to_host":
                self.error(f"{name} takes no attributes", kw.span)
            elif key != ROWS:
                hint = did_you_mean(key, [ROWS]) or f"{name} takes one attribute, rows = [a, b]"
                self.error(f"unknown attribute '{key}' for {name}", kw.name.span, hint)
            elif rows is not None:
                self.error(f"{name}: attribute '{ROWS}' given twice", kw.name.span)
            else:
                rows = kw
                continue
            ok = False
        return rows, ok

    def rows_value(self, name: str, kw: ast.Keyword) -> Rows | Value:
        """The ``[a, b]`` of ``rows = [a, b]`` (compile-time integers), or POISON."""
        value = self.eval(kw.value)
        if value is POISON or (isinstance(value, tuple) and POISON in value):
            return POISON
        if not isinstance(value, tuple) or len(value) != 2:
            got = f"a list of {len(value)}" if isinstance(value, tuple) else describe(value)
            return self.error(
                f"{name}: attribute '{ROWS}' must be a list of two integers [a, b], got {got}",
                kw.value.span,
                hint="rows = [a, b] copies rows a to b - 1 of the input",
            )
        bounds = [consteval.as_int(v) for v in value]
        for v, n, where in zip(value, bounds, _items(kw.value), strict=True):
            if n is None:
                return self.error(
                    f"{name}: attribute '{ROWS}' needs integers, got {describe(v)}", where
                )
        return (bounds[0], bounds[1])  # type: ignore[return-value]

    def copy_in(self, value: Tensor, where: Span, span: Span) -> Value:
        if not self.is_input(value, where):
            return POISON
        first = self.copied.get(("h2d", value.name))
        if first is not None:
            return self.error(
                f"input '{value.label}' is already copied to the device at line {first.line}",
                span,
                hint="copy each input once and use its device name from then on",
            )
        parts = self.row_parts.get(value.name)
        if parts is not None and parts.placed:
            if not self.abstract:  # its rows count as copied: no "never copied" as well
                self.copied[("h2d", value.name)] = span
            first = parts.placed[0]
            return self.error(
                f"input '{value.label}' is already copied to the device in parts "
                f"(rows {_rows(first.rows)} at line {first.span.line})",
                span,
                hint="copy an input whole or in parts, not both",
            )
        used = next((n for n in self.ir.nodes if _reads(n, value.name)), None)
        if used is not None:
            return self.error(
                f"input '{value.label}' is used at line {_line(used)}, before this copy",
                span,
                hint="a placed copy must come before every use of its input",
            )
        return self.place("h2d", value, span)

    def copy_part_in(
        self, value: Tensor, rows: Rows, where: Span, rows_span: Span, span: Span
    ) -> Value:
        """``to_device(x, rows = [a, b])``: one part of input ``x``, checked against its earlier
        parts and the uses of ``x`` since the last of them."""
        if not self.is_input(value, where):
            return POISON
        label, shape = value.label, value.type.shape
        if not shape:
            return self.error(
                f"input '{label}' is a scalar; it has no rows to copy",
                where,
                hint=f"copy it whole: to_device({label})",
            )
        parts = self.parts_of(value)
        a, b = rows
        if not 0 <= a < b <= shape[0]:
            parts.refused = True
            return self.error(
                f"rows {_rows(rows)} are not rows of input '{label}', which has {shape[0]}",
                rows_span,
                hint=f"rows = [a, b] copies rows a to b - 1, for 0 <= a < b <= {shape[0]}",
            )
        whole = self.copied.get(("h2d", value.name))
        if whole is not None:
            return self.error(
                f"input '{label}' is already copied to the device at line {whole.line}",
                span,
                hint="copy an input whole or in parts, not both",
            )
        if self.overlap(label, rows, rows_span, parts):
            parts.refused = True
            return POISON
        early = self.used_early(value, rows, span, parts)
        result = POISON if early else self.place("h2d", value, span, rows)
        parts.add(RowPart(rows, span, len(self.ir.nodes)))  # refused for a use too: its rows
        return result  # count as copied, so later uses and the end report nothing more

    def parts_of(self, x: Tensor) -> InputParts:
        """The parts of input ``x`` placed so far (none are kept for a function checked
        without its arguments)."""
        if self.abstract:
            return InputParts()
        return self.row_parts.setdefault(x.name, InputParts())

    def overlap(self, label: str, rows: Rows, where: Span, parts: InputParts) -> bool:
        """Report an earlier part of the input that shares rows with ``rows``."""
        part = parts.overlapping(rows)
        if part is not None:
            self.error(
                f"rows {_rows(rows)} of '{label}' overlap rows {_rows(part.rows)} copied "
                f"at line {part.span.line}",
                where,
                hint="the parts of an input are disjoint: each row is copied once",
            )
        return part is not None

    def used_early(self, x: Tensor, rows: Rows, span: Span, parts: InputParts) -> bool:
        """Report the first use of ``x`` since its last part that reads more than the rows
        its parts so far copied (earlier uses were checked by the earlier parts)."""
        since = min(parts.placed[-1].mark, len(self.ir.nodes)) if parts.placed else 0
        for node in self.ir.nodes[since:]:
            if _reads(node, x.name) and not _reads_copied_rows(node, x, parts):
                self.error(
                    f"input '{x.label}' is used at line {_line(node)} before rows {_rows(rows)} "
                    "are copied",
                    span,
                    hint=f"until its last part is copied, '{x.label}' may be read only as "
                    f"slice({x.label}, start = a, stop = b, axis = 0) of rows copied before",
                )
                return True
        return False

    def is_input(self, value: Tensor, where: Span) -> bool:
        if value.kind == "input":
            return True
        self.error(
            f"to_device copies a host input, not {describe(value)}",
            where,
            hint="inputs live on the host; everything else is already on the device",
        )
        return False

    def copy_out(self, value: Tensor, where: Span, span: Span) -> Value:
        first = self.copied.get(("d2h", value.name))
        if first is not None:
            return self.error(
                f"'{value.label}' is already copied to the host at line {first.line}", span
            )
        return self.place("d2h", value, span)

    def place(self, direction: str, value: Tensor, span: Span, rows: Rows | None = None) -> Value:
        if not self.abstract:
            if rows is None:
                self.copied[(direction, value.name)] = span
            node = HostCopyNode(direction, value.name, self.stream or "", span, rows)  # type: ignore[arg-type]
            self.ir.emit(node)
        return value

    # --- at the end of the program ---------------------------------------------------------
    def check_host_copies(self) -> None:
        """Every input copied in parts has all its rows copied; every ``to_host`` copies an
        output (else nothing would receive the data) or a part of one, and an output copied
        in parts has every part copied and is not copied whole as well."""
        self.check_input_parts()
        self.check_output_parts()

    def check_input_parts(self) -> None:
        for name, parts in self.row_parts.items():
            if ("h2d", name) in self.copied or parts.refused or not parts.placed:
                continue  # a part refused, or also copied whole: reported already
            t = self.ir.tensors[name]
            last = parts.placed[-1]
            for gap in parts.gaps(t.type.shape[0]):
                self.error(
                    f"rows {_rows(gap)} of input '{t.label}' are never copied",
                    last.span,
                    hint=f"copy them too: to_device({t.label}, rows = [{gap[0]}, {gap[1]}]); "
                    "the parts of an input together cover every row",
                )

    def check_output_parts(self) -> None:
        outputs = set(self.outputs)
        joins = self.output_joins()
        owners: dict[str, list[str]] = {}  # a part → the outputs it is a part of (repeated)
        for out, node in joins.items():
            for part in node.inputs:
                owners.setdefault(part, []).append(out)
        whole: dict[str, HostCopyNode] = {}
        parted: dict[str, list[HostCopyNode]] = {}
        for node in self.ir.nodes:
            if not isinstance(node, HostCopyNode) or node.direction != "d2h":
                continue
            label = self.label(node.tensor)
            owner = owners.get(node.tensor, [])
            if node.tensor in outputs:
                whole.setdefault(node.tensor, node)
            elif not owner:
                self.error(
                    f"to_host copies '{label}', which is not an output",
                    node.span,
                    hint="write it as `output y = to_host(...)`",
                )
            elif len(owner) > 1:
                places = " and ".join(f"'{self.label(o)}'" for o in dict.fromkeys(owner))
                self.error(
                    f"to_host copies '{label}', which is more than one part of {places}",
                    node.span,
                    hint="a part's copy fills the rows of one operand of one output; copy "
                    "the output whole instead",
                )
            else:
                parted.setdefault(owner[0], []).append(node)
        for out, copies in parted.items():
            first, name = copies[0], self.label(out)
            if out in whole:
                self.error(
                    f"output '{name}' is copied to the host whole and in parts "
                    f"(part '{self.label(first.tensor)}' at line {_line(first)})",
                    whole[out].span,
                    hint="copy an output whole or part by part, not both",
                )
                continue
            join = joins[out]
            copied = {n.tensor for n in copies}
            for part in dict.fromkeys(join.inputs):
                if part in copied:
                    continue
                itself = f"; '{self.label(part)}' is an output, so its to_host copies it whole"
                self.error(
                    f"part '{self.label(part)}' of output '{name}' is never copied to the host",
                    join.span,
                    hint=f"part '{self.label(first.tensor)}' is copied at line {_line(first)}; "
                    f"copy each part of '{name}' once it is computed, or none and '{name}' whole"
                    + (itself if part in outputs else ""),
                )

    def output_joins(self) -> dict[str, OpNode]:
        """The outputs made by a ``concat`` along axis 0 (their operands are their parts)."""
        outputs = set(self.outputs)
        joins: dict[str, OpNode] = {}
        for node in self.ir.nodes:
            if isinstance(node, OpNode) and node.op == "concat" and node.output in outputs:
                rank = self.ir.tensors[node.output].type.rank
                if node.attrs.get("axis", 0) in (0, -rank):
                    joins[node.output] = node
        return joins

    def label(self, name: str) -> str:
        return self.ir.tensors[name].label if name in self.ir.tensors else name


def _items(expr: ast.Expr) -> list[Span]:
    """The span of each element of a list expression (the whole one's, for anything else)."""
    if isinstance(expr, ast.ListExpr):
        return [item.span for item in expr.items]
    return [expr.span, expr.span]


def _rows(rows: Rows) -> str:
    return f"[{rows[0]}, {rows[1]})"


def _line(node: Node) -> int | str:
    span = getattr(node, "span", None)
    return span.line if span is not None else "?"


def _reads(node: Node, name: str) -> bool:
    """Whether op node ``node`` reads tensor ``name`` (an operand, or a kernel's reads=)."""
    if not isinstance(node, OpNode):
        return False
    return name in node.inputs or (node.op == "kernel" and name in node.attrs.get("reads", ()))


def _reads_copied_rows(node: Node, x: Tensor, parts: InputParts) -> bool:
    """Whether ``node`` is ``slice(x, start, stop, axis = 0)`` of rows ``parts`` copied."""
    if not isinstance(node, OpNode) or node.op != "slice" or node.inputs != (x.name,):
        return False
    if node.attrs.get("axis", 0) not in (0, -x.type.rank):
        return False
    start, stop, _ = slice(node.attrs.get("start", 0), node.attrs.get("stop")).indices(
        x.type.shape[0]
    )
    return parts.covers(start, stop)
