"""Padding a run to the gear above it: when that is sound, and what it costs.

A parameter declared with a range (``B: dyn 1..64``) is compiled at a ladder of gears (1, 2,
4, …, 64: :func:`rtgraph.frontend.gears.range_gears`), and a run at a value between two gears
runs the program of the gear above it on inputs padded with zeros, keeping each output's
leading part — XLA's bucketing, or ATC's gears with the padding done for the caller. That is
sound only when every element the run keeps is computed from real elements alone: along every
axis whose extent the parameter sets, each op must compute its result's elements from the same
index of its operands (a batch, or the rows of a matmul), never reduce or mix along it (a
softmax over a sequence, a matmul's inner dimension), and every such axis must stay a leading
block through reshapes. :func:`pad_plan` decides it from the program bound at the run's values
and at the gear's: the two must have the same ops; an axis is *padded* where their extents
differ; each op's padded axes must be exactly the ones
:func:`~rtgraph.compiler.optimizer.split_axes.operand_axes` can compute in independent parts,
carried to the same padded axes of its operands — the rule the tiling pass splits by, so a
padded run computes its real elements as a tile of the gear's would. Some computations that
do reduce or mix along a padded axis are kept all the same, by kernels told its real extent at
run time (:mod:`rtgraph.ops.extents`): a softmax or a norm along it, a reduction over it
alone, a matmul's columns and its inner dimension, and a slice of it told where it starts. The
plan lists those ops
(:attr:`PadPlan.extents`); :func:`with_extents` marks them in the gear's program before it is
compiled (:func:`gear_extents` finds them), and :meth:`PadPlan.bind` sets the run's values on
the compiled tasks. What the padding holds never reaches a real element, so it may be
anything: inputs — and params whose shape the parameter sets (a KV cache per sequence) — are
zero-padded, a const fills the gear's shape; only a placed buffer and a derived param may not
depend on the parameter.

The cost is shown, not hidden: the plan holds the flops of the program at the real values and
at the gear's, so a run reports the share of its work that was padding.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from rtgraph.compiler.axis_map import split_of
from rtgraph.compiler.optimizer.split_axes import Split
from rtgraph.compiler.real_dims import retime
from rtgraph.device.spec import DeviceSpec
from rtgraph.dtypes import TensorType
from rtgraph.errors import CheckError, InputError, Span
from rtgraph.ir.graph import HostCopyNode, OpNode, Program
from rtgraph.ir.reference import program_flops
from rtgraph.ops import extents, lookup
from rtgraph.ops.registry import OpError
from rtgraph.stream_program.program import StreamProgram, Task

#: The tensors a program's data enters by: a padded run pads them, and every other value's
#: real extents follow from theirs.
HOST_KINDS = frozenset({"input", "param", "const"})


@dataclass(frozen=True)
class PadPlan:
    """How a run at ``values`` runs on the program compiled for ``gear``."""

    values: dict[str, int]
    gear: dict[str, int]
    #: each host input's real shape (the gear's program takes it zero-padded to its own)
    inputs: dict[str, tuple[int, ...]]
    #: the real shape of each param whose shape the parameters set (padded as the inputs are)
    params: dict[str, tuple[int, ...]]
    #: each output's real shape (the leading part of the gear's output that is kept)
    outputs: dict[str, tuple[int, ...]]
    #: the program's flops at the real values and at the gear's
    flops: int
    padded_flops: int
    #: the ops that compute on the real part of an axis alone (:mod:`rtgraph.ops.extents`):
    #: each one's index in the program's nodes and the attributes that mark it
    #: (``{"length_of": "S"}``) — what the gear's compiled program carries
    extents: dict[int, dict[str, str | int]] = field(default_factory=dict)
    #: the axes of each host tensor (input, param, const) whose extent the parameters set,
    #: and that tensor's real shape: what every task's real shapes are worked out from
    #: (:mod:`rtgraph.compiler.real_dims`)
    padded: dict[str, tuple[int, ...]] = field(default_factory=dict)
    hosts: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: set on a run's plan (its result's ``padding``): whether the run timed its tasks at
    #: their real shapes (a program compiled with real extents) or at the gear's
    timed: bool = False
    #: the makespans (µs, at the real shapes) of the gear's programs weighed for the run —
    #: its own (``tiled`` when it has an ``untiled`` one, else ``own``), ``untiled`` and
    #: ``reordered`` — when the gear was compiled more than one way; the fastest one ran
    weighed: dict[str, float] = field(default_factory=dict)
    #: the values the ``reordered`` program's order was chosen at (when it was weighed)
    ordered_at: dict[str, int] = field(default_factory=dict)

    @property
    def wasted(self) -> float:
        """The share of the gear's flops spent on padding."""
        return 1.0 - self.flops / self.padded_flops if self.padded_flops else 0.0

    def pad(self, inputs: Mapping[str, np.ndarray], shapes: Mapping[str, tuple[int, ...]]):
        """``inputs`` (real shapes) zero-padded to ``shapes`` (the gear's)."""
        out = {}
        for name, value in inputs.items():
            if name not in shapes or value.shape == tuple(shapes[name]):
                out[name] = value
                continue
            widths = [(0, g - r) for r, g in zip(value.shape, shapes[name], strict=True)]
            out[name] = np.pad(value, widths)
        return out

    def cut(self, outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The gear's ``outputs`` cut to their real leading parts."""
        return {
            name: value[tuple(slice(0, n) for n in self.outputs[name])]
            if name in self.outputs
            else value
            for name, value in outputs.items()
        }

    def bind(self, program: StreamProgram, spec: DeviceSpec | None = None) -> StreamProgram:
        """``program`` (the gear's, compiled) with each marked task's run-time extents set to
        the run's values (:func:`rtgraph.ops.extents.bind`), inside fused bodies too; given
        the device, every task is timed at its real shapes too
        (:func:`rtgraph.compiler.real_dims.retime`)."""
        tasks, changed = list(program.tasks), False
        for k, task in enumerate(tasks):
            attrs = _bound(task.op, task.attrs, self.values)
            if attrs is not None:
                _same_result(task, attrs, self.values)
                tasks[k], changed = replace(task, attrs=attrs), True
        bound = replace(program, tasks=tuple(tasks)) if changed else program
        return bound if spec is None else retime(bound, self.hosts, spec)

    def describe(self) -> str:
        """One line for a run's report."""
        moved = ", ".join(f"{n} {v} → {self.gear[n]}" for n, v in self.values.items())
        timed = (
            "each task timed at its real shapes"
            if self.timed
            else "tasks timed at the gear's shapes (the program holds no real extents)"
        )
        line = (
            f"padded to the gear above: {moved}; the gear's {self.padded_flops:,} flops, "
            f"{self.padded_flops - self.flops:,} ({self.wasted:.1%}) of them on padding; {timed}"
        )
        if self.weighed:
            # the fastest ran; a tie, the gear's own (as rtgraph.choose_gear decides)
            ran, *others = sorted(
                self.weighed, key=lambda k: (self.weighed[k], k not in ("own", "tiled"), k)
            )
            against = ", ".join(f"{self.weighed[o]:,.1f} µs {self._named(o)}" for o in others)
            line += (
                f"; ran the gear's {self._named(ran, ran=True)} ({self.weighed[ran]:,.1f} µs "
                f"at the real shapes against {against})"
            )
        return line

    def _named(self, label: str, ran: bool = False) -> str:
        """A weighed program's name in the report (``ran``: as the one that ran): its label,
        or for the reordered one the sizes its order was chosen for."""
        if label != "reordered":
            return f"{label} program" if ran else label
        at = sizes(self.ordered_at) or "inside its bucket"
        return f"{'program ' if ran else ''}in the order chosen for {at}"


def sizes(values: Mapping[str, int]) -> str:
    """Parameter values as a report writes them: ``S = 768, B = 4``."""
    return ", ".join(f"{n} = {v}" for n, v in values.items())


def _same_result(task: Task, attrs: Mapping[str, Any], values: Mapping[str, int]) -> None:
    """An :class:`~rtgraph.errors.InputError` when a task's attributes bound at the run's
    values would make a result of another shape than the one compiled (a file's marks that
    move a slice off its operand): the kernel would write outside its output."""
    op = lookup(task.op)
    if op is None or task.output is None or task.op == "fused":
        return  # a fused body's steps take extents only, which never change a shape
    types = [TensorType(o.shape, o.dtype) for o in task.inputs]
    want = TensorType(task.output.shape, task.output.dtype)
    try:
        got = op.infer(types, attrs)
    except OpError as e:
        got = e
    if got != want:
        shown = ", ".join(f"{n}={v}" for n, v in values.items())
        raise InputError(
            f"task {task.id} '{task.name}' ({task.op}) at {shown}: its run-time attributes give "
            f"{got.message if isinstance(got, OpError) else got}, not the {want} it was compiled "
            "for",
            hint="recompile the program from its source; the file's marks do not fit it",
        )


def _bound(op: str, attrs: Mapping[str, Any], values: Mapping[str, int]) -> dict | None:
    """A task's (or a fused step's) attributes with their extents bound, or None if none is
    marked."""
    if op != "fused":
        return extents.bind(attrs, values)
    body, changed = [], False
    for name, args, step_attrs, dtype, shape in attrs["body"]:
        bound = extents.bind(dict(step_attrs), values)
        if bound is not None:
            step_attrs, changed = tuple(bound.items()), True
        body.append((name, args, step_attrs, dtype, shape))
    return {**attrs, "body": tuple(body)} if changed else None


def gear_extents(
    ranges: Mapping[str, tuple[int, int]],
    values: Mapping[str, int],
    bind: Callable[[dict[str, int]], Program],
) -> dict[int, dict[str, str | int]]:
    """The ops of the program bound at the gear combination ``values`` (``bind`` binds one)
    that a run padded to it must tell where an axis's real part ends, by node index, with
    their marks (``{"cols_of": "S"}``): none where no run pads to it."""
    return gear_padding(ranges, values, bind)[0]


def gear_padding(
    ranges: Mapping[str, tuple[int, int]],
    values: Mapping[str, int],
    bind: Callable[[dict[str, int]], Program],
) -> tuple[dict[int, dict[str, str | int]], dict[str, tuple[int, ...]]]:
    """:func:`gear_extents`' marks, and the axes of the host tensors (inputs, params, consts)
    that a run padded to the gear ``values`` pads (:attr:`PadPlan.padded`). Each ranged
    parameter's axes are found against its own lower end, the others where they are, so that
    two ranges with the same ends never leave an axis's parameter in doubt."""
    marks: dict[int, dict[str, str | int]] = {}
    padded: dict[str, set[int]] = {}
    for name, (lo, _) in ranges.items():
        low = {**values, name: lo}
        if low != values:
            plan = pad_plan(bind(low), bind(dict(values)), low, values)
            for k, found in plan.extents.items():
                marks.setdefault(k, {}).update(found)
            for tensor, axes in plan.padded.items():
                padded.setdefault(tensor, set()).update(axes)
    return marks, {tensor: tuple(sorted(axes)) for tensor, axes in padded.items()}


def with_extents(
    program: Program,
    marks: Mapping[int, Mapping[str, str | int]],
    padded: Mapping[str, tuple[int, ...]] | None = None,
) -> Program:
    """``program`` with the ops at ``marks``' node indices marked so (:func:`gear_extents`:
    ``length_of = "S"``, :mod:`rtgraph.ops.extents`) and its host tensors' ``padded`` axes
    noted (:func:`gear_padding`): what a gear is compiled from, so that a padded run can bind
    the extents and time every task at its real shapes (:mod:`rtgraph.compiler.real_dims`)."""
    if padded:
        program = replace(program, padded=dict(padded))
    if not marks:
        return program
    nodes = list(program.nodes)
    for k, found in marks.items():
        node = nodes[k]
        assert isinstance(node, OpNode)
        nodes[k] = replace(node, attrs={**node.attrs, **found})
    return replace(program, nodes=nodes)


def describe_extents(program: Program, marks: Mapping[int, Mapping[str, str | int]]) -> str:
    """The marked ops in one line, for ``rtgraph explain``: ``matmul (line 30) cols=S ×4, …``
    (the ops one line makes counted once, with how many there are)."""
    counts: dict[str, int] = {}
    for k, found in sorted(marks.items()):
        node = program.nodes[k]
        op = getattr(node, "op", "?")
        part = f"{op}{_where(node.span)} {extents.describe(op, found).strip(' []')}"
        counts[part] = counts.get(part, 0) + 1
    return ", ".join(part + (f" ×{n}" if n > 1 else "") for part, n in counts.items())


def _refuse(message: str, span: Span | None, names: str, hint: str | None = None) -> CheckError:
    gears = f"list the sizes you run as gears instead ({names.split(',')[0]}: dyn {{…}})"
    return CheckError(
        message,
        span,
        hint=f"{hint}, or {gears}"
        if hint
        else f"padding {names} is sound only along axes no op reduces or mixes (a softmax, "
        f"a reduction and a matmul may: a run tells them the real extent); {gears}",
    )


def _where(span: Span | None) -> str:
    return f" (line {span.line})" if span is not None else ""


def pad_plan(
    real: Program, padded: Program, values: Mapping[str, int], gear: Mapping[str, int]
) -> PadPlan:
    """Whether ``real`` (bound at ``values``) may run as ``padded`` (bound at ``gear``) on
    zero-padded inputs, keeping the leading part of each output (see the module); a
    :class:`~rtgraph.errors.CheckError` located at the first op that forbids it, if not."""
    names = ", ".join(values)
    if len(real.nodes) != len(padded.nodes) or set(real.tensors) != set(padded.tensors):
        raise _refuse(
            f"the program's ops depend on {names}: bound at {dict(values)} and at "
            f"{dict(gear)} it has different ops, so one cannot run as the other",
            padded.source and Span(padded.source, 1, 1, 1, 2),
            names,
        )
    dyn: dict[str, tuple[int, ...]] = {}
    for name, t in padded.tensors.items():
        r = real.tensors[name]
        if r.kind != t.kind or r.type.dtype != t.type.dtype or r.type.rank != t.type.rank:
            raise _refuse(f"tensor '{t.display or name}' changes with {names}", t.span, names)
        axes = tuple(
            i for i, (a, b) in enumerate(zip(r.type.shape, t.type.shape, strict=True)) if a != b
        )
        if any(r.type.shape[i] > t.type.shape[i] for i in axes):
            raise _refuse(
                f"tensor '{t.display or name}' is larger at {dict(values)} than at the gear's "
                f"{dict(gear)}",
                t.span,
                names,
            )
        if axes and (t.kind == "buffer" or t.derive is not None):
            raise _refuse(
                f"{t.kind} '{t.display or name}' has a shape {names} sets, and its bytes are "
                "placed (a buffer) or made from another param's (a derived param)",
                t.span,
                names,
            )
        if axes:
            dyn[name] = axes
    marked: dict[int, dict[str, str | int]] = {}
    moved = {n: (gear[n], v) for n, v in values.items() if gear.get(n, v) != v}
    for k, (r_node, node) in enumerate(zip(real.nodes, padded.nodes, strict=True)):
        if type(r_node) is not type(node):
            raise _refuse(f"the program's statements depend on {names}", node.span, names)
        if isinstance(node, HostCopyNode) and r_node != node:
            raise _refuse(f"a host copy{_where(node.span)} changes with {names}", node.span, names)
        if isinstance(node, OpNode):
            assert isinstance(r_node, OpNode)
            marks = _check_op(real, padded, r_node, node, dyn, names, moved)
            if marks:
                marked[k] = marks
    hosts = [n for n in dyn if padded.tensors[n].kind in HOST_KINDS]
    return PadPlan(
        values=dict(values),
        gear=dict(gear),
        inputs={t.name: real.tensors[t.name].type.shape for t in padded.inputs()},
        params={t.name: real.tensors[t.name].type.shape for t in padded.params_() if t.name in dyn},
        outputs={name: real.tensors[name].type.shape for name in padded.outputs},
        flops=program_flops(real),
        padded_flops=program_flops(padded),
        extents=marked,
        padded={n: dyn[n] for n in hosts},
        hosts={n: real.tensors[n].type.shape for n in hosts},
    )


def _leading_reshape(
    node: OpNode,
    dyn: Mapping[str, tuple[int, ...]],
    types: Sequence[TensorType],
    r_types: Sequence[TensorType],
    out: TensorType,
    r_out: TensorType,
) -> bool:
    """A reshape that keeps the padded axis outermost, merging or splitting only the axes
    after it (``[B, S, D]`` ↔ ``[B·S, D]``): in row-major order a leading block of its operand is
    a leading block of its result, so the real elements stay a prefix."""
    return (
        node.op == "reshape"
        and dyn.get(node.inputs[0]) == (0,)
        and dyn.get(node.output) == (0,)
        and types[0].shape[1:] == r_types[0].shape[1:]
        and out.shape[1:] == r_out.shape[1:]
    )


def _check_op(
    real: Program,
    padded: Program,
    r_node: OpNode,
    node: OpNode,
    dyn: Mapping[str, tuple[int, ...]],
    names: str,
    moved: Mapping[str, tuple[int, int]],
) -> dict[str, str | int]:
    """``node``'s padded result axes are computed from the same indices of its operands'
    padded axes, and every padded operand axis is carried (nothing reduces over padding) —
    or computed on alone, by a kernel told the real extent at run time (:func:`_extents`).
    Returns the attributes that mark the op so (empty when it needs none)."""
    if r_node.op != node.op or r_node.inputs != node.inputs or r_node.output != node.output:
        raise _refuse(f"the program's ops depend on {names}", node.span, names)
    what = f"{node.op}{_where(node.span)}"
    types = [padded.tensors[n].type for n in node.inputs]
    r_types = [real.tensors[n].type for n in node.inputs]
    out, r_out = padded.tensors[node.output].type, real.tensors[node.output].type
    carried: list[set[int]] = [set() for _ in node.inputs]

    def _alike(split: Split, r_split: Split | None, axis: int) -> bool:
        """The real binding splits as the gear's, each carried axis as long as the result's —
        an axis of extent one at the real values counts as carried (broadcasting it is
        taking it)."""
        if r_split is None:
            r_split = tuple(None for _ in split)
        for j, (a, r) in enumerate(zip(split, r_split, strict=True)):
            if a is None:
                if r is not None:
                    return False
                continue
            if r not in (a, None) or (
                r is None and (r_types[j].shape[a], r_out.shape[axis]) != (1, 1)
            ):
                return False
            if (types[j].shape[a], r_types[j].shape[a]) != (out.shape[axis], r_out.shape[axis]):
                return False
        return True

    if _leading_reshape(node, dyn, types, r_types, out, r_out):
        return {}
    if node.op in extents.POSITIONS:
        marks, cut = _positions(node, r_node, dyn, types, r_types, moved)
    else:
        marks, cut = _extents(node, dyn, types, r_types, moved, names)
    for j, a in cut:
        if j >= 0:
            carried[j].add(a)
    for axis in dyn.get(node.output, ()):
        if (-1, axis) in cut:
            continue  # zeros past the real extent, written by the kernel
        split = split_of(node, axis, types, out)
        if split is None or not _alike(split, split_of(r_node, axis, r_types, r_out), axis):
            raise _refuse(
                f"{what} does not compute its result's elements along axis {axis} "
                f"independently of each other, and {names} sets that axis's extent: padding "
                "would change the real elements",
                node.span,
                names,
            )
        for j, a in enumerate(split):
            if a is not None:
                carried[j].add(a)
    for j, name in enumerate(node.inputs):
        left = set(dyn.get(name, ())) - carried[j]
        if left:
            raise _refuse(
                f"{what} reduces or mixes along axis {min(left)} of its operand "
                f"'{padded.tensors[name].display or name}', whose extent {names} sets: "
                "padding would enter the real elements",
                node.span,
                names,
            )
    return marks


def _positions(
    node: OpNode,
    r_node: OpNode,
    dyn: Mapping[str, tuple[int, ...]],
    types: Sequence[TensorType],
    r_types: Sequence[TensorType],
    moved: Mapping[str, tuple[int, int]],
) -> tuple[dict[str, str | int], set[tuple[int, int]]]:
    """A slice along a padded axis that keeps its length: where it starts and stops is fixed
    (inside the real part at every run, as at the range's ends) or moves with a dynamic
    parameter (``start = S - 1``: the last real row), marked so that a run can set it
    (:data:`rtgraph.ops.extents.POSITIONS`). Returns the marks and the (operand, axis) pair
    carried — none when the slice does not cut a padded axis or changes its length (refused
    then as any op that mixes along a padded axis)."""
    ax = node.attrs.get("axis", 0) % types[0].rank
    if ax not in dyn.get(node.inputs[0], ()):
        return {}, set()
    gear = slice(node.attrs.get("start", 0), node.attrs.get("stop")).indices(types[0].shape[ax])
    real = slice(r_node.attrs.get("start", 0), r_node.attrs.get("stop")).indices(
        r_types[0].shape[ax]
    )
    if gear[1] - gear[0] != real[1] - real[0]:
        return {}, set()
    marks: dict[str, str | int] = {}
    for name, at_gear, at_run in (("start", gear[0], real[0]), ("stop", gear[1], real[1])):
        if at_gear == at_run:
            continue
        param = next((p for p, (g, v) in moved.items() if at_gear - g == at_run - v), None)
        if param is None:
            return {}, set()
        marks[f"{name}_of"], marks[f"{name}_shift"] = param, at_gear - moved[param][0]
    return marks, {(0, ax)}


def _extents(
    node: OpNode,
    dyn: Mapping[str, tuple[int, ...]],
    types: Sequence[TensorType],
    r_types: Sequence[TensorType],
    moved: Mapping[str, tuple[int, int]],
    names: str,
) -> tuple[dict[str, str | int], set[tuple[int, int]]]:
    """The run-time extents (:mod:`rtgraph.ops.extents`) ``node`` needs: where its kernel may
    compute on the real part of a padded axis alone — a softmax or a norm along it, a reduction
    over it, a matmul's columns or inner dimension — each cut axis's extent must be one dynamic
    parameter's value at the gear and at the run, so the run can tell the kernel. Returns the
    marks, and the (operand, axis) pairs cut — operand -1 for the result axis the kernel
    zero-fills."""
    marks: dict[str, str | int] = {}
    cut: set[tuple[int, int]] = set()
    if node.op == "matmul" and min(t.rank for t in types) < 2:
        return marks, cut
    for name in extents.EXTENTS.get(node.op, ()):
        axes, out_axis = extents.axes_of(node.op, name, types, node.attrs)
        pairs = [(j, a) for j, a in enumerate(axes) if a is not None]
        if not any(a in dyn.get(node.inputs[j], ()) for j, a in pairs):
            continue
        spans = {(types[j].shape[a], r_types[j].shape[a]) for j, a in pairs}
        params = [p for p, pair in moved.items() if {pair} == spans]
        if not params:
            j, a = pairs[0]
            gear_extent, real_extent = types[j].shape[a], r_types[j].shape[a]
            raise _refuse(
                f"{node.op}{_where(node.span)} computes along axis {a} of operand {j}, whose "
                f"extent {names} sets ({gear_extent} at the gear, {real_extent} at the run) "
                "but is not the value of a dynamic parameter: a run could not tell its kernel "
                "where the real part ends",
                node.span,
                names,
                hint="size the axis by the dynamic parameter itself",
            )
        marks[f"{name}_of"] = params[0]
        cut.update(pairs)
        if out_axis is not None:
            cut.add((-1, out_axis))
    return marks, cut
