"""The precision pass's rewrite: a program recomputed in the precision chosen for each op.

Given a :class:`Choice` — a precision per op (``f32``, ``f16``, ``bf16``, ``int8``; absent: the
dtypes the program declares) and the int8 scale of each activation an int8 op quantizes —
:func:`converted` rebuilds the program so that each op computes in its precision:

* An op in a float precision reads each floating-point operand in that dtype. A value produced
  in another dtype is converted by a ``cast`` task placed before its first reader in the new
  dtype (one per value and dtype); a ``param`` is converted once, when it is loaded (a param
  with a ``convert`` :class:`~rtgraph.ir.weights.Derive`, as ATC stores an f32 model's weights
  in f16); a scalar ``const`` is restated in the dtype.
* An int8 ``matmul`` / ``conv2d`` multiplies int8 operands into int32 and a ``dequantize`` with
  the product of the operands' scales brings the result back to a float dtype. A weight (a
  ``param`` operand) is quantized at load time per output channel (``quantize`` Derive; AMCT
  and TensorRT quantize weights per channel) and the dequantize scale — the activation's scale
  times each channel's — is a param made at load time too; an activation is quantized by a
  ``quantize`` task with the scale calibration chose (per tensor, symmetric: zero point 0).
* The program's interface does not change: inputs keep their dtypes (a cast follows them),
  outputs keep their names and dtypes (a final cast, when the op computing one changed dtype,
  unless ``interface=False``: the f32 reference the pass measures against keeps f32 outputs),
  and the user supplies params under their declared names and types.

An op whose rule refuses the new dtypes (an op with no form in them) keeps its declared ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from rtgraph.compiler.optimizer.rewrite import mentioned, movable, pinned
from rtgraph.dtypes import DTYPES, TensorType
from rtgraph.ir.graph import CallbackNode, HostCopyNode, Node, OpNode, Program, Tensor
from rtgraph.ir.weights import Derive
from rtgraph.ops import lookup
from rtgraph.ops.fused import CHANNEL_AXIS
from rtgraph.ops.registry import ELEMENT_MOVES, OpError

#: The float precisions an op may compute in.
FLOATS = ("f32", "f16", "bf16")


@dataclass(frozen=True)
class Choice:
    """What the pass chose: ``precisions`` by node index (absent: keep the declared dtypes),
    ``scales`` the int8 scale of each activation an int8 op quantizes, and ``int8_output`` the
    float dtype an int8 op's dequantize produces (None: the op's declared dtype)."""

    precisions: Mapping[int, str] = field(default_factory=dict)
    scales: Mapping[str, float] = field(default_factory=dict)
    int8_output: str | None = None


def is_float(t: Tensor | TensorType) -> bool:
    """Whether a tensor (or type) holds floating-point values."""
    dtype = t.dtype if isinstance(t, TensorType) else t.type.dtype
    return DTYPES[dtype].is_float


def int8_operands(program: Program, node: OpNode) -> tuple[str, ...] | None:
    """The operands of ``node`` an int8 form quantizes by calibrated scales (activations), or
    None when it has no int8 form: not a float matmul / conv2d, or both operands params."""
    if node.op not in CHANNEL_AXIS or not movable(node) or len(node.inputs) != 2:
        return None
    a, b = (program.tensors[n] for n in node.inputs)
    if not (is_float(a) and is_float(b)) or (_weight(a) and _weight(b)):
        return None
    return tuple(t.name for t in (a, b) if not _weight(t))


def _weight(t: Tensor) -> bool:
    """A param quantized when loaded (an already derived one is an activation to us)."""
    return t.kind == "param" and t.derive is None and t.type.rank >= 1


def converted(program: Program, choice: Choice, *, interface: bool = True) -> Program:
    """``program`` with each op computing in the precision ``choice`` gives it."""
    return conversion(program, choice, interface=interface)[0]


def conversion(
    program: Program, choice: Choice, *, interface: bool = True
) -> tuple[Program, Mapping[tuple[str, str], str]]:
    """:func:`converted`, and where each value of ``program`` is in each dtype it was made in:
    ``(name, dtype) → tensor`` of the new program."""
    rewrite = _Rewrite(program, choice, interface)
    return rewrite.run(), rewrite.versions


#: Views that commute with a per-tensor quantize (one operand, elements only moved).
VIEWS = frozenset({"reshape", "transpose"})


class _Rewrite:
    def __init__(self, program: Program, choice: Choice, interface: bool) -> None:
        self.program = program
        self.choice = choice
        self.interface = interface
        self.tensors: dict[str, Tensor] = dict(program.tensors)
        self.nodes: list[Node] = []
        #: (source name, dtype) → the tensor holding that value in that dtype.
        self.versions: dict[tuple[str, str], str] = {}
        #: source name → the tensor its producer now writes.
        self.current: dict[str, str] = {}
        self.outputs = set(program.outputs)
        self.producers = {n.output: n for n in program.nodes if isinstance(n, OpNode)}

    def run(self) -> Program:
        for k, node in enumerate(self.program.nodes):
            precision = self.choice.precisions.get(k)
            if precision is None and isinstance(node, OpNode) and node.op in ELEMENT_MOVES:
                # no arithmetic: it keeps the dtype its operand arrives in (an f16 view, no cast)
                precision = self._arriving(node)
            if not isinstance(node, OpNode) or node.op == "kernel" or not movable(node):
                self.nodes.append(node)
            elif not self._int8(node) if precision == "int8" else not self._float(node, precision):
                self._keep(node)
        nodes = replace(self.program, nodes=_live(self.nodes, pinned(self.program)))
        used = set(mentioned(nodes)) | {n.output for n in nodes.op_nodes()}
        # A param stays declared (unused, as the program had it) unless a param made from it
        # at load time took its place: the user supplies the same names either way.
        sources = {t.derive.source for t in self.tensors.values() if t.derive is not None}
        tensors = {
            name: t
            for name, t in self.tensors.items()
            if name in used or t.kind == "input" or (t.kind == "param" and name not in sources)
        }
        return replace(nodes, tensors=tensors)

    def _arriving(self, node: OpNode) -> str | None:
        """The float dtype ``node``'s first operand now has, if it changed."""
        first = node.inputs[0] if node.inputs else None
        if first is None or first not in self.program.tensors:
            return None
        now = self.tensors[self.current.get(first, first)].type.dtype
        return now if now != self.program.tensors[first].type.dtype and now in FLOATS else None

    # --- names and versions -----------------------------------------------------------
    def fresh(self, name: str) -> str:
        if name not in self.tensors:
            return name
        k = 2
        while f"{name}.{k}" in self.tensors:
            k += 1
        return f"{name}.{k}"

    def fetch(self, name: str, dtype: str) -> str:
        """The tensor holding source value ``name`` in ``dtype``, converting it if needed."""
        key = (name, dtype)
        found = self.versions.get(key)
        if found is not None:
            return found
        now = self.current.get(name, name)
        t = self.tensors[now]
        if t.type.dtype == dtype:
            self.versions[key] = now
            return now
        source = self.program.tensors[name]
        new = self.fresh(f"{name}/{dtype}")
        typed = TensorType(t.type.shape, dtype)
        if source.kind == "param" and source.derive is None:
            derive = Derive(name, source.type, "convert")
            self.tensors[new] = replace(source, name=new, type=typed, derive=derive)
        elif source.kind == "const":
            self.tensors[new] = replace(source, name=new, type=typed)
        else:
            self.tensors[new] = Tensor(new, typed, "value", t.span, display=t.label)
            self.nodes.append(OpNode("cast", (now,), new, {"dtype": dtype}, span=t.span))
        self.versions[key] = new
        return new

    def emit(self, node: OpNode, out_type: TensorType) -> None:
        """Append ``node`` (computing source value ``node.output`` as ``out_type``); an output
        whose dtype changed is computed under a new name and cast back to its own."""
        name = node.output
        declared = self.program.tensors[name]
        target = name
        if self.interface and name in self.outputs and out_type.dtype != declared.type.dtype:
            target = self.fresh(f"{name}/{out_type.dtype}")
        self.tensors[target] = replace(declared, name=target, type=out_type, kind="value")
        self.nodes.append(replace(node, output=target))
        self.current[name] = target
        self.versions[(name, out_type.dtype)] = target
        if target != name:
            self.tensors[name] = declared
            cast = OpNode("cast", (target,), name, {"dtype": declared.type.dtype}, span=node.span)
            self.nodes.append(cast)
            self.versions[(name, declared.type.dtype)] = name

    # --- the three forms of an op -------------------------------------------------------
    def _keep(self, node: OpNode) -> None:
        inputs = tuple(self.fetch(n, self.program.tensors[n].type.dtype) for n in node.inputs)
        self.emit(replace(node, inputs=inputs), self.program.tensors[node.output].type)

    def _float(self, node: OpNode, precision: str | None) -> bool:
        declared = self.program.tensors[node.output].type
        if precision not in FLOATS or not is_float(declared):
            return False
        attrs = dict(node.attrs)
        if "dtype" in attrs and attrs["dtype"] in FLOATS:
            attrs["dtype"] = precision
        wanted = [  # the dtype each operand is read in (a cast reads its operand as it is)
            self.tensors[self.current.get(n, n)].type.dtype
            if node.op == "cast" or not is_float(self.program.tensors[n])
            else precision
            for n in node.inputs
        ]
        types = [
            TensorType(self.program.tensors[n].type.shape, d)
            for n, d in zip(node.inputs, wanted, strict=True)
        ]
        out = _infer(node.op, types, attrs)
        if out is None or out.dtype != precision:
            return False
        inputs = tuple(self.fetch(n, d) for n, d in zip(node.inputs, wanted, strict=True))
        self.emit(replace(node, inputs=inputs, attrs=attrs), out)
        return True

    def _int8(self, node: OpNode) -> bool:
        activations = int8_operands(self.program, node)
        if activations is None or any(a not in self.choice.scales for a in activations):
            return False
        declared = self.program.tensors[node.output].type
        channel = declared.rank - 1 if node.op == "matmul" else 1
        out_dtype = self.choice.int8_output or declared.dtype
        attrs = {"axis": channel, "dtype": out_dtype}
        i8 = [TensorType(self.program.tensors[n].type.shape, "i8") for n in node.inputs]
        acc_type = _infer(node.op, i8, node.attrs)
        if acc_type is None or acc_type.dtype != "i32":
            return False
        # The scale's shape does not matter to the rule's dtype; a scalar stands for it here.
        out = _infer("dequantize", [acc_type, TensorType((), "f32")], attrs)
        if out is None:
            return False
        quantized: list[str] = []
        factor = 1.0
        weight: tuple[str, int | None] | None = None  # (param, its channel axis)
        for i, name in enumerate(node.inputs):
            t = self.program.tensors[name]
            if name in activations:
                scale = self.choice.scales[name]
                factor *= scale
                quantized.append(self._quantize(name, scale))
            else:
                axis = _weight_axis(node.op, i, t.type.rank)
                weight = (name, axis)
                quantized.append(self._quantized_weight(t, axis))
        acc_name = self.fresh(f"{node.output}/acc")
        self.tensors[acc_name] = Tensor(acc_name, acc_type, "value", node.span)
        self.nodes.append(replace(node, inputs=tuple(quantized), output=acc_name))
        scale_name = self._dequant_scale(node.output, weight, factor)
        self.emit(OpNode("dequantize", (acc_name, scale_name), node.output, attrs, node.span), out)
        return True

    def _quantize(self, name: str, scale: float) -> str:
        """Source value ``name`` in int8 at ``scale`` (one quantize task per value). A value a
        view made (reshape, transpose) is the view of its operand quantized — per-tensor
        quantization commutes with moving elements — so the quantize stands right after the op
        that computed the elements, where a Cube's output path can apply it (requantization:
        ``dequant`` then ``quant`` as the int32 result leaves the unit)."""
        key = (name, "i8")
        if key in self.versions:
            return self.versions[key]
        producer = self.producers.get(name)
        if producer is not None and producer.op in VIEWS and movable(producer):
            source = self._quantize(producer.inputs[0], scale)
            shape = self.program.tensors[name].type.shape
            new = self.fresh(f"{name}/i8")
            self.tensors[new] = Tensor(new, TensorType(shape, "i8"), "value", producer.span)
            self.nodes.append(replace(producer, inputs=(source,), output=new))
            self.versions[key] = new
            return new
        now = self.current.get(name, name)
        t = self.tensors[now]
        scale_name = self.fresh(f"{name}/scale")
        self.tensors[scale_name] = Tensor(
            scale_name, TensorType((), "f32"), "const", t.span, value=float(scale)
        )
        new = self.fresh(f"{name}/i8")
        self.tensors[new] = Tensor(new, TensorType(t.type.shape, "i8"), "value", t.span)
        attrs = {"dtype": "i8"}
        self.nodes.append(OpNode("quantize", (now, scale_name), new, attrs, span=t.span))
        self.versions[key] = new
        return new

    def _quantized_weight(self, t: Tensor, axis: int | None) -> str:
        key = (t.name, "i8")
        if key not in self.versions:
            new = self.fresh(f"{t.name}/i8")
            derive = Derive(t.name, t.type, "quantize", axis)
            typed = TensorType(t.type.shape, "i8")
            self.tensors[new] = replace(t, name=new, type=typed, derive=derive)
            self.versions[key] = new
        return self.versions[key]

    def _dequant_scale(self, out: str, weight: tuple[str, int | None] | None, factor: float) -> str:
        """The scale that turns the int32 product into real values: the activations' scales
        times the weight's (per channel, made at load time) when a param is an operand."""
        name = self.fresh(f"{out}/deq")
        if weight is None:
            self.tensors[name] = Tensor(name, TensorType((), "f32"), "const", value=factor)
            return name
        source, axis = weight
        t = self.program.tensors[source]
        shape = () if axis is None else (t.type.shape[axis],)
        derive = Derive(source, t.type, "scale", axis, factor)
        self.tensors[name] = Tensor(
            name, TensorType(shape, "f32"), "param", t.span, display=name, derive=derive
        )
        return name


