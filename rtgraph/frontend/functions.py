"""Checks on ``fn`` definitions that need no arguments: body shape and recursion.

Functions are inlined at every call, so a cycle of calls would never end; it is found here,
once, on the call graph, and reported at the call that closes the cycle. A chain of functions
that each call the next twice ends, but after 2**n inlined calls: :func:`call_costs` gives
each function the fewest steps a call of it runs, so that the checker refuses such a call
before inlining it. Walks use explicit stacks: a deeply nested expression must not exhaust
Python's recursion limit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from rtgraph.errors import CheckError
from rtgraph.frontend import ast
from rtgraph.frontend.consteval import SCALAR_FUNCTIONS
from rtgraph.frontend.emit import Diagnostics
from rtgraph.ops import language_op

#: Statements that declare program-level things and so may not appear inside a function.
_PROGRAM_ONLY = {
    ast.InputDecl: "input",
    ast.ParamDecl: "param",
    ast.BufferDecl: "buffer",
    ast.StreamDecl: "stream",
    ast.EventDecl: "event",
    ast.Output: "output",
}


def statements(body: tuple[ast.Stmt, ...]) -> Iterator[ast.Stmt]:
    """Every statement of ``body``, nested blocks included, in source order."""
    stack = list(reversed(body))
    while stack:
        stmt = stack.pop()
        yield stmt
        if isinstance(stmt, ast.OnBlock | ast.DeviceBlock | ast.ForLoop):
            stack.extend(reversed(stmt.body))


def _children(node) -> tuple:
    if isinstance(node, ast.BinOp):
        return (node.left, node.right)
    if isinstance(node, ast.Neg):
        return (node.operand,)
    if isinstance(node, ast.ListExpr):
        return node.items
    if isinstance(node, ast.Call):
        return (*node.args, *(k.value for k in node.kwargs))
    if isinstance(node, ast.Index):
        return node.indices
    if isinstance(node, ast.Fused):
        return tuple(e for stmt in statements(node.body) for e in _stmt_exprs(stmt))
    return ()


def _stmt_exprs(stmt: ast.Stmt) -> tuple:
    if isinstance(stmt, ast.Binding | ast.ConstDecl | ast.Return):
        return (stmt.value,)
    if isinstance(stmt, ast.Output):
        return (stmt.value,) if stmt.value is not None else ()
    if isinstance(stmt, ast.ForLoop):
        return (stmt.start, stmt.stop)
    if isinstance(stmt, ast.DeviceBlock):
        return (stmt.rank,)
    return ()


def calls(body: tuple[ast.Stmt, ...]) -> Iterator[ast.Call]:
    """Every call written in ``body``, in source order."""
    for stmt in statements(body):
        stack = list(reversed(_stmt_exprs(stmt)))
        while stack:
            node = stack.pop()
            if isinstance(node, ast.Call):
                yield node
            stack.extend(reversed(_children(node)))


def _expr_calls(exprs: Iterable) -> Iterator[ast.Call]:
    stack = list(reversed(tuple(exprs)))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Call):
            yield node
        stack.extend(reversed(_children(node)))


#: Where a count saturates (a chain of 10,000 doubling functions needs no 10,000-bit int).
COST_CAP = 2**62


@dataclass(frozen=True)
class Cost:
    """The fewest steps (statements, loop iterations, calls) and op nodes some code runs."""

    steps: int = 0
    nodes: int = 0

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            min(self.steps + other.steps, COST_CAP), min(self.nodes + other.nodes, COST_CAP)
        )

    def times(self, n: int) -> Cost:
        return Cost(min(self.steps * n, COST_CAP), min(self.nodes * n, COST_CAP))


NO_COST = Cost()


def _trips(loop: ast.ForLoop, known: Callable[[ast.Expr], int | None]) -> int:
    """Iterations of ``loop`` when both bounds are already known, else 0 (a lower bound)."""
    start, stop = known(loop.start), known(loop.stop)
    return max(0, stop - start) if start is not None and stop is not None else 0


def literal(expr: ast.Expr) -> int | None:
    """An integer written as a literal, else None."""
    if isinstance(expr, ast.Number) and isinstance(expr.value, int):
        return expr.value
    if isinstance(expr, ast.Neg):
        inner = literal(expr.operand)
        return -inner if inner is not None else None
    return None


def block_cost(
    body: tuple[ast.Stmt, ...],
    callee: Callable[[str], Cost | None],
    known: Callable[[ast.Expr], int | None] = literal,
) -> Cost:
    """The fewest steps and op nodes running ``body`` takes, functions inlined.

    ``callee(name)`` is the cost of calling ``name`` (None: an op or nothing); ``known(expr)``
    a loop bound known before the code runs (else the loop counts no iteration). An ``on``
    body counts once; only explicit op calls count as nodes (an operator on numbers folds); a
    call whose arguments fail is not made, so this bounds a program without errors — checked
    before a loop is unrolled or a function inlined, it refuses a runaway program at once.
    """
    total = NO_COST
    for stmt in body:
        if total.steps >= COST_CAP:
            break
        total += Cost(1) + _calls_cost(_stmt_exprs(stmt), callee)
        if isinstance(stmt, ast.OnBlock | ast.DeviceBlock):
            total += block_cost(stmt.body, callee, known)
        elif isinstance(stmt, ast.ForLoop):
            trips = _trips(stmt, known)
            if trips:
                inner = Cost(1) + block_cost(stmt.body, callee, known)
                total += inner.times(trips)
    return total


def _calls_cost(exprs: Iterable, callee: Callable[[str], Cost | None]) -> Cost:
    total = NO_COST
    for call in _expr_calls(exprs):
        name = call.func.name
        cost = callee(name)
        if cost is not None:
            total += cost
        elif language_op(name) is not None and name not in SCALAR_FUNCTIONS:
            total += Cost(0, 1)
    return total


def call_costs(fns: dict[str, ast.FnDef], recursive: set[str]) -> dict[str, Cost]:
    """The fewest steps and nodes an inlined call of each function runs (see
    :func:`block_cost`): the call itself, its statements, what its ``return`` calls.

    Callees first, by an explicit post-order walk of the call graph; a recursive function is
    never inlined and costs nothing.
    """
    local = {name: _local_names(fn) for name, fn in fns.items()}
    callees = {
        name: [
            c.func.name
            for c in calls(fn.body)
            if c.func.name in fns and c.func.name not in local[name]
        ]
        for name, fn in fns.items()
    }
    costs: dict[str, Cost] = {name: NO_COST for name in recursive if name in fns}
    for root in fns:
        stack, visiting = [root], {root}
        while stack:
            name = stack[-1]
            if name in costs:
                stack.pop()
                continue
            pending = [c for c in callees[name] if c not in costs and c not in visiting]
            if pending:
                stack.extend(pending)
                visiting.update(pending)
                continue
            stack.pop()

            def callee(c: str, name: str = name) -> Cost | None:
                if c in local[name]:
                    return NO_COST  # a local value called: not a function known here
                return costs.get(c, NO_COST) if c in fns else None

            fn = fns[name]
            body, returned = fn.body, NO_COST
            if body and isinstance(body[-1], ast.Return):
                body, returned = body[:-1], _calls_cost((body[-1].value,), callee)
            costs[name] = Cost(1) + block_cost(body, callee) + returned
    return costs


def _local_names(fn: ast.FnDef) -> set[str]:
    names = {p.name for p in fn.params}
    for stmt in statements(fn.body):
        if isinstance(stmt, ast.Binding | ast.ConstDecl):
            names.add(stmt.name.name)
        elif isinstance(stmt, ast.ForLoop):
            names.add(stmt.var.name)
    return names


def check_body(fn: ast.FnDef, diagnostics: Diagnostics) -> None:
    """Parameters are distinct, the body ends with its only ``return``, declares nothing."""
    seen: dict[str, ast.Ident] = {}
    for p in fn.params:
        if p.name in seen:
            diagnostics.add(
                CheckError(
                    f"parameter '{p.name}' appears twice in function '{fn.name.name}'", p.span
                )
            )
        seen.setdefault(p.name, p)
    last = fn.body[-1] if fn.body else None
    if not isinstance(last, ast.Return):
        diagnostics.add(
            CheckError(
                f"function '{fn.name.name}' does not return a value",
                fn.name.span,
                hint="end its body with `return expr`",
            )
        )
    for stmt in statements(fn.body):
        if isinstance(stmt, ast.Return) and stmt is not last:
            diagnostics.add(
                CheckError("return must be the last statement of a function body", stmt.span)
            )
        keyword = _PROGRAM_ONLY.get(type(stmt))
        if keyword is not None:
            diagnostics.add(
                CheckError(
                    f"'{keyword}' is not allowed inside a function",
                    stmt.span,
                    hint="declare it in the program and pass it to the function as an argument",
                )
            )


def find_recursion(fns: dict[str, ast.FnDef], diagnostics: Diagnostics) -> set[str]:
    """Names of the functions on a call cycle; each cycle is reported at its closing call."""
    edges: dict[str, list[tuple[str, ast.Call]]] = {}
    for name, fn in fns.items():
        local = _local_names(fn)
        edges[name] = [
            (c.func.name, c)
            for c in calls(fn.body)
            if c.func.name in fns and c.func.name not in local
        ]
    recursive: set[str] = set()
    state: dict[str, int] = {}  # 1: on the DFS path, 2: done
    for root in fns:
        if root in state:
            continue
        path: list[str] = [root]
        cursors: list[int] = [0]
        state[root] = 1
        while path:
            u = path[-1]
            i = cursors[-1]
            if i == len(edges[u]):
                state[u] = 2
                path.pop()
                cursors.pop()
                continue
            cursors[-1] += 1
            v, call = edges[u][i]
            if state.get(v) == 1:
                cycle = [*path[path.index(v) :], v]
                recursive.update(cycle)
                diagnostics.add(
                    CheckError(
                        f"recursive function: {' → '.join(cycle)}",
                        call.func.span,
                        hint="functions are inlined at compile time and cannot call themselves; "
                        "use a for loop",
                    )
                )
            elif v not in state:
                state[v] = 1
                path.append(v)
                cursors.append(0)
    return recursive
