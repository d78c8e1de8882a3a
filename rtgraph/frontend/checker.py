"""AST → :class:`~rtgraph.ir.Program`: names, declarations, streams and events, fns, loops.

The checker runs the program's statements once, in order, as a compile-time interpreter:
``for`` bodies are unrolled, ``fn`` calls inlined (with qualified IR names such as
``ffn.1/h`` and ``l=2/h``), and every op typed by its registry rule. Each mistake is
reported where it was written and the checker carries on with a poisoned value, so one run
lists every independent error, in source order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from rtgraph.device import device_name_problem
from rtgraph.dtypes import DTYPES
from rtgraph.errors import CheckError, RtgError, Span, did_you_mean
from rtgraph.frontend import ast, consteval, limits
from rtgraph.frontend.buffers import PlacedBuffer, check_placement
from rtgraph.frontend.calls import Bind
from rtgraph.frontend.emit import Diagnostics, IRBuilder, ProgramTooLarge
from rtgraph.frontend.functions import (
    Cost,
    block_cost,
    call_costs,
    check_body,
    find_recursion,
    literal,
)
from rtgraph.frontend.gears import check_total
from rtgraph.frontend.graphs import GraphChecker
from rtgraph.frontend.loop_replay import LoopReplay, mentions
from rtgraph.frontend.params import bind_params
from rtgraph.frontend.values import POISON, Bound, FnRef, Scope, Value, describe
from rtgraph.ir.data import nonnegative_params
from rtgraph.ir.graph import OpNode, Program, Tensor
from rtgraph.ops import language_op
from rtgraph.ops.fused import CHANNEL_AXIS
from rtgraph.ops.registry import ELEMENT_MOVES

#: Steps run before checking gives up on a program: statements, loop iterations and function
#: calls inlined (``RTGRAPH_MAX_STEPS`` overrides it; :mod:`~rtgraph.frontend.limits`). Twice
#: :data:`~rtgraph.frontend.emit.MAX_NODES`: a program at the operation limit also runs its
#: loop iterations and calls. A loop or a call whose fewest steps would pass it is refused
#: before it runs; reached step by step (no loop or call passes it at once), it stops a
#: program within seconds (an empty iteration costs about 1 µs).
MAX_STEPS = 4_000_000
#: Deepest chain of nested function calls.
MAX_CALL_DEPTH = 64
#: Device ranks a ``device[…]`` block may name (a cluster spec allows as many devices).
MAX_DEVICES = 1024
#: The precisions ``@precision(…)`` may pin an op to (``int8``: a matmul or conv2d only).
PRECISIONS = ("f32", "f16", "bf16", "int8")
_PRECISIONS_HINT = "@precision takes f32, f16, bf16 or int8 (int8: a matmul or conv2d)"


class Checker(GraphChecker):
    """Checks one module and builds its program."""

    def __init__(self, module: ast.Module, device_capacity: int | None = None) -> None:
        diagnostics = Diagnostics()
        super().__init__(module.source, diagnostics, IRBuilder(diagnostics, device_capacity))
        self.module = module
        self.globals = Scope(None)
        self.program_scope = Scope(self.globals)
        self.scope = self.program_scope
        self.stream: str | None = None
        self.device: int | None = None  # the rank of the enclosing device[…] block
        self.active_fns: list[str] = []
        self.recursive: set[str] = set()
        self.costs: dict[str, Cost] = {}  # the fewest steps and nodes a call of each fn runs
        self.fn_calls: dict[str, int] = {}
        self.streams: list[str] = []
        self.events: list[str] = []
        self.priorities: dict[str, int] = {}
        self.gears: dict[str, tuple[int, ...]] = {}  # each dynamic parameter's gears
        self.ranges: dict[str, tuple[int, int]] = {}  # the ends of each ranged one's
        self.outputs: list[str] = []
        self.recorded: set[str] = set()
        self.copied: dict[tuple[str, str], Span] = {}  # placed host copies, where written
        self.buffers: list[PlacedBuffer] = []
        self.steps = 0
        self.max_steps = limits.effective(limits.STEPS, MAX_STEPS)
        self.functions: dict[str, ast.FnDef] = {}
        self.abstract = False  # checking a function body without arguments

    # --- the whole file --------------------------------------------------------------------
    def check(self, params: Mapping[str, int] | None, errors: list[RtgError]) -> Program:
        """The checked program; raises every error found (``errors``: the parser's)."""
        device: ast.DeviceDirective | None = None
        program: ast.ProgramDef | None = None
        values: dict[str, int] = {}
        try:
            for error in errors:
                self.report(error)
            device, program = self.items()
            if program is None:
                span = Span(self.module.source, 1, 1, 1, 2)
                self.error("no program in this file", span, hint="add `program name() { ... }`")
            else:
                values = bind_params(self, program, params or {})
                check_total(self.gears, program.name.span, self.error)
                self.run_block(program.body)
                self.check_host_copies()
                self.check_replayed()
                self.check_uncalled_functions()
        except ProgramTooLarge as e:
            self.diagnostics.last(e.error)
        try:
            for error in check_placement(self.buffers, self.ir.device_capacity):
                self.report(error)
        except ProgramTooLarge as e:
            self.diagnostics.last(e.error)
        self.diagnostics.raise_if_any()
        assert program is not None
        return Program(
            name=program.name.name,
            params=values,
            device=device.name if device is not None else None,
            tensors=nonnegative_params(self.ir.tensors, self.ir.nodes),
            nodes=self.ir.nodes,
            outputs=self.outputs,
            streams=self.streams,
            events=self.events,
            stream_priorities=self.priorities,
            gears=self.gears,
            ranges=self.ranges,
            graph_replays=tuple(self.graph_replays),
            source=self.module.source,
        )

    def items(self) -> tuple[ast.DeviceDirective | None, ast.ProgramDef | None]:
        """The device directive and the program; functions go into the global scope."""
        device: ast.DeviceDirective | None = None
        program: ast.ProgramDef | None = None
        defined: dict[str, ast.Ident] = {}
        fns = self.functions
        for item in self.module.items:
            if isinstance(item, ast.DeviceDirective):
                problem = device_name_problem(item.name)
                if problem is not None:
                    self.error(problem[0], item.span, hint=problem[1])
                elif device is None:
                    device = item
                else:
                    self.error(
                        "a file may name its device once",
                        item.span,
                        hint=f"the first device directive is at line {device.span.line}",
                    )
                continue
            ident = item.name
            first = defined.get(ident.name)
            if first is not None:
                self.error(
                    f"'{ident.name}' is defined twice",
                    ident.span,
                    hint=f"the first definition is at line {first.span.line}",
                )
                if not isinstance(item, ast.ProgramDef) or program is not None:
                    continue
            defined.setdefault(ident.name, ident)
            if isinstance(item, ast.ProgramDef):
                if program is not None:
                    self.error(
                        f"a file holds one program; '{ident.name}' is a second one",
                        ident.span,
                        hint=f"program '{program.name.name}' is at line {program.span.line}; "
                        "move this one to its own file",
                    )
                else:
                    program = item
            elif language_op(ident.name) is not None or ident.name in consteval.SCALAR_FUNCTIONS:
                self.error(
                    f"function '{ident.name}' has the name of a built-in op",
                    ident.span,
                    hint="choose another name",
                )
            else:
                fns[ident.name] = item
                self.globals.names[ident.name] = Bound(FnRef(item), "fn", ident.span)
        for fn in fns.values():
            check_body(fn, self.diagnostics)
        self.recursive = find_recursion(fns, self.diagnostics)
        self.costs = call_costs(fns, self.recursive)
        return device, program

    # --- statements ------------------------------------------------------------------------
    def run_block(self, body: tuple[ast.Stmt, ...]) -> None:
        for stmt in body:
            self.steps += 1  # self.tick(stmt.span), inline: it runs for every statement
            if self.steps > self.max_steps:
                self.tick(stmt.span, 0)
            _STATEMENTS[type(stmt)](self, stmt)

    def tick(self, span: Span, steps: int = 1) -> None:
        """Count statements and loop iterations run; stop a program that runs away."""
        self.steps += steps
        if self.steps > self.max_steps:
            raise ProgramTooLarge(
                CheckError(
                    f"the program runs more than {self.max_steps:,} statements when unrolled",
                    span,
                    hint="loops are unrolled at compile time; lower the loop bounds or parameters",
                )
            )

    def binding_scope(self, ident: ast.Ident) -> Scope | None:
        """Where ``ident = ...`` binds: here, or the enclosing scope of a loop-carried name."""
        owner, crossed_loop = self.scope.owner(ident.name)
        if owner is None:
            return self.scope
        bound = owner.names[ident.name]
        if owner is self.scope or not crossed_loop or bound.kind != "binding":
            self.rebound(ident, bound)
            return None
        if ident.name in self.scope.carried:
            self.error(
                f"'{ident.name}' is already rebound in this loop iteration",
                ident.span,
                hint="a for body rebinds a loop-carried name once per iteration",
            )
            return None
        return owner

    def s_binding(self, st: ast.Binding) -> None:
        target = self.binding_scope(st.name)
        name = st.name.name
        bind = (self.scope.prefix + name, name) if target is not None else None
        mark = len(self.ir.nodes)
        value = self.eval(st.value, bind)
        if (
            bind is not None
            and isinstance(value, Tensor)
            and value.kind == "value"
            and value.name != bind[0]
            and self.ir.made_since(mark, value.name)
        ):
            value = self.ir.rename(value, *bind, mark)
        if st.precision is not None and target is not None:
            value = self.pin_precision(st, value, mark)
        if target is not None:
            target.names[name] = Bound(value, "binding", st.name.span)
            if target is not self.scope:
                self.scope.carried.add(name)

    def pin_precision(self, st: ast.Binding, value: Value, mark: int) -> Value:
        """``value`` with the precision ``st``'s ``@precision(…)`` pins for the op that made it
        (an op emitted at or after ``mark``: the last op of the binding's expression)."""
        written = st.precision
        assert written is not None
        precision = written.value.name
        if precision not in PRECISIONS:
            self.error(
                f"unknown precision '{precision}'",
                written.value.span,
                hint=" ".join(
                    filter(None, (did_you_mean(precision, PRECISIONS), _PRECISIONS_HINT))
                ),
            )
            return value
        if value is POISON:
            return value
        node = None
        if isinstance(value, Tensor) and value.kind == "value":
            node = self.ir.producer(mark, value.name)
        if node is None:  # the binding stands, unpinned: its later uses are checked as usual
            self.error(
                f"@precision({precision}) pins the precision of the op a binding computes; "
                f"'{st.name.name}' is {describe(value)}, computed by no op here",
                written.span,
                hint="annotate the binding whose expression computes the value, as in "
                f"`h = x @ w @precision({precision})`",
            )
            return value
        assert isinstance(value, Tensor)
        if not DTYPES[value.type.dtype].is_float:
            self.error(
                f"@precision({precision}) needs an op with a floating-point result; "
                f"'{node.op}' makes {value.type.dtype}",
                written.span,
                hint="precision is chosen for floating-point arithmetic only",
            )
            return value
        if node.op in ELEMENT_MOVES:
            self.error(
                f"@precision({precision}) pins an op's arithmetic; '{node.op}' does none (it "
                "moves elements and keeps the dtype its operand arrives in)",
                written.span,
                hint=f"pin the op that computes the elements, before the {node.op}",
            )
            return value
        if precision == "int8" and node.op not in CHANNEL_AXIS:
            self.error(
                f"@precision(int8) applies to a matmul or conv2d, not to '{node.op}'",
                written.value.span,
                hint="only matmul and conv2d have an int8 form (int8 × int8 into int32 on the "
                "Cube); pin this op to f16, bf16 or f32",
            )
            return value
        return self.ir.pin(value, precision)

    def s_output(self, st: ast.Output) -> None:
        if self.active_fns:
            return  # reported once, on the function's definition
        if self.scope is not self.program_scope:
            self.error(
                "output belongs at the top level of the program (or directly in an on block)",
                st.span,
            )
            return
        name = st.name.name
        if _copies_itself(st):
            mark = len(self.ir.nodes)
            value = self.eval(st.value)  # `output y = to_host(y)`: y's copy, placed here
            if st.precision is not None:
                self.pin_precision(
                    ast.Binding(st.name, st.value, st.span, st.precision), value, mark
                )
        elif st.value is not None:
            self.s_binding(ast.Binding(st.name, st.value, st.span, st.precision))
        bound = self.scope.lookup(name)
        if bound is None:
            self.undefined(name, st.name.span)
            return
        value = bound.value
        if value is POISON:
            return
        if not isinstance(value, Tensor) or value.kind in ("token", "buffer"):
            self.error(f"output needs a tensor, not {describe(value)}", st.name.span)
        elif value.name in self.outputs:
            self.error(f"'{name}' is already an output", st.name.span)
        else:
            self.outputs.append(value.name)

    def s_for(self, st: ast.ForLoop) -> None:
        start = self.compile_time_int(st.start, "a loop bound")
        stop = self.compile_time_int(st.stop, "a loop bound")
        var = st.var.name
        if self.scope.lookup(var) is not None:
            self.rebound(st.var)
            return
        if start is None or stop is None:
            return
        if stop <= start:
            return  # no iteration: the body never runs
        header = st.span.to(st.stop.span)
        # Fail before unrolling a loop that could not finish (each iteration is a step, and
        # so is each statement and call of its body; the op calls it makes at least).
        least = (Cost(1) + block_cost(st.body, self.callee_cost, self.known_int)).times(
            stop - start
        )
        if self.steps + least.steps > self.max_steps:
            self.tick(header, self.max_steps)
        self.check_nodes(least.nodes, header, "loops are unrolled at compile time")
        outer = self.scope
        # Iterations that differ only in names are made from a recorded one (loop_replay).
        replay = (
            LoopReplay(self, outer)
            if stop - start > 2 and not len(self.diagnostics) and not mentions(st.body, var)
            else None
        )
        try:
            for i in range(start, stop):
                self.tick(header)
                prefix = f"{outer.prefix}{var}={i}/"
                if replay is not None and replay.replay(prefix):
                    continue
                if replay is not None:
                    replay.before(prefix)
                self.scope = Scope(outer, prefix, loop=True)
                self.scope.names[var] = Bound(i, "loop", st.var.span)
                self.run_block(st.body)
                if replay is not None:
                    replay.after()
        finally:
            self.scope = outer

    def side_effects(self) -> tuple:
        """What running statements changes besides ops and tensors, in counts: a loop
        iteration that changes any of it is not replayed (:mod:`.loop_replay`)."""
        return (
            len(self.outputs),
            len(self.recorded),
            len(self.copied),
            len(self.buffers),
            len(self.streams),
            len(self.events),
            len(self.priorities),
            sum(self.fn_calls.values()),
            self.ir.declared,
            len(self.graphs),
            len(self.graph_replays),
            len(self.row_parts),
            self.stream,
            self.device,
            self.in_graph,
        )

    def s_device(self, st: ast.DeviceBlock) -> None:
        """``device[rank] { … }``: every op the body makes (calls included) runs on ``rank``."""
        rank = self.compile_time_int(st.rank, "a device rank")
        if self.device is not None:
            self.error(
                "device blocks cannot be nested",
                st.span,
                hint=f"this block is already inside 'device[{self.device}]'",
            )
            return
        if rank is not None and not 0 <= rank < MAX_DEVICES:
            self.error(
                f"device rank {rank} is not between 0 and {MAX_DEVICES - 1}",
                st.rank.span,
                hint="ranks count the cluster's devices from 0",
            )
            return
        mark = len(self.ir.nodes)
        self.device = rank if rank is not None else 0
        try:
            self.run_block(st.body)
        finally:
            self.device = None
        nodes = self.ir.nodes
        for k in range(mark, len(nodes)):
            node = nodes[k]
            if isinstance(node, OpNode):
                nodes[k] = replace(node, device=rank)

    def callee_cost(self, name: str) -> Cost | None:
        """What a call of ``name`` costs at least here (None: it is no name, maybe an op)."""
        bound = self.scope.lookup(name)
        if bound is None:
            return None
        if not isinstance(bound.value, FnRef):
            return Cost()
        return self.costs.get(bound.value.fn.name.name, Cost(1))

    def known_int(self, expr: ast.Expr) -> int | None:
        """A loop bound known before the loop runs: a literal, a const, a parameter, an
        enclosing loop's variable or a function argument (none of them can be rebound)."""
        value = literal(expr)
        if value is None and isinstance(expr, ast.Name):
            bound = self.scope.lookup(expr.id)
            if bound is not None and bound.kind in ("const", "loop", "arg"):
                value = consteval.as_int(bound.value)
        return value

    def check_nodes(self, more: int, span: Span, why: str) -> None:
        """Refuse to make ``more`` nodes (at least) when they would pass ``MAX_NODES``."""
        if len(self.ir.nodes) + more > self.ir.max_nodes:
            raise ProgramTooLarge(
                CheckError(
                    f"the program expands to more than {self.ir.max_nodes:,} operations",
                    span,
                    hint=f"{why}; this makes at least {more:,} operations",
                )
            )

    def s_return(self, st: ast.Return) -> None:
        if not self.active_fns:
            self.error("return outside a function", st.span)
        # Inside a function a misplaced return was reported with its definition.

    # --- functions -------------------------------------------------------------------------
    def check_uncalled_functions(self) -> None:
        """Run each function no call inlined once with unknown (poisoned) arguments.

        Whatever does not depend on the arguments is checked as in a call (undefined names,
        unknown ops, attributes of the wrong kind); the ops it would make are thrown away.
        """
        ir, self.ir = self.ir, IRBuilder(self.diagnostics, self.ir.device_capacity)
        self.abstract = True
        try:
            for name, fn in self.functions.items():
                if name in self.fn_calls or name in self.recursive:
                    continue
                self.scope = Scope(self.globals, f"{name}.0/")
                for param in fn.params:
                    self.scope.names.setdefault(param.name, Bound(POISON, "arg", param.span))
                self.active_fns.append(name)
                try:
                    self.run_fn_body(fn, None)
                finally:
                    self.active_fns.pop()
        finally:
            self.ir, self.abstract, self.scope = ir, False, self.program_scope

    def run_fn_body(self, fn: ast.FnDef, bind: Bind | None) -> Value:
        body = fn.body
        if not body or not isinstance(body[-1], ast.Return):
            self.run_block(body)
            return POISON
        self.run_block(body[:-1])
        return self.eval(body[-1].value, bind)

    def call_fn(self, fn: ast.FnDef, call: ast.Call, bind: Bind | None) -> Value:
        """Inline ``fn`` at ``call``: its body runs in a fresh scope with qualified names."""
        name = fn.name.name
        ok = True
        for kw in call.kwargs:
            self.error(f"function '{name}' takes positional arguments only", kw.span)
            ok = False
        args = [self.eval(a) for a in call.args]
        if len(args) != len(fn.params):
            self.error(
                f"function '{name}' takes {len(fn.params)} argument"
                f"{'s' if len(fn.params) != 1 else ''}, got {len(args)}",
                call.span,
                hint=f"it is defined at line {fn.span.line}: fn {name}("
                f"{', '.join(p.name for p in fn.params)})",
            )
            ok = False
        if not ok or name in self.recursive or any(a is POISON for a in args):
            return POISON
        if len(self.active_fns) >= MAX_CALL_DEPTH:
            return self.error(
                f"function calls nest more than {MAX_CALL_DEPTH} deep", call.func.span
            )
        cost = self.costs.get(name, Cost(1))
        self.check_nodes(cost.nodes, call.func.span, f"'{name}' is inlined at every call")
        if self.steps + cost.steps > self.max_steps:  # refused before inlining 2**n calls
            raise ProgramTooLarge(
                CheckError(
                    f"the program runs more than {self.max_steps:,} statements when unrolled",
                    call.func.span,
                    hint=f"a call of '{name}' runs at least {cost.steps:,} statements and "
                    "calls: functions are inlined at every call",
                )
            )
        self.tick(call.func.span)
        self.fn_calls[name] = self.fn_calls.get(name, 0) + 1
        scope = Scope(self.globals, f"{self.scope.prefix}{name}.{self.fn_calls[name]}/")
        for param, value in zip(fn.params, args, strict=True):
            scope.names.setdefault(param.name, Bound(value, "arg", param.span))
        caller = self.scope
        self.scope = scope
        self.active_fns.append(name)
        try:
            return self.run_fn_body(fn, bind)
        finally:
            self.active_fns.pop()
            self.scope = caller


def _copies_itself(st: ast.Output) -> bool:
    """Whether ``st`` is ``output y = to_host(y)``: an output copied back where it stands."""
    value = st.value
    return (
        isinstance(value, ast.Call)
        and value.func.name == "to_host"
        and len(value.args) == 1
        and isinstance(value.args[0], ast.Name)
        and value.args[0].id == st.name.name
    )


_STATEMENTS = {
    ast.InputDecl: Checker.s_input,
    ast.ParamDecl: Checker.s_param,
    ast.ConstDecl: Checker.s_const,
    ast.BufferDecl: Checker.s_buffer,
    ast.Binding: Checker.s_binding,
    ast.Output: Checker.s_output,
    ast.StreamDecl: Checker.s_streams,
    ast.EventDecl: Checker.s_events,
    ast.OnBlock: Checker.s_on,
    ast.DeviceBlock: Checker.s_device,
    ast.Record: Checker.s_record,
    ast.Wait: Checker.s_wait,
    ast.Barrier: Checker.s_barrier,
    ast.Sync: Checker.s_sync,
    ast.Callback: Checker.s_callback,
    ast.ForLoop: Checker.s_for,
    ast.Return: Checker.s_return,
    ast.GraphDef: Checker.s_graph,
    ast.Replay: Checker.s_replay,
}


def named_device(module: ast.Module) -> str | None:
    """The device ``module``'s ``device "…"`` line names: the first well-formed one, as
    :meth:`Checker.items` takes it (the checker reports a malformed or repeated one)."""
    for item in module.items:
        if isinstance(item, ast.DeviceDirective) and device_name_problem(item.name) is None:
            return item.name
    return None


def check_module(
    module: ast.Module,
    params: Mapping[str, int] | None = None,
    *,
    device_capacity: int | None = None,
    errors: list[RtgError] | None = None,
) -> Program:
    """The checked program of ``module``; raises every error found (with ``errors`` given)."""
    checker = Checker(module, device_capacity)
    return checker.check(params, errors or [])
