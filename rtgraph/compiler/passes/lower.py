"""Lowering: the checked IR becomes a task graph.

One task per op that does work, plus an ``h2d`` copy per host input (where it is declared) and a
``d2h`` copy per output (right after its producer). Layout ops (``reshape``, ``transpose``,
``broadcast_to``) become *views* — no task — whenever NumPy's stride rules can express the result
as a strided window on the same bytes, and a Vector copy task otherwise (e.g. reshaping a
transposed tensor). Views are computed with NumPy itself on a zero-byte stand-in array, so the
compiler, the interpreter and the emulator agree on what is a view by construction.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields, replace
from typing import TYPE_CHECKING

from rtgraph.compiler.optimizer.rewrite import concats_in_place, output_parts
from rtgraph.compiler.taskgraph import Dag, DagTask, HostStep, Storage, TaskGraph, View, build
from rtgraph.device.spec import DeviceSpec
from rtgraph.dtypes import DTYPES, contiguous_strides
from rtgraph.errors import Span
from rtgraph.ir.graph import (
    BarrierNode,
    CallbackNode,
    HostCopyNode,
    OpNode,
    Program,
    RecordNode,
    SyncNode,
    Tensor,
    WaitNode,
)
from rtgraph.ops import extents, lookup
from rtgraph.ops.layout import VIEW_OPS, view_layout
from rtgraph.timing.costmodel import arithmetic_dtype, block_dim_for

if TYPE_CHECKING:  # for annotations only: the options module imports the passes' vocabularies
    from rtgraph.compiler.options import CompileOptions

LAYOUT_OPS = VIEW_OPS


def lower(program: Program, options: CompileOptions) -> TaskGraph:
    """The task graph of ``program`` on the options' device (tasks in program order, no memory
    or streams yet)."""
    device = options.target
    b = _Builder(program, device)
    b.parts = output_parts(program)
    b.placed = {
        (n.direction, b.parts[n.tensor][0] if n.tensor in b.parts else n.tensor)
        for n in program.nodes
        if isinstance(n, HostCopyNode)
    }
    b.in_place = concats_in_place(program)
    for t in program.tensors.values():
        b.declare(t)
    for node in program.nodes:
        if isinstance(node, OpNode):
            b.op(node)
        elif isinstance(node, RecordNode):
            b.step(HostStep("record", stream=node.stream, event=node.event, span=node.span))
        elif isinstance(node, WaitNode):
            b.step(HostStep("wait", stream=node.stream, event=node.event, span=node.span))
        elif isinstance(node, BarrierNode):
            b.step(HostStep("barrier", stream=node.stream, span=node.span))
        elif isinstance(node, SyncNode):
            b.step(HostStep("sync", target=node.target, sync_kind=node.kind, span=node.span))
        elif isinstance(node, HostCopyNode):
            b.host_copy(node)
        elif isinstance(node, CallbackNode):
            producer = b.producer_of(node.after)
            b.step(
                HostStep(
                    "callback",
                    name=node.name,
                    task=producer,
                    blocking=node.blocking,
                    span=node.span,
                )
            )
    b.finish_outputs()
    b.renumber()
    return TaskGraph(
        program=program,
        device=device,
        tasks=tuple(b.tasks),
        storages=b.storages,
        views=b.views,
        script=tuple(b.script),
        dag=b.dag,
    )


def layout_view(view: View, op: str, attrs: dict, out_shape: tuple[int, ...]) -> View | None:
    """The view that ``op`` makes of ``view``, or None when the layout needs a copy."""
    itemsize = DTYPES[view.dtype].itemsize
    made = view_layout(view.shape, view.strides, itemsize, op, attrs, out_shape)
    if made is None:
        return None
    shape, strides, offset = made
    return View("", view.base, view.offset + offset, shape, strides, view.dtype)


@dataclass
class _Builder:
    program: Program
    device: DeviceSpec
    tasks: list[DagTask] = field(default_factory=list)
    storages: dict[str, Storage] = field(default_factory=dict)
    views: dict[str, View] = field(default_factory=dict)
    script: list[int | HostStep] = field(default_factory=list)
    dag: Dag = field(default_factory=Dag)
    # per storage, the tasks whose writes are still visible: (lo, hi, task), byte windows
    writers: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)
    parts: dict[str, tuple[str, int, int]] = field(default_factory=dict)  # see output_parts
    placed: set[tuple[str, str]] = field(default_factory=set)  # copies the program placed
    in_place: dict[str, tuple[str, int]] = field(default_factory=dict)  # see concats_in_place

    # --- storages and views --------------------------------------------------------------
    def storage(self, t: Tensor, kind: str) -> None:
        shape = t.type.shape
        self.storages[t.name] = Storage(
            t.name,
            t.type.nbytes,
            kind,  # type: ignore[arg-type]
            shape,
            t.type.dtype,
            address=t.address,
            direct=t.alloc == "direct",
        )
        itemsize = DTYPES[t.type.dtype].itemsize
        self.views[t.name] = View(
            t.name, t.name, 0, shape, contiguous_strides(shape, itemsize), t.type.dtype
        )

    def declare(self, t: Tensor) -> None:
        if t.kind in ("param", "const", "buffer"):
            self.storage(t, t.kind)
        elif t.kind == "input":
            self.storage(t, "input")
            if ("h2d", t.name) not in self.placed:
                self.add(self.h2d_task(t, None, t.span))

    def h2d_task(
        self,
        t: Tensor,
        stream: str | None,
        span: Span | None,
        rows: tuple[int, int] | None = None,
    ) -> DagTask:
        """The copy of host input ``t`` (of its ``rows``, when given) to the device, on
        ``stream`` if the program placed it."""
        name, window, nbytes, label, attrs = t.name, None, t.type.nbytes, t.label, {}
        if rows is not None:
            name, window = self.rows_view(t.name, rows)
            nbytes = window[1] - window[0]
            label = f"{t.label}[{rows[0]}:{rows[1]}]"
            attrs = {"rows": rows}
        return build(
            DagTask,
            dict(
                id=len(self.tasks),
                name=label,
                op="h2d",
                unit="dma",
                inputs=(),
                output=name,
                reads=(),
                writes=(t.name,),
                window=window,
                bytes_read=nbytes,
                bytes_written=nbytes,
                dtype=t.type.dtype,
                host=t.name,
                span=span,
                attrs={"pinned": t.pinned, **attrs},
                stream=stream,
            ),
        )

    def d2h_task(self, name: str, stream: str | None, span: Span | None) -> DagTask:
        """The copy of output ``name`` back to the host (on ``stream`` if the program placed
        it) — or, for a part of an output (see :func:`output_parts`), of its rows."""
        t = self.program.tensors[name]
        host, label, attrs = name, t.label, {}
        if name in self.parts:
            host, lo, hi = self.parts[name]
            label = f"{self.program.tensors[host].label}[{lo}:{hi}]"
            attrs = {"rows": (lo, hi)}
        return build(
            DagTask,
            dict(
                id=len(self.tasks),
                name=label,
                op="d2h",
                unit="dma",
                inputs=(name,),
                output=None,
                reads=(self.base_of(name),),
                read_windows=(self.window_of(name),),
                writes=(),
                bytes_read=t.type.nbytes,
                bytes_written=t.type.nbytes,
                dtype=t.type.dtype,
                host=host,
                span=span,
                attrs=attrs,
                stream=stream,
            ),
        )

    def rows_view(self, name: str, rows: tuple[int, int]) -> tuple[str, tuple[int, int]]:
        """A view of rows ``rows`` of storage ``name`` (registered under a name of its own)
        and its byte window."""
        whole = self.views[name]
        step = whole.strides[0]
        lo, hi = rows[0] * step, rows[1] * step
        part = f"{name}[{rows[0]}:{rows[1]}]"
        shape = (rows[1] - rows[0], *whole.shape[1:])
        self.views[part] = View(
            part, whole.base, whole.offset + lo, shape, whole.strides, whole.dtype
        )
        return part, (whole.offset + lo, whole.offset + hi)

    def host_copy(self, node: HostCopyNode) -> None:
        """A copy the program (or the optimizer) placed: its task here, in program order, on
        the node's stream ("" lets the stream policy choose)."""
        stream = node.stream or None
        if node.direction == "h2d":
            t = self.program.tensors[node.tensor]
            self.add(self.h2d_task(t, stream, node.span, node.rows))
        else:
            self.add(self.d2h_task(node.tensor, stream, node.span))

    def base_of(self, name: str) -> str:
        return self.views[name].base

    def window_of(self, name: str) -> tuple[int, int] | None:
        """The bytes of its storage that tensor ``name`` can touch (None: all of them)."""
        view = self.views[name]
        lo, hi = view.extent()
        return None if (lo, hi) == (0, self.storages[view.base].nbytes) else (lo, hi)

    def producers_of(self, name: str) -> list[int]:
        """The tasks whose writes tensor ``name`` reads (those overlapping its bytes)."""
        if name not in self.views:
            return [k for _, _, k in self.writers.get(name, ())]
        view = self.views[name]
        lo, hi = view.extent()
        return [k for a, b, k in self.writers.get(view.base, ()) if a < hi and lo < b]

    def producer_of(self, name: str) -> int | None:
        """The last task writing what ``name`` reads, if any."""
        return max(self.producers_of(name), default=None)

    def wrote(self, task: DagTask) -> None:
        """Note ``task``'s writes: what it overwrites is no longer another task's."""
        for base in task.writes:
            size = self.storages[base].nbytes if base in self.storages else 0
            lo, hi = task.window if task.window is not None else (0, size)
            kept = [w for w in self.writers.get(base, ()) if w[0] < lo or w[1] > hi]
            self.writers[base] = [*kept, (lo, hi, task.id)]

    # --- tasks -----------------------------------------------------------------------------
    def add(self, task: DagTask, after: tuple[str, ...] = ()) -> int:
        self.tasks.append(task)
        self.script.append(task.id)
        self.dag.add_node()
        for name in task.inputs:
            for src in self.producers_of(name):
                self.dag.add_edge(src, task.id, "data")
        for name in after:
            for src in self.producers_of(name):
                self.dag.add_edge(src, task.id, "after")
        self.wrote(task)
        return task.id

    def step(self, step: HostStep) -> None:
        self.script.append(step)

    def op(self, node: OpNode) -> None:
        t_out = self.program.tensors[node.output]
        if node.op == "kernel":
            self.kernel(node, t_out)
            return
        if node.op == "send":
            self.send(node, t_out)
            return
        opdef = lookup(node.op)
        assert opdef is not None, node.op
        if node.op in LAYOUT_OPS and not extents.moves(node.attrs):
            view = layout_view(
                self.views[node.inputs[0]], node.op, dict(node.attrs), t_out.type.shape
            )
            if view is not None:
                self.views[node.output] = View(
                    node.output, view.base, view.offset, view.shape, view.strides, view.dtype
                )
                return
        if node.op == "concat" and node.inputs and node.inputs[0] in self.in_place:
            return  # its parts were written into its storage: nothing left to copy
        in_types = [self.program.tensors[n].type for n in node.inputs]
        cost = opdef.cost(in_types, t_out.type, node.attrs)
        unit = opdef.unit_for(node.attrs)
        requested = node.attrs.get("block_dim")
        block_dim = block_dim_for(
            unit, cost.flops, cost.bytes_read + cost.bytes_written, self.device, requested
        )
        window = self.output_storage(t_out)
        reads, read_windows = self.read_windows(node.inputs)
        self.add(
            build(
                DagTask,
                dict(
                    id=len(self.tasks),
                    name=t_out.label,
                    op=node.op,
                    unit=unit,
                    inputs=node.inputs,
                    output=node.output,
                    reads=reads,
                    read_windows=read_windows,
                    writes=(self.base_of(node.output),),
                    window=window,
                    flops=cost.flops,
                    bytes_read=cost.bytes_read,
                    bytes_written=cost.bytes_written,
                    block_dim=block_dim,
                    dtype=arithmetic_dtype(unit, [t.dtype for t in in_types], t_out.type.dtype),
                    attrs={k: v for k, v in node.attrs.items() if k != "block_dim"},
                    stream=node.stream,
                    span=node.span,
                ),
            ),
            after=node.after,
        )

    def read_windows(
        self, inputs: tuple[str, ...]
    ) -> tuple[tuple[str, ...], tuple[tuple[int, int] | None, ...]]:
        """The storages behind ``inputs`` and, for each, the hull of the bytes read of it."""
        hull: dict[str, tuple[int, int] | None] = {}
        for name in inputs:
            base, window = self.base_of(name), self.window_of(name)
            if base in hull:
                old = hull[base]
                window = (
                    None
                    if old is None or window is None
                    else (min(old[0], window[0]), max(old[1], window[1]))
                )
            hull[base] = window
        reads = tuple(hull)
        windows = tuple(hull.values())
        return reads, (() if all(w is None for w in windows) else windows)

    def output_storage(self, t: Tensor) -> tuple[int, int] | None:
        """Give ``t`` its storage: its own, or — a part of a concatenation made in place — its
        slice of the concatenation's (returned as the byte window the task writes)."""
        whole, offset = self.in_place.get(t.name, (None, 0))
        if whole is None:
            self.storage(t, "value")
            return None
        if whole not in self.storages:
            self.storage(self.program.tensors[whole], "value")
        itemsize = DTYPES[t.type.dtype].itemsize
        strides = contiguous_strides(t.type.shape, itemsize)
        self.views[t.name] = View(t.name, whole, offset, t.type.shape, strides, t.type.dtype)
        return offset, offset + t.type.nbytes

    def kernel(self, node: OpNode, t_out: Tensor) -> None:
        """A synthetic kernel: its footprint's storages, its ``after=`` edges, its token.

        The commonest task of generated programs (a million-kernel DAG is nothing else), so
        :meth:`add`'s work is done here directly: no inputs to trace, its writes only raw
        buffers, and its attributes shared with the node (no pass changes a task's attrs).
        """
        attrs = node.attrs
        views, storages = self.views, self.storages
        named = attrs.get("reads")
        reads = tuple(dict.fromkeys(views[n].base for n in named)) if named else ()
        named = attrs.get("writes")
        writes = tuple(dict.fromkeys(views[n].base for n in named)) if named else ()
        task_id = len(self.tasks)
        task = object.__new__(DagTask)
        task.__dict__.update(_KERNEL_DEFAULTS)
        task.__dict__.update(
            id=task_id,
            name=t_out.label,
            unit=str(attrs["unit"]),
            reads=reads,
            writes=writes,
            bytes_read=sum([storages[n].nbytes for n in reads]) if reads else 0,
            bytes_written=sum([storages[n].nbytes for n in writes]) if writes else 0,
            block_dim=int(attrs.get("block_dim", 1)),
            attrs={k: v for k, v in attrs.items() if k != "block_dim"}
            if "block_dim" in attrs
            else attrs,
            duration_us=float(attrs["us"]),
            stream=node.stream,
            span=node.span,
        )
        self.tasks.append(task)
        self.script.append(task_id)
        dag = self.dag
        dag.add_node()
        if node.after:
            pred, succ = dag.pred[task_id], dag.succ
            for name in node.after:
                for src in self.producers_of(name):
                    if src not in pred:
                        succ[src].append(task_id)
                    pred[src] = "after"
        if writes:
            self.wrote(task)
        self.writers[node.output] = [(0, 0, task_id)]  # its token: what `after=` waits for

    def send(self, node: OpNode, t_out: Tensor) -> None:
        """A transfer's sending half: reads its operand, writes nothing here (the bytes land
        in the peer's memory); its result is a token, like a synthetic kernel's."""
        reads, read_windows = self.read_windows(node.inputs)
        nbytes = self.program.tensors[node.inputs[0]].type.nbytes
        task = self.add(
            build(
                DagTask,
                {
                    "id": len(self.tasks),
                    "name": t_out.label,
                    "op": "send",
                    "unit": "link",
                    "inputs": node.inputs,
                    "output": None,
                    "reads": reads,
                    "read_windows": read_windows,
                    "writes": (),
                    "bytes_read": nbytes,
                    "attrs": dict(node.attrs),
                    "stream": node.stream,
                    "span": node.span,
                },
            ),
            after=node.after,
        )
        self.writers[node.output] = [(0, 0, task)]

    def finish_outputs(self) -> None:
        """A ``d2h`` copy per output, placed right after the task that produces it."""
        placed: dict[int | None, list[int]] = {}
        for name in self.program.outputs:
            if ("d2h", name) in self.placed:
                continue
            task = self.d2h_task(name, None, self.program.tensors[name].span)
            self.tasks.append(task)
            self.dag.add_node()
            src = self.producer_of(name)
            if src is not None:
                self.dag.add_edge(src, task.id, "data")
            placed.setdefault(src, []).append(task.id)
        if not placed:
            return
        script: list[int | HostStep] = list(placed.get(None, []))
        for item in self.script:
            script.append(item)
            if isinstance(item, int) and item in placed:
                script.extend(placed[item])
        self.script = script

    def renumber(self) -> None:
        """Task ids in program (script) order, so listings read top to bottom.

        Only the tasks whose id changes are copied (the ``d2h`` copies placed after their
        producers, and the tasks after them). Each task's predecessors are listed in the order
        the tasks were made, its successors in the order the edges were added.
        """
        order = [i for i in self.script if type(i) is int]
        if order == list(range(len(self.tasks))):
            self.dag = _sorted_preds(self.dag)
            return
        new = [0] * len(self.tasks)
        for k, old in enumerate(order):
            new[old] = k
        tasks: list[DagTask] = [self.tasks[0]] * len(self.tasks)
        for t in self.tasks:
            tasks[new[t.id]] = t if new[t.id] == t.id else _with_id(t, new[t.id])
        self.tasks = tasks
        old_dag, dag = self.dag, Dag(len(new))
        for old, k in enumerate(new):
            dag.pred[k] = {new[p]: old_dag.pred[old][p] for p in sorted(old_dag.pred[old])}
            dag.succ[k] = [new[s] for s in old_dag.succ[old]]
        self.dag = dag
        self.script = [
            new[i]
            if isinstance(i, int)
            else replace(i, task=new[i.task])
            if i.task is not None
            else i
            for i in self.script
        ]


def _sorted_preds(dag: Dag) -> Dag:
    """``dag`` with each task's predecessors in the order the tasks were made."""
    for k, pred in enumerate(dag.pred):
        if len(pred) > 1:
            keys = list(pred)
            ordered = sorted(keys)
            if keys != ordered:
                dag.pred[k] = {p: pred[p] for p in ordered}
    return dag


#: A synthetic kernel's fields that every kernel shares (:meth:`_Builder.kernel` sets the rest).
_KERNEL_DEFAULTS = {
    **{f.name: f.default for f in fields(DagTask) if f.default is not MISSING},
    "op": "kernel",
    "inputs": (),
    "output": None,
}


def _with_id(task: DagTask, id: int) -> DagTask:
    """``task`` numbered ``id`` (``dataclasses.replace`` without re-running the constructor)."""
    clone = object.__new__(DagTask)
    clone.__dict__.update(task.__dict__, id=id)
    return clone
