"""Tiling and auto-pipelining: a chain of ops that starts on the Cube is split along an
independent axis into K tiles, emitted skewed so that tile i + 1's Cube work overlaps tile i's
Vector work on a stream per unit.

A *chain* is a run of movable ops, each reading the one before it as that value's only reader
(scores → softmax → ·V → transpose → reshape → ·Wo is one). For every prefix of a chain, every
axis of the prefix's result that :mod:`.split_axes` can carry back through every op, and every
K dividing that axis (up to :data:`MAX_TILES`), the pass predicts the region's makespan with the
cost model — each tile's tasks on their units in the skewed order, a stream per unit, then the
concatenation and the rest of the chain — and keeps the fastest, if it beats the untiled chain
by :data:`MIN_GAIN`. The tiles' working set (the intermediates of the tiles in flight) must
fit in the device's memory beside what the program keeps resident.

Tiles read their operands through ``slice`` views (no copies) and the tiles' results are joined
by one ``concat`` under the chain's result name, so every pinned name survives.

Preserves: each output element's arithmetic — the same operands and the same summation over
the same inner dimension — except that BLAS may block a shorter matmul's inner products
differently (a reordering of one dot product's sum, held by the tests to γₙ·Σ|a||b|).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rtgraph.compiler.optimizer.rewrite import movable, pinned, rebuilt, uses
from rtgraph.compiler.optimizer.split_axes import Split, needs_row_blocks, operand_axes
from rtgraph.compiler.options import CompileOptions
from rtgraph.device.spec import DeviceSpec
from rtgraph.dtypes import DTYPES, TensorType, contiguous_strides
from rtgraph.ir.graph import Node, OpNode, Program, Tensor
from rtgraph.ops import lookup
from rtgraph.ops.cube import ROW_BLOCK
from rtgraph.ops.layout import view_layout
from rtgraph.timing.costmodel import block_dim_for, estimate_us

#: The most tiles one chain is cut into.
MAX_TILES = 16
#: A tiling is kept only when its predicted makespan is at most this share of the untiled one.
MIN_GAIN = 0.98


@dataclass(frozen=True)
class Candidate:
    """One way to tile a chain: its first ``length`` ops along result ``axis`` in ``tiles``."""

    length: int
    axis: int
    tiles: int
    predicted_us: float
    working_bytes: int


@dataclass(frozen=True)
class RegionPlan:
    """A chain, the candidates tried (the untiled one first) and the one chosen."""

    chain: tuple[OpNode, ...]
    candidates: tuple[Candidate, ...]
    chosen: Candidate


# --- finding chains ------------------------------------------------------------------------


def _on_cube(node: OpNode) -> bool:
    op = lookup(node.op)
    return op is not None and op.unit_for(node.attrs) == "cube"


def chains(program: Program) -> list[tuple[OpNode, ...]]:
    """The maximal chains that start with a Cube op and hold a Vector op, in program order."""
    keep, count = pinned(program), uses(program)
    reader: dict[str, OpNode] = {}
    for node in program.nodes:
        if isinstance(node, OpNode):
            for name in node.inputs:
                reader[name] = node
    taken: set[str] = set()
    found = []
    for node in program.nodes:
        if not movable(node) or node.output in taken or not _on_cube(node):
            continue
        assert isinstance(node, OpNode)
        chain = [node]
        while chain[-1].output not in keep and count.get(chain[-1].output) == 1:
            nxt = reader.get(chain[-1].output)
            if nxt is None or not movable(nxt) or nxt.output in taken:
                break
            chain.append(nxt)
        if len(chain) >= 2 and any(_vector_compute(n) for n in chain):
            found.append(tuple(chain))
            taken.update(n.output for n in chain)
    return found


def _vector_compute(node: OpNode) -> bool:
    """Whether ``node`` computes on the Vector unit (a layout copy does not count)."""
    op = lookup(node.op)
    return op is not None and op.unit != "layout" and op.unit_for(node.attrs) == "vector"


# --- carrying an axis back through a chain -------------------------------------------------


@dataclass(frozen=True)
class _Split:
    """Per op of a prefix: the result axis it is tiled along and how its operands split."""

    axes: tuple[int, ...]
    operands: tuple[Split, ...]
    extent: int
    row_blocks: bool  # some matmul is cut along its rows: tiles must be whole row blocks


def _carry(chain: tuple[OpNode, ...], axis: int, program: Program) -> _Split | None:
    types = program.tensors
    n = len(chain)
    axes: list[int] = [0] * n
    operands: list[Split] = [()] * n
    axes[-1] = axis
    extent = types[chain[-1].output].type.shape[axis]
    for j in range(n - 1, -1, -1):
        node = chain[j]
        out = types[node.output].type
        split = operand_axes(node, axes[j], [types[i].type for i in node.inputs], out)
        if split is None or out.shape[axes[j]] != extent:
            return None
        for name, s in zip(node.inputs, split, strict=True):
            if s is not None and types[name].type.shape[s] != extent:
                return None
        if j > 0:
            own = {
                s for name, s in zip(node.inputs, split, strict=True) if name == chain[j - 1].output
            }
            if len(own) != 1 or None in own:
                return None
            axes[j - 1] = own.pop()  # type: ignore[assignment]
        operands[j] = split
    rows = any(
        needs_row_blocks(n, a, types[n.output].type) for n, a in zip(chain, axes, strict=True)
    )
    return _Split(tuple(axes), tuple(operands), extent, rows)


# --- predicting a region's makespan --------------------------------------------------------


def op_duration(
    node: OpNode, types: list[TensorType], out: TensorType, spec: DeviceSpec
) -> tuple[str, float]:
    op = lookup(node.op)
    assert op is not None
    cost = op.cost(types, out, node.attrs)
    unit = op.unit_for(node.attrs)
    moved = cost.bytes_read + cost.bytes_written
    cores = block_dim_for(unit, cost.flops, moved, spec, None)
    return unit, estimate_us(unit, out.dtype, cost.flops, moved, cores, spec)


class _Timeline:
    """Tasks on a stream per unit, each after its operands' producers (a by-unit run)."""

    def __init__(self, spec: DeviceSpec) -> None:
        self.spec = spec
        self.free: dict[str, float] = {}
        self.done: dict[str, float] = {}
        self.layout: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}

    def run(self, node: OpNode, types: list[TensorType], out: TensorType) -> None:
        ready = max((self.done.get(i, 0.0) for i in node.inputs), default=0.0)
        if node.op in ("transpose", "reshape", "slice"):
            shape, strides = self.layout.get(node.inputs[0], (types[0].shape, _dense(types[0])))
            made = view_layout(
                shape, strides, DTYPES[out.dtype].itemsize, node.op, node.attrs, out.shape
            )
            if made is not None:  # a view: no task
                self.layout[node.output] = (made[0], made[1])
                self.done[node.output] = ready
                return
        unit, took = op_duration(node, types, out, self.spec)
        start = max(ready, self.free.get(unit, 0.0))
        self.free[unit] = self.done[node.output] = start + took

    @property
    def makespan(self) -> float:
        return max(self.done.values(), default=0.0)


