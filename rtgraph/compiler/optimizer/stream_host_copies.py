"""Streaming host copies: an input crosses the host link in row parts, so the work on its first
rows starts while the rest is still arriving, and each finished row block of an output goes back
while the next is computed.

Without it the Cube waits for a whole input to arrive before the first task and the link carries
a whole output after the last: on attention over 1,024-token sequences that is 53 µs at each end
(1.5 MB over the 910B's ≈30 GB/s link), a tenth of the makespan with the units idle.

*Inputs.* For each host input the pass predicts, with the cost model, when the work that reads it
directly is done if the input arrives whole or in K ∈ :data:`PART_COUNTS` row parts (each part
pays the copy's fixed cost again): tiles that read a row slice wait for the parts under it, an
op whose rows depend only on the same rows of the input (a matmul's rows, an elementwise op, a
layernorm) is cut into K row tiles written in place and each tile waits for its part, anything
else waits for every part. It keeps the K that finishes first, if it beats the whole copy by
:data:`MIN_GAIN`; the parts are ``to_device(x, rows=[a, b])`` copies on a stream the compiler
picks. The predictions replay the work with HBM and the link shared as a run shares them
(:mod:`rtgraph.timing.unit_replay`), and since each input is planned alone, the streamed
program is kept only if the whole of it is predicted to run faster
(:func:`~rtgraph.compiler.optimizer.predict.slower`): on models/transformer_block.rtg, whose
order is pipelined by hand, the parts cost more than they hide (483.1 µs without them against
518.2 µs with, by-unit).

*Outputs.* An output that is a ``concat`` along axis 0 of parts computed one after another (the
tiler's tiles) is sent part by part, each right after it is computed — when a part's transfer
takes longer than a copy's fixed cost, so the link time the parts hide outweighs what the extra
copies add.

Preserves: every value bit for bit. The copies move the same bytes; a cut op's rows are
computed by the same kernel on the same rows (a matmul in multiples of its row block).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from rtgraph.compiler.optimizer.host_link import sends_in_parts
from rtgraph.compiler.optimizer.predict import op_work_of, slower
from rtgraph.compiler.optimizer.rewrite import (
    attrs_key,
    concats_in_place,
    movable,
    pinned,
    rebuilt,
    renamed,
    sent_in_parts,
    slice_rows,
    view_outputs,
)
from rtgraph.compiler.optimizer.split_axes import needs_row_blocks, operand_axes
from rtgraph.compiler.optimizer.tile_and_pipeline import retiled_attrs, tiled_type
from rtgraph.compiler.options import CompileOptions
from rtgraph.device.spec import DeviceSpec
from rtgraph.ir.graph import HostCopyNode, Node, OpNode, Program, Tensor
from rtgraph.ops.cube import ROW_BLOCK
from rtgraph.ops.layout import VIEW_OPS
from rtgraph.timing.unit_replay import Work, copy_work, replay

#: The part counts tried for an input (each must divide its rows).
PART_COUNTS = (2, 4, 8)
#: Parts are kept only when they finish the input's first work by this share of the whole copy.
MIN_GAIN = 0.98


@dataclass(frozen=True)
class InputPlan:
    """What the pass predicts for one input: finish time per part count (1 = whole)."""

    name: str
    predicted_us: dict[int, float]
    parts: int


def stream_host_copies(program: Program, options: CompileOptions) -> Program:
    """``program`` with inputs copied in row parts and outputs sent back in parts where the
    cost model says the overlap pays — if the whole program, so streamed, is predicted to run
    faster (each input was planned alone)."""
    result = proposed(program, options)
    return program if slower(result, program, options) else result


def proposed(
    program: Program, options: CompileOptions, plans: list[InputPlan] | None = None
) -> Program:
    """``program`` streamed as each input's plan chooses (``plans``: its :func:`plan_inputs`,
    when already made) — before the whole-program check: what ``rtgraph explain`` weighs."""
    if not streamable(program):
        return program
    if plans is None:
        plans = plan_inputs(program, options)
    parts = {plan.name: plan.parts for plan in plans if plan.parts > 1}
    spec = options.target
    return streamed(program, parts, lambda nbytes, dtype: sends_in_parts(nbytes, dtype, spec))


def streamable(program: Program) -> bool:
    """Whether the pass may reorder ``program``: not with explicit streams, synthetic kernels,
    placed copies or captured graphs — there the author's order is kept."""
    return bool(program.nodes) and all(movable(n) for n in program.nodes)


