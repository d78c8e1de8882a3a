"""Unrolled ``for`` iterations made from one checked iteration, under new names.

The checker unrolls a loop by running its body once per iteration. A body that never reads
its loop variable, and whose loop-carried values keep their kind and type from one iteration
to the next, makes the same ops at every iteration: only the IR names differ (``i=3/h``
becomes ``i=4/h``, temporaries and constants take the next numbers, and the carried values
read are the previous iteration's). Such a loop is checked in full for two iterations — the
first may see other types, carried in from before the loop — and the second is recorded; the
rest are replayed: its nodes and tensors with each name mapped, the carried names rebound.
This makes, name for name and in the same order, what checking every iteration makes
(``tests/test_loop_replay.py`` compares the two on random programs), at a fraction of the
cost: generated loops of 100,000 and 1,000,000 synthetic kernels check two and four times as
fast.

Anything the recording cannot prove iteration-invariant keeps the full check: a body that
mentions the loop variable; an iteration that reported an error, made a node other than an op
(host copies, syncs, records), called a function (inlined calls are numbered program-wide),
declared, placed or output something, or named a tensor outside the iteration's prefix and
the temporary counters; a carried value that is not a tensor made by the iteration before or
whose type changed; and any replayed name already taken, or a replay that would pass the
step or operation limits (the full check then reports them where they occur).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, TypeVar

from rtgraph.frontend import ast
from rtgraph.frontend.emit import Diagnostics, IRBuilder
from rtgraph.frontend.values import Bound, Scope
from rtgraph.ir.graph import OpNode, Tensor

R = TypeVar("R")

#: The attributes of an op that hold tensor names (a synthetic kernel's footprint).
_NAME_ATTRS = ("reads", "writes")


class LoopChecking(Protocol):
    """What the replay reads and updates of the checker running the loop."""

    ir: IRBuilder
    diagnostics: Diagnostics
    scope: Scope
    steps: int
    max_steps: int

    def side_effects(self) -> tuple: ...


def mentions(body: tuple[ast.Stmt, ...], name: str) -> bool:
    """Whether ``name`` appears as a name anywhere in ``body`` (nested blocks included)."""
    stack: list[Any] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, tuple):
            stack.extend(node)
        elif isinstance(node, ast.Name):
            if node.id == name:
                return True
        elif isinstance(node, ast.Ident):
            if node.name == name:
                return True
        elif type(node).__module__ == ast.__name__:  # an AST node: its fields, not its span
            stack.extend(getattr(node, f) for f in _fields(type(node)) if f != "span")
    return False


def _fields(cls: type) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


_FIELDS: dict[type, tuple[str, ...]] = {}


@dataclasses.dataclass(frozen=True)
class _Template:
    """One recorded iteration: what it made and which carried values it read and rebound."""

    prefix: str
    temps: int  # the builder's temporary and constant counters when it started
    consts: int
    made_temps: int  # how many of each it took
    made_consts: int
    steps: int  # statements it ran
    tensors: tuple[Tensor, ...]  # the tensors it made, in the builder's order
    renames: tuple[tuple[str, int, str | int], ...]  # each one's name, how it is renamed
    nodes: tuple[OpNode, ...]
    named_attrs: tuple[tuple[str, ...], ...]  # per node, its attributes that hold names
    entry: dict[str, str]  # carried name -> the tensor it held when the iteration began
    exit: dict[str, Bound]  # carried name -> its binding when the iteration ended
    owners: dict[str, Scope]  # carried name -> the enclosing scope that binds it


class LoopReplay:
    """Records the second iteration of one loop execution and replays it for the rest."""

    def __init__(self, checker: LoopChecking, outer: Scope) -> None:
        self.checker = checker
        self.outer = outer
        self.template: _Template | None = None
        self.failed = False
        self.iterations = 0
        self.carried: dict | None = None  # what the first iteration rebound (see _rebound)
        self.previous_made: set[str] = set()  # tensors the last full iteration made
        self._start: tuple | None = None
        self.last: dict[str, Tensor] = {}  # carried name -> what the last iteration bound

    # --- full iterations -----------------------------------------------------------------------
    def before(self, prefix: str) -> None:
        """Note the state before a fully checked iteration with scope prefix ``prefix``."""
        c = self.checker
        ir = c.ir
        scopes = []
        scope: Scope | None = self.outer
        while scope is not None:  # every enclosing binding, to see which the iteration changes
            scopes.append((scope, dict(scope.names)))
            scope = scope.parent
        self._start = (
            prefix,
            len(ir.tensors),
            len(ir.nodes),
            ir._temps,
            ir._consts,
            c.steps,
            len(c.diagnostics),
            c.side_effects(),
            scopes,
        )

    def after(self) -> None:
        """Record the iteration just checked if it can be replayed."""
        assert self._start is not None
        prefix, n_tensors, n_nodes, temps, consts, steps, errors, effects, scopes = self._start
        c = self.checker
        ir = c.ir
        self.iterations += 1
        made = list(ir.tensors)[n_tensors:] if len(ir.tensors) > n_tensors else []
        made_set = set(made)
        rebound = _rebound(scopes)
        if (
            self.failed
            or rebound is None
            or len(c.diagnostics) != errors
            or c.side_effects() != effects
            or not all(type(n) is OpNode for n in ir.nodes[n_nodes:])
        ):
            self.failed = True
            return
        if self.iterations == 1:
            self.carried = rebound
            self.previous_made = made_set
            return
        renames = [_how_renamed(n, prefix, (temps, ir._temps), (consts, ir._consts)) for n in made]
        if _owners(rebound) != _owners(self.carried) or None in renames:
            self.failed = True
            return
        entry: dict[str, str] = {}
        exit_: dict[str, Bound] = {}
        owners: dict[str, Scope] = {}
        for name, (owner, was) in rebound.items():
            bound = owner.names[name]
            before = was.value if was is not None else None
            if (
                not isinstance(before, Tensor)
                or not isinstance(bound.value, Tensor)
                or before.name not in self.previous_made
                or bound.value.name not in made_set
                or not _same_but_name(before, bound.value)
            ):
                self.failed = True
                return
            entry[name], exit_[name], owners[name] = before.name, bound, owner
        if len(set(entry.values())) != len(entry):
            self.failed = True  # two carried names held one tensor: the mapping is ambiguous
            return
        nodes: tuple[OpNode, ...] = tuple(ir.nodes[n_nodes:])  # type: ignore[arg-type]
        self.template = _Template(
            prefix=prefix,
            temps=temps,
            consts=consts,
            made_temps=ir._temps - temps,
            made_consts=ir._consts - consts,
            steps=c.steps - steps,
            tensors=tuple(ir.tensors[n] for n in made),
            renames=tuple(renames),  # type: ignore[arg-type]
            nodes=nodes,
            named_attrs=tuple(tuple(k for k in _NAME_ATTRS if n.attrs.get(k)) for n in nodes),
            entry=entry,
            exit=exit_,
            owners=owners,
        )
        self.last = {name: bound.value for name, bound in exit_.items()}  # type: ignore[misc]

    # --- replayed iterations -----------------------------------------------------------------
    def replay(self, prefix: str) -> bool:
        """Make the iteration with scope prefix ``prefix`` from the template; False when it
        must be checked in full instead (then no replay is tried again for this loop)."""
        t = self.template
        if t is None or self.failed:
            return False
        c = self.checker
        ir = c.ir
        if c.steps + t.steps > c.max_steps or len(ir.nodes) + len(t.nodes) > ir.max_nodes:
            self.failed = True
            return False
        names = self._mapping(t, prefix)
        if names is None:
            self.failed = True
            return False
        tensors = ir.tensors
        for old in t.tensors:
            new = names[old.name]
            tensors[new] = _copy(old, name=new)
        get = names.get
        nodes = ir.nodes
        for n, named in zip(t.nodes, t.named_attrs, strict=True):
            attrs = dict(n.attrs)
            for k in named:
                attrs[k] = tuple([get(x, x) for x in attrs[k]])
            nodes.append(
                _copy(
                    n,
                    inputs=tuple([get(x, x) for x in n.inputs]),
                    output=get(n.output, n.output),
                    attrs=attrs,
                    after=tuple([get(x, x) for x in n.after]) if n.after else (),
                )
            )
        ir._temps += t.made_temps
        ir._consts += t.made_consts
        c.steps += t.steps
        last = self.last
        for name, bound in t.exit.items():
            value = last[name] = tensors[names[bound.value.name]]  # type: ignore[union-attr]
            t.owners[name].names[name] = Bound(value, "binding", bound.span)
        return True

    def _mapping(self, t: _Template, prefix: str) -> dict[str, str] | None:
        """Template name -> this iteration's name (None: a name is taken, or a carried name
        holds another tensor than the last iteration left in it)."""
        ir = self.checker.ir
        tensors = ir.tensors
        temps, consts = ir._temps - t.temps, ir._consts - t.consts
        names: dict[str, str] = {}
        for old, how, rest in t.renames:
            if how == _PREFIXED:
                new = prefix + rest  # type: ignore[operator]
            elif how == _CONST:
                new = f"%c{rest + consts}"  # type: ignore[operator]
            else:
                new = f"%{rest + temps}"  # type: ignore[operator]
            if new in tensors:
                return None
            names[old] = new
        last = self.last
        for name, before in t.entry.items():
            bound = t.owners[name].names.get(name)
            value = bound.value if bound is not None else None
            if value is not last[name]:  # kind and type were checked when recording
                return None
            names[before] = value.name  # type: ignore[union-attr]
        return names


#: How a name the template made is renamed: its prefix swapped, or a counter shifted.
_PREFIXED, _CONST, _TEMP = range(3)


def _how_renamed(
    name: str, prefix: str, temps: tuple[int, int], consts: tuple[int, int]
) -> tuple[str, int, str | int] | None:
    """``name`` and how to rename it — its prefix swapped, or a counter shifted — given the
    temporary and constant counters' ranges the iteration took; None when it cannot be mapped
    (outside the prefix and the counters, or made unique with ``#k``)."""
    if name.startswith(prefix):
        return None if "#" in name else (name, _PREFIXED, name[len(prefix) :])
    how, text, (lo, hi) = (
        (_CONST, name[2:], consts) if name.startswith("%c") else (_TEMP, name[1:], temps)
    )
    if not name.startswith("%") or not text.isdigit() or not lo <= int(text) < hi:
        return None
    return name, how, int(text)


def _copy(record: R, **changes: Any) -> R:
    """``record`` (a frozen dataclass without slots) with ``changes``, made without its
    ``__init__``: five times as fast as ``dataclasses.replace``, run for every replayed
    tensor and node."""
    made = object.__new__(type(record))
    fields = made.__dict__
    fields.update(record.__dict__)
    fields.update(changes)
    return made


def _rebound(
    scopes: list[tuple[Scope, dict[str, Bound]]],
) -> dict[str, tuple[Scope, Bound | None]] | None:
    """The enclosing names an iteration rebound — each with its scope and the binding it held
    before — given each scope's bindings before the iteration; None when it added a name to
    an enclosing scope or rebound one name in two of them."""
    rebound: dict[str, tuple[Scope, Bound | None]] = {}
    for scope, before in scopes:
        names = scope.names
        if len(names) != len(before):
            return None
        for name, bound in names.items():
            was = before.get(name)
            if was is not bound:
                if was is None or name in rebound:
                    return None
                rebound[name] = (scope, was)
    return rebound


def _owners(rebound: dict[str, tuple[Scope, Bound | None]] | None) -> dict[str, int]:
    return {name: id(scope) for name, (scope, _) in (rebound or {}).items()}


def _same_but_name(a: Tensor, b: Tensor) -> bool:
    """Whether two tensors differ at most in their IR name."""
    return dataclasses.replace(a, name=b.name) == b