def _dense(t: TensorType) -> tuple[int, ...]:
    return contiguous_strides(t.shape, DTYPES[t.dtype].itemsize)


# --- the rewrite ---------------------------------------------------------------------------


def _tiled_type(t: TensorType, axis: int, size: int) -> TensorType:
    shape = list(t.shape)
    shape[axis] = size
    return TensorType(tuple(shape), t.dtype)


def _retiled_attrs(node: OpNode, types: list[TensorType], out: TensorType) -> dict:
    """``node``'s attributes for a tile: shapes written in them follow the tile's."""
    attrs = dict(node.attrs)
    if node.op == "reshape":
        attrs["shape"] = out.shape
    elif node.op == "fused":
        values, body = list(types), []
        for name, args, step_attrs, _, _ in attrs["body"]:
            op = lookup(name)
            assert op is not None
            made = op.infer([values[a] for a in args], dict(step_attrs))
            values.append(made)
            body.append((name, args, step_attrs, made.dtype, made.shape))
        attrs["body"] = tuple(body)
    return attrs


def _tiles(
    program: Program, chain: tuple[OpNode, ...], split: _Split, tiles: int
) -> tuple[list[OpNode], dict[str, Tensor]]:
    """The skewed tile ops of ``chain`` (and the slices they read), then the concat."""
    types = program.tensors
    size = split.extent // tiles
    nodes: list[OpNode] = []
    made: dict[str, Tensor] = {}
    slices: dict[tuple[str, int, int], str] = {}

    def sliced(name: str, axis: int, t: int) -> str:
        key = (name, axis, t)
        if key not in slices:
            out = f"{name}#{axis}:{t}"
            slices[key] = out
            made[out] = Tensor(out, _tiled_type(types[name].type, axis, size), "value", display=out)
            attrs = {"start": t * size, "stop": (t + 1) * size, "axis": axis}
            nodes.append(OpNode("slice", (name,), out, attrs, span=types[name].span))
        return slices[key]

    def tile_name(name: str, t: int) -> str:
        return f"{name}#{t}"

    n = len(chain)
    for step in range(tiles + n - 1):
        for j in range(n):
            t = step - j
            if not 0 <= t < tiles:
                continue
            node = chain[j]
            inputs = []
            for name, s in zip(node.inputs, split.operands[j], strict=True):
                if j > 0 and name == chain[j - 1].output:
                    inputs.append(tile_name(name, t))
                elif s is None:
                    inputs.append(name)
                else:
                    inputs.append(sliced(name, s, t))
            in_types = [made[i].type if i in made else types[i].type for i in inputs]
            original = types[node.output]
            out_type = _tiled_type(original.type, split.axes[j], size)
            name = tile_name(node.output, t)
            made[name] = Tensor(name, out_type, "value", original.span, f"{original.label}[{t}]")
            attrs = _retiled_attrs(node, in_types, out_type)
            nodes.append(replace(node, inputs=tuple(inputs), output=name, attrs=attrs))
    last = chain[-1]
    parts = tuple(tile_name(last.output, t) for t in range(tiles))
    nodes.append(OpNode("concat", parts, last.output, {"axis": split.axes[-1]}, span=last.span))
    return nodes, made