def streamed(
    program: Program, parts: Mapping[str, int], send: Callable[[int, str], bool]
) -> Program:
    """The rewrite itself, whatever the cost model would say: each input ``x`` in ``parts``
    copied in ``parts[x]`` row parts (where its rows divide and, if a cut op is a matmul cut
    along its rows, the parts are whole row blocks), and each output joined from row tiles
    sent back part by part where ``send(smallest part's bytes, dtype)`` says so."""
    nodes: list[Node] = list(program.nodes)
    tensors: dict[str, Tensor] = {}
    tiled: set[str] = set()  # the ops an earlier input's parts already cut into row tiles
    for name, count in parts.items():
        rows = program.tensors[name].type.shape[0]
        if count > 1 and rows % count == 0:
            stream = _stream(program, name)
            if not (stream.row_blocks and rows // count % ROW_BLOCK):
                nodes = _split_input(program, nodes, tensors, name, stream, count, tiled)
    split = _read_parts(replace(program, nodes=nodes, tensors={**program.tensors, **tensors}))
    sent = sent_in_parts(split, send)
    return program if sent == program.nodes else replace(split, nodes=sent)


def _read_parts(program: Program) -> Program:
    """``program`` with each row slice that is exactly one part of a concatenation computed in
    place replaced by that part: a reader then waits for the tile that made its rows, not for
    the whole concatenation (and the program still defines every value before its use)."""
    in_place = concats_in_place(program)
    rows: dict[tuple[str, int, int], str] = {}
    for part, (whole, _) in in_place.items():
        joined = program.tensors[whole].type
        row_bytes = joined.nbytes // joined.shape[0] if joined.rank and joined.shape[0] else 0
        if row_bytes:
            lo = in_place[part][1] // row_bytes
            rows[whole, lo, lo + program.tensors[part].type.shape[0]] = part
    keep = pinned(program)
    to: dict[str, str] = {}
    for node in program.nodes:
        if isinstance(node, OpNode) and node.output not in keep:
            window = slice_rows(node, program)
            if window is not None and (node.inputs[0], *window) in rows:
                to[node.output] = rows[node.inputs[0], window[0], window[1]]
    if not to:
        return program
    nodes = [
        renamed(n, to) for n in program.nodes if not (isinstance(n, OpNode) and n.output in to)
    ]
    return rebuilt(program, nodes, to)


# --- inputs -------------------------------------------------------------------------------


def _rows(total: int, parts: int) -> list[tuple[int, int]]:
    size = total // parts
    return [(k * size, (k + 1) * size) for k in range(parts)]


def _cut_split(
    node: OpNode, streamed: set[str], program: Program, total: int
) -> tuple[int | None, ...] | None:
    """How ``node`` splits into row tiles that follow the parts of the streamed values it reads
    — per operand the axis to slice, or None for whole — or None when its result rows do not
    depend only on the same rows of those values."""
    if node.op in VIEW_OPS or not movable(node):
        return None
    types = [program.tensors[i].type for i in node.inputs]
    out = program.tensors[node.output].type
    if out.rank == 0 or out.shape[0] != total:
        return None
    split = operand_axes(node, 0, types, out)
    if split is None:
        return None
    for name, s, t in zip(node.inputs, split, types, strict=True):
        if (name in streamed and s != 0) or (s is not None and t.shape[s] != total):
            return None
    return split


@dataclass(frozen=True)
class _Stream:
    """What follows an input's parts: the ops cut into row tiles (program order, with how
    each operand splits) and the first ops that read a streamed value otherwise."""

    cut: dict[str, tuple[OpNode, tuple[int | None, ...]]]
    boundary: tuple[OpNode, ...]
    row_blocks: bool  # some cut op is a matmul cut along its rows: parts must be whole blocks


def _stream(program: Program, x: str) -> _Stream:
    total = program.tensors[x].type.shape[0]
    streamed = {x}
    cut: dict[str, tuple[OpNode, tuple[int | None, ...]]] = {}
    boundary: list[OpNode] = []
    blocks = False
    for node in program.nodes:
        if not isinstance(node, OpNode) or not streamed.intersection(node.inputs):
            continue
        split = _cut_split(node, streamed, program, total)
        if split is None or slice_rows(node, program) is not None:
            boundary.append(node)
        else:
            cut[node.output] = (node, split)
            streamed.add(node.output)
            blocks = blocks or needs_row_blocks(node, 0, program.tensors[node.output].type)
    return _Stream(cut, tuple(boundary), blocks)


def plan_inputs(program: Program, options: CompileOptions) -> list[InputPlan]:
    """For each host input read by the program's ops, the predicted finish of the work that
    follows it per part count, and the count chosen (what ``rtgraph explain`` prints)."""
    if not streamable(program):
        return []
    spec = options.target
    placed = {n.tensor for n in program.nodes if isinstance(n, HostCopyNode)}
    inputs: dict[str, None] = {}
    for node in program.nodes:
        assert isinstance(node, OpNode)
        for name in node.inputs:
            t = program.tensors[name]
            if t.kind == "input" and name not in placed and t.type.rank >= 1:
                inputs.setdefault(name)
    reader = _readers_of(program)
    plans = []
    known: dict[tuple, dict[int, float]] = {}  # inputs whose work has one shape: predicted once
    for name in inputs:
        rows = program.tensors[name].type.shape[0]
        stream = _stream(program, name)
        key = _stream_shape(program, name, stream, reader)
        if key not in known:
            known[key] = {
                parts: _predict(program, name, stream, parts, reader, spec)
                for parts in (1, *PART_COUNTS)
                if parts == 1
                or (rows % parts == 0 and not (stream.row_blocks and rows // parts % ROW_BLOCK))
            }
        predicted = dict(known[key])
        best = min(predicted, key=lambda k: (predicted[k], k))
        if predicted[best] > MIN_GAIN * predicted[1]:
            best = 1
        plans.append(InputPlan(name, predicted, best))
    return plans


def _stream_shape(
    program: Program, x: str, stream: _Stream, reader: dict[str, list[OpNode]]
) -> tuple:
    """What :func:`_predict` reads for input ``x``, with the streamed values numbered in the
    order they are made (the input 0, each cut op's result the next): two inputs of one key —
    a layer applied to each of several sequences — have the same predictions."""
    types = program.tensors
    number = {x: 0}
    for name in stream.cut:
        number[name] = len(number)

    def op(node: OpNode) -> tuple:
        return (
            node.op,
            attrs_key(node.attrs),
            tuple(number.get(i) for i in node.inputs),
            tuple(types[i].type for i in node.inputs),
            types[node.output].type,
        )

    views = view_outputs(program, stream.boundary)
    after = tuple(
        (
            op(node),
            slice_rows(node, program),
            tuple(op(r) for r in reader.get(node.output, ()) if r.output not in views)
            if node.output in views
            else None,
        )
        for node in stream.boundary
    )
    cut = tuple((op(node), split) for node, split in stream.cut.values())
    return types[x].type, types[x].pinned, cut, after, stream.row_blocks


def _readers_of(program: Program) -> dict[str, list[OpNode]]:
    found: dict[str, list[OpNode]] = {}
    for node in program.nodes:
        if isinstance(node, OpNode):
            for name in dict.fromkeys(node.inputs):
                found.setdefault(name, []).append(node)
    return found


def _predict(
    program: Program,
    x: str,
    stream: _Stream,
    parts: int,
    reader: dict[str, list[OpNode]],
    spec: DeviceSpec,
) -> float:
    """When the work that follows ``x`` is done if it arrives in ``parts`` row parts: the
    parts one after another over the link, each cut op's tile once the parts (or tiles) under
    its rows are there, every other reader once all of them are, an op reading a row slice
    once the parts under the slice are; each on its unit, as a list schedule starts them."""
    t = program.tensors[x].type
    total = t.shape[0]
    rows = _rows(total, parts)
    size = total // parts
    link = copy_work("h2d", t.nbytes // parts, program.tensors[x].pinned)
    items: list[tuple[Work, list[int]]] = []  # work, predecessors
    part_items: dict[str, list[int]] = {x: []}
    for _ in rows:
        items.append((link, []))
        part_items[x].append(len(items) - 1)

    def under(name: str, lo: int, hi: int) -> list[int]:
        return [k for k, (a, b) in zip(part_items[name], rows, strict=True) if a < hi and lo < b]

    def reads(node: OpNode) -> list[int]:
        return [k for i in node.inputs if i in part_items for k in part_items[i]]

    for name, (node, split) in stream.cut.items():
        part_items[name] = []
        types = [program.tensors[i].type for i in node.inputs]
        tiled = [
            ty if s is None else tiled_type(ty, s, size) for ty, s in zip(types, split, strict=True)
        ]
        out = tiled_type(program.tensors[name].type, 0, size)
        tile = replace(node, attrs=retiled_attrs(node, tiled, out))
        work = op_work_of(tile, tiled, out, spec)
        for lo, hi in rows:
            deps = [d for i in node.inputs if i in part_items for d in under(i, lo, hi)]
            items.append((work, deps))
            part_items[name].append(len(items) - 1)
    views = view_outputs(program, stream.boundary)
    for node in stream.boundary:
        window = slice_rows(node, program)
        deps = under(node.inputs[0], *window) if window is not None else reads(node)
        if node.output in views:  # a view: what reads it waits for the parts under it
            for r in reader.get(node.output, ()):
                if r.output not in views:
                    items.append((_work(r, program, spec), deps))
        else:
            items.append((_work(node, program, spec), deps))
    works = [w for w, _ in items]
    return replay(works, [d for _, d in items], range(len(items)), spec).makespan


def _work(node: OpNode, program: Program, spec: DeviceSpec) -> Work:
    types = [program.tensors[i].type for i in node.inputs]
    return op_work_of(node, types, program.tensors[node.output].type, spec)


def _split_input(
    program: Program,
    nodes: list[Node],
    made: dict[str, Tensor],
    x: str,
    stream: _Stream,
    parts: int,
    tiled: set[str],
) -> list[Node]:
    """``nodes`` with ``x`` copied in ``parts`` row parts (before its first reader) and the
    ops that follow its parts cut into row tiles, each joined in place under its name — but
    those in ``tiled``, which an earlier input's parts cut already (their tiles read ``x`` by
    rows too); adds the ops it cuts to ``tiled``."""
    t = program.tensors[x]
    rows = _rows(t.type.shape[0], parts)
    copies: list[Node] = [HostCopyNode("h2d", x, "", t.span, r) for r in rows]
    slices: dict[tuple[str, int, int], str] = {}  # (value, axis, part) -> its slice
    out: list[Node] = []
    for node in nodes:
        if isinstance(node, OpNode) and x in node.inputs and copies:
            out.extend(copies)
            copies = []
        if isinstance(node, OpNode) and node.output in stream.cut and node.output not in tiled:
            split = stream.cut[node.output][1]
            out.extend(_row_tiles(program, node, split, rows, made, slices))
            tiled.add(node.output)
        else:
            out.append(node)
    return out


def _row_tiles(
    program: Program,
    node: OpNode,
    split: tuple[int | None, ...],
    rows: list[tuple[int, int]],
    made: dict[str, Tensor],
    slices: dict[tuple[str, int, int], str],
) -> list[OpNode]:
    """``node`` as one tile per row range, each reading slices of the operands ``split`` cuts
    (made at their first use and shared), then the concatenation of the tiles under
    ``node``'s name (lowering computes the tiles into it in place)."""
    original = program.tensors[node.output]
    size = rows[0][1] - rows[0][0]
    out: list[OpNode] = []
    tiles = []
    for k, (lo, hi) in enumerate(rows):
        inputs = []
        for name, s in zip(node.inputs, split, strict=True):
            if s is None:
                inputs.append(name)
                continue
            if (name, s, k) not in slices:
                part = slices[name, s, k] = _fresh(f"{name}#rows{lo}:{hi}", program, made)
                source = made[name].type if name in made else program.tensors[name].type
                made[part] = Tensor(part, tiled_type(source, s, size), "value", display=part)
                attrs = {"start": lo, "stop": hi, "axis": s}
                out.append(OpNode("slice", (name,), part, attrs, span=node.span))
            inputs.append(slices[name, s, k])
        in_types = [made[i].type if i in made else program.tensors[i].type for i in inputs]
        out_type = tiled_type(original.type, 0, size)
        name = _fresh(f"{node.output}#r{k}", program, made)
        made[name] = Tensor(name, out_type, "value", original.span, f"{original.label}[r{k}]")
        attrs = retiled_attrs(node, in_types, out_type)
        out.append(replace(node, inputs=tuple(inputs), output=name, attrs=attrs))
        tiles.append(name)
    out.append(OpNode("concat", tuple(tiles), node.output, {"axis": 0}, span=node.span))
    return out


def _fresh(name: str, program: Program, made: dict[str, Tensor]) -> str:
    k, found = 1, name
    while found in program.tensors or found in made:
        k += 1
        found = f"{name}.{k}"
    return found


# --- outputs ------------------------------------------------------------------------------
