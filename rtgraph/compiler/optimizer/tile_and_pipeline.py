"""Tiling and auto-pipelining: a chain of ops that starts on the Cube is split along an
independent axis into K tiles, emitted skewed so that tile i + 1's Cube work overlaps tile i's
Vector work on a stream per unit.

A *chain* is a run of movable ops, each reading the one before it as that value's only reader
(scores → softmax → ·V → transpose → reshape → ·Wo is one), from a Cube op or from the one
Vector op that Cube op waits for (layernorm → ·W1 → GELU → ·W2 → + r). For every prefix of
a chain, every axis of the prefix's result that :mod:`.split_axes` can carry back through every
op, and every K in :data:`TILE_COUNTS` dividing that axis, the pass predicts the region's
makespan — each tile's tasks on their units in the skewed order, a stream per unit, then the
concatenation and the rest of the chain, replayed with HBM and the host link shared as a run
shares them (:mod:`rtgraph.timing.unit_replay`) — and keeps the fastest, if it beats the
untiled chain by :data:`MIN_GAIN`. The tiles' working set (the intermediates of the tiles in
flight) must fit in the device's memory beside what the program keeps resident. A chain is
planned alone; the tiled program is kept only if the whole of it is predicted to run faster
(:func:`~rtgraph.compiler.optimizer.predict.slower`): where other work already fills the
units, more and smaller tasks only add launches.

Sharing is what decides: a matmul that writes its scores and a softmax that reads them both
stream their bytes, so tile i + 1's scores next to tile i's softmax do not overlap for free —
each gets about half of HBM. Memory-bound attention at 1,024 tokens is left whole; a
compute-bound feed-forward layer over 4,096 rows is cut (models/mlp.rtg at B = 4,096,
D = 1,024, F = 4,096: 1,367.1 µs at -O1, 1,056.0 µs at -O2 on a stream per unit).

Tiles read their operands through ``slice`` views (no copies) and the tiles' results are joined
by one ``concat`` under the chain's result name, so every pinned name survives.

Preserves: each output element's arithmetic — the same operands and the same summation over
the same inner dimension — except that BLAS may block a shorter matmul's inner products
differently (a reordering of one dot product's sum, held by the tests to γₙ·Σ|a||b|).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rtgraph.compiler.optimizer.host_link import sends_in_parts
from rtgraph.compiler.optimizer.predict import op_work_of, slower
from rtgraph.compiler.optimizer.rewrite import (
    attrs_key,
    movable,
    movable_ops,
    pinned,
    readers,
    rebuilt,
    sent_in_parts,
    uses,
    view_outputs,
)
from rtgraph.compiler.optimizer.split_axes import Split, needs_row_blocks, operand_axes
from rtgraph.compiler.options import CompileOptions
from rtgraph.device.spec import DeviceSpec
from rtgraph.dtypes import TensorType
from rtgraph.ir.graph import Node, OpNode, Program, Tensor
from rtgraph.ops import lookup
from rtgraph.ops.cube import ROW_BLOCK
from rtgraph.timing.unit_replay import VIEW, Work, alone_us, copy_work, replay

#: The tile counts tried (a tile count divides the cut axis; more tiles pay more launches).
TILE_COUNTS = (2, 3, 4, 6, 8, 12, 16)
#: The most ops one chain holds: a longer run of single-reader ops is cut into chains of this
#: length, so planning costs a bounded amount per op.
MAX_CHAIN = 12
#: The most Vector ops a chain takes in before its first Cube op.
MAX_LEAD = 1
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
    """The maximal chains that hold a Vector op and whose first Cube op is preceded by at most
    :data:`MAX_LEAD` Vector ops, in program order.

    The lead-in is the Vector work a Cube op waits for (a layernorm before a projection): in
    the chain it is cut into tiles too, so the first tile's matmul starts after one tile of it,
    and a chain cut into rows upstream (a residual add's tiles) flows into this one row by row.
    A lead-in that reads a host input is left to :mod:`.stream_host_copies`, whose row tiles
    follow the parts the input crosses the link in.
    """
    if not movable_ops(program):
        return []
    keep, count, reader = pinned(program), uses(program), readers(program)
    producer = {n.output: n for n in program.nodes if isinstance(n, OpNode)}
    taken: set[str] = set()
    found = []
    for node in program.nodes:
        if not movable(node) or node.output in taken or not _on_cube(node):
            continue
        assert isinstance(node, OpNode)
        chain = [node]
        while len(chain) <= MAX_LEAD and chain[0].inputs:
            lead = producer.get(chain[0].inputs[0])
            if (
                lead is None
                or any(program.tensors[i].kind == "input" for i in lead.inputs)
                or not movable(lead)
                or lead.output in taken
                or lead.output in keep
                or count.get(lead.output) != 1
                or not _vector_compute(lead)
            ):
                break
            chain.insert(0, lead)
        while (
            len(chain) < MAX_CHAIN
            and chain[-1].output not in keep
            and count.get(chain[-1].output) == 1
        ):
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


def _carry(
    chain: tuple[OpNode, ...],
    axis: int,
    program: Program,
    memo: dict[tuple[str, int], Split | None] | None = None,
) -> _Split | None:
    """How the ops of ``chain`` split when its last result is cut along ``axis`` (None: some op
    cannot); ``memo`` keeps each op's answer per axis across the prefixes of one chain."""
    types = program.tensors
    memo = {} if memo is None else memo
    n = len(chain)
    axes: list[int] = [0] * n
    operands: list[Split] = [()] * n
    axes[-1] = axis
    extent = types[chain[-1].output].type.shape[axis]
    for j in range(n - 1, -1, -1):
        node = chain[j]
        out = types[node.output].type
        key = (node.output, axes[j])
        if key not in memo:
            memo[key] = operand_axes(node, axes[j], [types[i].type for i in node.inputs], out)
        split = memo[key]
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


# --- the rewrite ---------------------------------------------------------------------------


def tiled_type(t: TensorType, axis: int, size: int) -> TensorType:
    shape = list(t.shape)
    shape[axis] = size
    return TensorType(tuple(shape), t.dtype)


def retiled_attrs(node: OpNode, types: list[TensorType], out: TensorType) -> dict:
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
            made[out] = Tensor(out, tiled_type(types[name].type, axis, size), "value", display=out)
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
            out_type = tiled_type(original.type, split.axes[j], size)
            name = tile_name(node.output, t)
            made[name] = Tensor(name, out_type, "value", original.span, f"{original.label}[{t}]")
            attrs = retiled_attrs(node, in_types, out_type)
            nodes.append(replace(node, inputs=tuple(inputs), output=name, attrs=attrs))
    last = chain[-1]
    parts = tuple(tile_name(last.output, t) for t in range(tiles))
    nodes.append(OpNode("concat", parts, last.output, {"axis": split.axes[-1]}, span=last.span))
    return nodes, made


# --- predicting a region's makespan --------------------------------------------------------


class _Costs:
    """The work of a chain's ops, whole and as tiles, computed once each."""

    def __init__(self, program: Program, chain: tuple[OpNode, ...], spec: DeviceSpec) -> None:
        self.program, self.chain, self.spec = program, chain, spec
        self.works: dict[tuple[int, int, int], Work] = {}
        self.views = view_outputs(program, chain)
        self.splits: dict[tuple[str, int], Split | None] = {}

    def work(self, j: int, split: _Split | None, tiles: int) -> Work:
        """Op ``j``'s work as one of ``tiles`` tiles (a view's: none)."""
        node = self.chain[j]
        if node.output in self.views:
            return VIEW
        axis = split.axes[j] if split is not None and tiles > 1 else 0
        key = (j, axis, tiles if split is not None else 1)
        if key not in self.works:
            types = self.program.tensors
            out = types[node.output].type
            ins = [types[i].type for i in node.inputs]
            if tiles > 1 and split is not None:
                size = split.extent // tiles
                out = tiled_type(out, axis, size)
                ins = [
                    t if s is None else tiled_type(t, s, size)
                    for t, s in zip(ins, split.operands[j], strict=True)
                ]
                if j > 0:  # the chain operand is the previous tile
                    prev = self.chain[j - 1].output
                    ins = [
                        tiled_type(types[n].type, split.axes[j - 1], size) if n == prev else t
                        for n, t in zip(node.inputs, ins, strict=True)
                    ]
                node = replace(node, attrs=retiled_attrs(node, ins, out))
            self.works[key] = op_work_of(node, ins, out, self.spec)
        return self.works[key]


def _predict(costs: _Costs, length: int, split: _Split | None, tiles: int) -> float:
    """The chain's makespan on a stream per unit: the first ``length`` ops as ``tiles`` tiles
    in the skewed order (then joined by a copy unless written in place), the rest whole, and —
    if the result is an output — its copy back to the host, in parts as the tiles finish where
    :mod:`.stream_host_copies` will send it so, else whole. Replayed with HBM and the host
    link shared as a run shares them (:func:`~rtgraph.timing.unit_replay.replay`): Cube and
    Vector tiles that both stream their bytes overlap only as far as the bandwidth allows."""
    works: list[Work] = []
    inputs: list[list[int]] = []
    parts = tiles if split is not None else 1
    item = [[-1] * parts for _ in range(len(costs.chain))]

    def add(work: Work, after: list[int]) -> int:
        works.append(work)
        inputs.append([a for a in after if a >= 0])
        return len(works) - 1

    for step in range(parts + length - 1):
        for j in range(length):
            t = step - j
            if 0 <= t < parts:
                item[j][t] = add(costs.work(j, split, parts), [item[j - 1][t]] if j else [])
    last = [item[length - 1][t] for t in range(parts)]
    tail = last
    if parts > 1 and costs.chain[length - 1].output in costs.views:
        joined = costs.program.tensors[costs.chain[length - 1].output].type
        tail = [add(Work("vector", dtype=joined.dtype, hbm_bytes=2 * joined.nbytes), last)]
    for j in range(length, len(costs.chain)):
        tail = [add(costs.work(j, None, 1), tail)]
    out = costs.chain[-1].output
    if out in costs.program.outputs:
        t = costs.program.tensors[out].type
        cut = parts > 1 and length == len(costs.chain) and split is not None and split.axes[-1] == 0
        if cut and sends_in_parts(t.nbytes // parts, t.dtype, costs.spec):
            for k in range(parts):
                add(copy_work("d2h", t.nbytes // parts), [last[k]])
        else:
            add(copy_work("d2h", t.nbytes), tail)
    return replay(works, inputs, range(len(works)), costs.spec, in_order=True).makespan


def plan_region(
    program: Program, chain: tuple[OpNode, ...], options: CompileOptions, room: int
) -> RegionPlan:
    """Every candidate tiling of ``chain`` with its predicted makespan, and the one to use
    (``room``: the device bytes the program leaves for tiles in flight)."""
    spec = options.target
    costs = _Costs(program, chain, spec)
    untiled = Candidate(len(chain), 0, 1, _predict(costs, len(chain), None, 1), 0)
    candidates = [untiled]
    if not _worth_cutting(costs, spec):
        return RegionPlan(chain, (untiled,), untiled)
    for length in range(2, len(chain) + 1):
        out = program.tensors[chain[length - 1].output].type
        inner = sum(program.tensors[n.output].type.nbytes for n in chain[:length])
        for axis in range(out.rank):
            split = _carry(chain[:length], axis, program, costs.splits)
            if split is None:
                continue
            for tiles in TILE_COUNTS:
                if split.extent % tiles or (
                    split.row_blocks and (split.extent // tiles) % ROW_BLOCK
                ):
                    continue
                working = inner // tiles * min(tiles, length)
                if working > room:
                    continue
                took = _predict(costs, length, split, tiles)
                candidates.append(Candidate(length, axis, tiles, took, working))
    best = min(candidates, key=lambda c: (c.predicted_us, c.tiles))
    if best.predicted_us > MIN_GAIN * untiled.predicted_us:
        best = untiled
    return RegionPlan(chain, tuple(candidates), best)


def _worth_cutting(costs: _Costs, spec: DeviceSpec) -> bool:
    """Whether tiling could pay at all: overlap saves at most the smaller of the chain's Cube
    and Vector time, and every extra tile costs at least one more launch on each unit."""
    busy: dict[str, float] = {}
    for j in range(len(costs.chain)):
        work = costs.work(j, None, 1)
        if work.lane is not None:
            busy[work.lane] = busy.get(work.lane, 0.0) + alone_us(work, spec)
    launches = spec.unit("cube").launch_us + spec.unit("vector").launch_us
    return min(busy.get("cube", 0.0), busy.get("vector", 0.0)) > launches


def plan_tiling(program: Program, options: CompileOptions) -> list[RegionPlan]:
    """The plan of every chain of ``program`` (what ``rtgraph explain`` prints).

    Chains of one shape — the same ops and attributes on the same types, a layer applied to
    each of several sequences — are planned once: every candidate's prediction depends on
    nothing else (:func:`chain_shape`), and planning is most of an ``-O2`` compile.
    """
    resident = sum(t.type.nbytes for t in program.tensors.values() if t.kind in ("param", "input"))
    room = options.target.memory.capacity - resident
    planned: dict[tuple, RegionPlan] = {}
    plans = []
    for chain in chains(program):
        key = chain_shape(program, chain)
        if key in planned:
            plans.append(replace(planned[key], chain=chain))
        else:
            plans.append(plan_region(program, chain, options, room))
            planned[key] = plans[-1]
    return plans


def chain_shape(program: Program, chain: tuple[OpNode, ...]) -> tuple:
    """What a chain's plan is read from: per op its name, attributes, operand types (an
    operand the op before computes marked as such, a repeated operand as a repeat) and result
    type; and whether the last result is an output (it is copied back to the host)."""
    types = program.tensors
    steps = []
    before = None
    for node in chain:
        operands = tuple(
            "chain" if name == before else (types[name].type, node.inputs.index(name))
            for name in node.inputs
        )
        steps.append((node.op, attrs_key(node.attrs), operands, types[node.output].type))
        before = node.output
    return tuple(steps), chain[-1].output in program.outputs


def tile_and_pipeline(program: Program, options: CompileOptions) -> Program:
    """``program`` with every chain the cost model says gains from it tiled and skewed — if
    the whole program, so tiled, is predicted to run faster (each chain was planned alone,
    and the work beside it may already fill the units)."""
    result = tiled(program, options)
    return program if slower(as_judged(result, options), program, options) else result


def as_judged(result: Program, options: CompileOptions) -> Program:
    """A tiled program as its whole-program check predicts it: with each output joined from
    tiles sent back in parts where :mod:`.stream_host_copies` will send it so."""
    spec = options.target
    sent = sent_in_parts(result, lambda nbytes, dtype: sends_in_parts(nbytes, dtype, spec))
    return result if sent == result.nodes else replace(result, nodes=sent)


def tiled(
    program: Program, options: CompileOptions, plans: list[RegionPlan] | None = None
) -> Program:
    """``program`` with the tiling every chain's plan chooses (``plans``: its
    :func:`plan_tiling`, when already made) — before the whole-program check: what
    ``rtgraph explain`` weighs."""
    if program.has_explicit_streams:
        return program
    replaced: dict[str, list[OpNode]] = {}  # the last tiled op's output -> the region's nodes
    gone: set[str] = set()
    tensors: dict[str, Tensor] = {}
    for plan in plan_tiling(program, options) if plans is None else plans:
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