def _predict(
    program: Program,
    chain: tuple[OpNode, ...],
    length: int,
    split: _Split | None,
    tiles: int,
    spec: DeviceSpec,
) -> float:
    timeline = _Timeline(spec)
    tensors = dict(program.tensors)
    head = chain[:length]
    if split is not None and tiles > 1:
        nodes, made = _tiles(program, head, split, tiles)
        tensors.update(made)
    else:
        nodes = list(head)
    for node in [*nodes, *chain[length:]]:
        timeline.run(node, [tensors[i].type for i in node.inputs], tensors[node.output].type)
    return timeline.makespan


def plan_region(program: Program, chain: tuple[OpNode, ...], options: CompileOptions) -> RegionPlan:
    """Every candidate tiling of ``chain`` with its predicted makespan, and the one to use."""
    spec = options.target
    untiled = Candidate(len(chain), 0, 1, _predict(program, chain, len(chain), None, 1, spec), 0)
    candidates = [untiled]
    resident = sum(t.type.nbytes for t in program.tensors.values() if t.kind in ("param", "input"))
    room = spec.memory.capacity - resident
    for length in range(2, len(chain) + 1):
        out = program.tensors[chain[length - 1].output].type
        for axis in range(out.rank):
            split = _carry(chain[:length], axis, program)
            if split is None:
                continue
            for tiles in range(2, min(MAX_TILES, split.extent) + 1):
                if split.extent % tiles or (
                    split.row_blocks and (split.extent // tiles) % ROW_BLOCK
                ):
                    continue
                inner = sum(program.tensors[n.output].type.nbytes for n in chain[:length])
                working = inner // tiles * min(tiles, length)
                if working > room:
                    continue
                took = _predict(program, chain, length, split, tiles, spec)
                candidates.append(Candidate(length, axis, tiles, took, working))
    best = min(candidates, key=lambda c: (c.predicted_us, c.tiles))
    if best.predicted_us > MIN_GAIN * untiled.predicted_us:
        best = untiled
    return RegionPlan(chain, tuple(candidates), best)


def plan_tiling(program: Program, options: CompileOptions) -> list[RegionPlan]:
    """The plan of every chain of ``program`` (what ``rtgraph explain`` prints)."""
    return [plan_region(program, chain, options) for chain in chains(program)]


def tile_and_pipeline(program: Program, options: CompileOptions) -> Program:
    """``program`` with every chain the cost model says gains from it tiled and skewed."""
    if program.has_explicit_streams:
        return program
    replaced: dict[str, list[OpNode]] = {}  # the last tiled op's output -> the region's nodes
    gone: set[str] = set()
    tensors: dict[str, Tensor] = {}
    for plan in plan_tiling(program, options):
        c = plan.chosen
        if c.tiles == 1:
            continue
        head = plan.chain[: c.length]
        split = _carry(head, c.axis, program)
        assert split is not None
        nodes, made = _tiles(program, head, split, c.tiles)
        replaced[head[-1].output] = nodes
        gone.update(n.output for n in head[:-1])
        tensors.update(made)
    if not replaced:
        return program
    out: list[Node] = []
    for node in program.nodes:
        if isinstance(node, OpNode) and node.output in replaced:
            out.extend(replaced[node.output])
        elif not (isinstance(node, OpNode) and node.output in gone):
            out.append(node)
    result = rebuilt(program, out, gone)
    return replace(result, tensors={**result.tensors, **tensors})
