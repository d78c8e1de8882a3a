"""Checks on ``fn`` definitions that need no arguments: body shape and recursion.

Functions are inlined at every call, so a cycle of calls would never end; it is found here,
once, on the call graph, and reported at the call that closes the cycle. Walks use explicit
stacks: a deeply nested expression must not exhaust Python's recursion limit.
"""

from __future__ import annotations

from collections.abc import Iterator

from rtgraph.errors import CheckError
from rtgraph.frontend import ast
from rtgraph.frontend.emit import Diagnostics

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
        if isinstance(stmt, ast.OnBlock | ast.ForLoop):
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
    return ()


def _stmt_exprs(stmt: ast.Stmt) -> tuple:
    if isinstance(stmt, ast.Binding | ast.ConstDecl | ast.Return):
        return (stmt.value,)
    if isinstance(stmt, ast.Output):
        return (stmt.value,) if stmt.value is not None else ()
    if isinstance(stmt, ast.ForLoop):
        return (stmt.start, stmt.stop)
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