def _live(nodes: list[Node], keep: frozenset[str]) -> list[Node]:
    """``nodes`` without the ops whose results nothing reads any more (a view of a value that
    is now quantized at its source, say); ``keep`` are the names the program pins."""
    used = set(keep)
    live: list[Node] = []
    for node in reversed(nodes):
        if isinstance(node, OpNode) and movable(node) and node.op != "kernel":
            if node.output not in used:
                continue
            used.update(node.inputs)
            used.update(node.after)
        elif isinstance(node, OpNode):
            used.update(node.inputs)
            used.update(node.after)
        elif isinstance(node, CallbackNode):
            used.add(node.after)
        elif isinstance(node, HostCopyNode):
            used.add(node.tensor)
        live.append(node)
    return live[::-1]


def _infer(op_name: str, types: list[TensorType], attrs: Mapping) -> TensorType | None:
    """The type ``op_name`` gives operands of ``types``, or None when its rule refuses them."""
    op = lookup(op_name)
    if op is None:
        return None
    try:
        return op.infer(types, attrs)
    except OpError:
        return None


def _weight_axis(op: str, operand: int, rank: int) -> int | None:
    """The output-channel axis of a weight operand: a matmul's right operand's last axis, a
    conv2d weight's first; per tensor for a matmul's left operand or a vector."""
    if op == "conv2d" and operand == 1:
        return 0
    if op == "matmul" and operand == 1 and rank >= 2:
        return rank - 1
    return None
