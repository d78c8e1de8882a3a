"""``graph step { … }`` and ``replay step N``: a piece of work written once and replayed.

As a CUDA graph (``torch.npu.NPUGraph``, CANN's ``aclmdlRICaptureBegin`` /
``aclmdlRIExecuteAsync``) is captured once and launched many times, a ``graph`` block defines
work without running it, and each ``replay`` runs its body again — every replay one host
submission in the compiled program (``host.graph_launch_us``), where the same work written out
eagerly costs an ioctl per command.

**Data flow.** A replay reads and writes the same names each time, with static shapes. The
body runs, at each replay, in a fresh scope inside the one the ``replay`` stands in, exactly as
an iteration of a ``for`` body: names first bound in it belong to that replay; rebinding a name
bound (by ``=``) *before* it is the graph's state — the replay overwrites it, and the next
replay (and the program after the last) reads the new value. So a decode loop keeps its token
in a binding the step overwrites (``tok = x`` before the graph, ``tok = next`` at the end of the
body), as a CUDA decode loop copies the next token into its static input.

**What a graph may not hold**, as capture forbids it (each reported once, where written):
a host sync (``sync``), a host copy (``to_device``, ``to_host``, an ``output``), a host
``callback``, a declaration (``input``, ``param``, ``buffer``, ``stream``, ``event``: memory
is allocated by the program, never by a replay — the graph's tensors are planned with the rest
of the static program), explicit stream control (``on``, ``record``, ``wait``, ``barrier``:
the compiler places a graph's work), and a graph or a replay (graphs do not nest). ``graph``
and ``replay`` stand at the top level of the program, or (``replay``) in a ``for`` body.

The checker records, for each replay, the IR tensors its ops made; the program carries the
list as ``Program.graph_replays`` (``(graph, index, tensor names, span)``), which
:mod:`rtgraph.compiler.replays` turns into the stream program's ``meta["graph_launches"]``.
"""

from __future__ import annotations

from dataclasses import dataclass

from rtgraph.errors import Span, did_you_mean
from rtgraph.frontend import ast
from rtgraph.frontend.functions import Cost, block_cost, calls, statements
from rtgraph.frontend.fusion import FusionChecker
from rtgraph.frontend.values import POISON, Scope, describe
from rtgraph.ir.graph import OpNode

#: Most replays one ``replay`` statement may ask for (each replay is unrolled into the
#: program: the operation and statement limits bound the total too).
MAX_REPLAYS = 65_536

#: Statements a graph body may not hold, and why (said in the message).
_FORBIDDEN: dict[type, tuple[str, str, str]] = {
    ast.Sync: (
        "sync",
        "the host cannot wait for work inside a graph",
        "sync after the replay: `replay step N` then `sync`",
    ),
    ast.Output: (
        "output",
        "an output is a copy to the host, which a graph cannot hold",
        "rebind a name bound before the graph and write `output y = name` after the replay",
    ),
    ast.Callback: (
        "callback",
        "a graph holds no host callbacks",
        "put the callback after the replay",
    ),
    ast.OnBlock: (
        "on",
        "the compiler places a graph's work; explicit streams are not captured",
        "write the graph's work without `on` blocks",
    ),
    ast.Record: ("record", "a graph holds no explicit events", "drop it from the graph"),
    ast.Wait: ("wait", "a graph holds no explicit events", "drop it from the graph"),
    ast.Barrier: ("barrier", "a graph holds no explicit barriers", "drop it from the graph"),
    ast.GraphDef: ("graph", "graphs do not nest", "define every graph at the top level"),
    ast.Replay: ("replay", "graphs do not nest", "replay graphs at the top level"),
}
_DECLARATIONS = {
    ast.InputDecl: "input",
    ast.ParamDecl: "param",
    ast.BufferDecl: "buffer",
    ast.StreamDecl: "stream",
    ast.EventDecl: "event",
}
_HOST_COPIES = ("to_device", "to_host")


@dataclass
class GraphInfo:
    """A defined graph: its definition, whether its body may run, how often it was replayed."""

    definition: ast.GraphDef
    ok: bool
    replayed: bool = False  # some replay names it
    runs: int = 0  # replays unrolled so far (the next one's index)


class GraphChecker(FusionChecker):
    """``graph`` definitions and ``replay`` statements (see the module docs).

    It runs a graph's body with the statement machinery of
    :class:`~rtgraph.frontend.checker.Checker` (``run_block``, ``tick``, ``check_nodes``,
    ``callee_cost``, ``known_int``), which subclasses it."""

    functions: dict[str, ast.FnDef]
    active_fns: list[str]
    stream: str | None
    device: int | None
    program_scope: Scope
    steps: int
    max_steps: int

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.graphs: dict[str, GraphInfo] = {}
        self.graph_replays: list[tuple[str, int, frozenset[str], Span]] = []
        self.in_graph: str | None = None  # the graph whose body is running

    def s_graph(self, st: ast.GraphDef) -> None:
        name = st.name.name
        if not self.graph_at_top(st, "graph definitions"):
            return
        first = self.graphs.get(name)
        if first is not None:
            self.error(
                f"graph '{name}' is defined twice",
                st.name.span,
                hint=f"the first definition is at line {first.definition.span.line}",
            )
            return
        if name in self.functions:
            self.error(
                f"graph '{name}' has the name of a function",
                st.name.span,
                hint=f"function '{name}' is at line {self.functions[name].span.line}; "
                "choose another name",
            )
            return
        self.graphs[name] = GraphInfo(st, self.check_capturable(st))

    def check_capturable(self, st: ast.GraphDef) -> bool:
        """Report every statement and host copy of the body that a graph may not hold."""
        name = st.name.name
        ok = True
        for stmt in statements(st.body):
            kind = type(stmt)
            if kind in _DECLARATIONS:
                ok = False
                self.error(
                    f"'{_DECLARATIONS[kind]}' inside graph '{name}': a replay allocates nothing",
                    stmt.span,
                    hint="declare it at the top level of the program, before the graph",
                )
            elif kind in _FORBIDDEN:
                ok = False
                word, why, hint = _FORBIDDEN[kind]
                self.error(f"{word} inside graph '{name}': {why}", stmt.span, hint=hint)
        for call in calls(st.body):
            if call.func.name in _HOST_COPIES and self.scope.lookup(call.func.name) is None:
                ok = False
                self.error(
                    f"{call.func.name} inside graph '{name}': a graph holds no host copies",
                    call.func.span,
                    hint="inputs are copied to the device before the first replay and outputs "
                    "back after the last: read and rebind names, copy outside the graph",
                )
        return ok

    def graph_at_top(self, st: ast.GraphDef | ast.Replay, what: str) -> bool:
        """Whether ``st`` stands where graphs may: not in a function, an ``on`` or ``device``
        block (nor, for a definition, a ``for`` body)."""
        if self.in_graph is not None:
            return False  # reported with the graph's definition
        inside = (
            "a function"
            if self.active_fns
            else "an on block"
            if self.stream is not None
            else "a device block"
            if self.device is not None
            else "a for body"
            if isinstance(st, ast.GraphDef) and self.scope is not self.program_scope
            else None
        )
        if inside is not None:
            self.error(
                f"{what} belong at the top level of the program, not in {inside}",
                st.span,
                hint="define a graph at the top level; replay it there or in a for body",
            )
            return False
        return True

    def s_replay(self, st: ast.Replay) -> None:
        if not self.graph_at_top(st, "replays"):
            return
        name = st.graph.name
        info = self.graphs.get(name)
        count = self.compile_time_int(st.count, "a replay count")
        eager = self.replay_eager(st)
        if info is None:
            hint = did_you_mean(name, list(self.graphs)) or (
                "define it before the replay: graph name { ... }"
                if self.graphs
                else "this program defines no graph; define one: graph name { ... }"
            )
            self.error(f"unknown graph '{name}'", st.graph.span, hint=hint)
            return
        info.replayed = True
        if count is None:
            return
        if not 1 <= count <= MAX_REPLAYS:
            self.error(
                f"replay count {count:,} is not between 1 and {MAX_REPLAYS:,}",
                st.count.span,
                hint="a replay runs the graph at least once; longer loops: replay inside a for",
            )
            return
        if not info.ok:
            return
        body = info.definition.body
        least = (Cost(1) + block_cost(body, self.callee_cost, self.known_int)).times(count)
        if self.steps + least.steps > self.max_steps:
            self.tick(st.span, self.max_steps)
        self.check_nodes(least.nodes, st.span, "every replay is unrolled into the program")
        outer = self.scope
        try:
            for _ in range(count):
                self.tick(st.span)
                index = info.runs
                info.runs += 1
                self.scope = Scope(outer, f"{outer.prefix}{name}#{index}/", loop=True)
                mark = len(self.ir.nodes)
                self.in_graph = name
                self.run_block(body)
                made = frozenset(n.output for n in self.ir.nodes[mark:] if isinstance(n, OpNode))
                if eager is False:  # (None: a bad option, reported; the body is still checked)
                    self.graph_replays.append((name, index, made, st.span))
        finally:
            self.scope, self.in_graph = outer, None

    def replay_eager(self, st: ast.Replay) -> bool | None:
        """The ``eager = E`` option: run the replays as ordinary work (no graph launch)."""
        eager = False
        for k, kw in enumerate(st.options):
            if kw.name.name == "eager" and any(o.name.name == "eager" for o in st.options[:k]):
                self.error("replay option 'eager' given twice", kw.name.span)
                return None
            if kw.name.name != "eager":
                hint = did_you_mean(kw.name.name, ["eager"]) or "a replay takes `eager = 0|1`"
                self.error(f"unknown replay option '{kw.name.name}'", kw.name.span, hint=hint)
                return None
            value = self.eval(kw.value)
            if value is POISON:
                return None
            if value not in (0, 1) or isinstance(value, float):
                self.error(
                    f"replay option 'eager' must be 0 or 1, got {describe(value)}",
                    kw.value.span,
                )
                return None
            eager = bool(value)
        return eager

    def check_replayed(self) -> None:
        """A graph that no replay names is reported (its body would never be checked) — in a
        program without other errors (a misspelt or misplaced replay is reported already)."""
        if len(self.diagnostics):
            return
        for name, info in self.graphs.items():
            if not info.replayed:
                self.error(
                    f"graph '{name}' is never replayed",
                    info.definition.name.span,
                    hint=f"run it with `replay {name} N`, or remove it",
                )
