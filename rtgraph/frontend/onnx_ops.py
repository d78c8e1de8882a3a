"""How each ONNX op becomes ``.rtg``: the walk over a graph's nodes (:class:`Translation`) and
one translator per op — here the elementwise and shape ops; :mod:`.onnx_layers` holds the CNN
layers', :mod:`.onnx_tensors` the transformer graphs' (:mod:`.onnx_import` joins them).

A translator takes the :class:`Translation` (which knows every value so far: a tensor's
language name, shape and dtype, or a constant's array) and the node, and returns the
expression of the node's first output, or ``None`` when the output is another value under a
new name (``Identity``, ``Dropout``). Constants a translator reads as data (a Reshape's shape,
Gemm's ``C``) it takes with :meth:`Translation.constant`; constants it reads as tensors become
params (:meth:`Translation.operand`).

Ops folded at import when every operand is a constant (:data:`FOLDS`) are computed in NumPy:
they only move shapes around, as the shape subgraphs of exported models do.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rtgraph.errors import InputError
from rtgraph.frontend.onnx_folds import FOLDS, axes_of
from rtgraph.frontend.onnx_graph import (
    NUMPY_DTYPE,
    TENSOR_DTYPES,
    Imported,
    NodeText,
    ints,
    num,
    rtg_name,
)

Translator = Callable[["Translation", Any], "str | None"]


class Translation:
    """The walk over one graph's nodes (see :mod:`.onnx_import`)."""

    def __init__(
        self,
        *,
        source: str,
        opset: int,
        nodes: NodeText,
        shapes: dict[str, tuple[tuple[int | str | None, ...], int]],
        dims: dict[str, int],
        onnx: Any,
        translators: Mapping[str, Translator],
    ) -> None:
        self.source = source
        self.translators = translators
        self.opset = opset
        self.nodes = nodes
        self.inferred = shapes
        self.dims = dims
        self.onnx = onnx
        self.taken: set[str] = set()
        self.name: dict[str, str] = {}  # ONNX value → language name of a tensor
        self.shape: dict[str, tuple[int, ...]] = {}
        self.dtype: dict[str, str] = {}
        self.const: dict[str, np.ndarray] = {}  # ONNX value → a constant's array
        self.params: dict[str, np.ndarray] = {}
        self.param_of: dict[tuple[str, str], str] = {}  # (constant, rewrite) → param name
        self.unusable: dict[str, str] = {}  # ONNX value → why no op may read it
        self.readers: dict[str, list[Any]] = {}  # ONNX value → the nodes reading it
        self.folded: set[str] = set()  # conv outputs a BatchNormalization was folded into
        self.declarations: list[str] = []
        self.body: list[str] = []
        self.inputs: dict[str, str] = {}
        self.index = 0  # the node being translated
        self.current: Any = None

    # --- declarations and the walk -------------------------------------------------------

    def declare(self, graph: Any) -> None:
        numpy_helper = self.onnx.numpy_helper
        for node in graph.node:
            for value in node.input:
                self.readers.setdefault(value, []).append(node)
        for value in graph.output:
            self.readers.setdefault(value.name, []).append(None)  # read by the host
        for init in graph.initializer:
            self.const[init.name] = numpy_helper.to_array(init)
        for value in graph.input:
            if value.name in self.const:
                continue
            t = value.type.tensor_type
            dtype = TENSOR_DTYPES.get(t.elem_type)
            if dtype is None:
                kind = self.onnx.TensorProto.DataType.Name(t.elem_type)
                raise InputError(
                    f"graph input '{value.name}' has element type {kind}, which rtgraph "
                    "cannot hold",
                    hint="rtgraph tensors are f32, f16, bf16, i8 or i32",
                )
            shape = []
            for d in t.shape.dim:
                if d.HasField("dim_value"):
                    shape.append(d.dim_value)
                elif d.dim_param and d.dim_param in self.dims:
                    shape.append(int(self.dims[d.dim_param]))
                else:
                    named = f"'{d.dim_param}'" if d.dim_param else "without a name"
                    raise InputError(
                        f"graph input '{value.name}' has a dynamic dimension {named} the "
                        "importer cannot bind",
                        hint="give its size: --dim NAME=SIZE (dims={'NAME': SIZE} from Python)",
                    )
            name = rtg_name(value.name, self.taken)
            self.name[value.name], self.shape[value.name] = name, tuple(shape)
            self.dtype[value.name] = dtype
            self.inputs[name] = value.name
            self.declarations.append(f"    input  {name} : {_type(dtype, shape)}")

    def node(self, index: int, node: Any) -> None:
        self.index, self.current = index, node
        op = node.op_type
        if op == "Constant":
            self.const[node.output[0]] = self._constant_attribute(node)
            return
        if op == "Shape" and node.input[0] in self.shape:  # a tensor's static shape
            self.const[node.output[0]] = np.array(self.shape[node.input[0]], dtype=np.int64)
            return
        if op in FOLDS and all(i in self.const for i in node.input if i):
            folded = FOLDS[op](self, [self.const[i] if i else None for i in node.input])
            for out, value in zip(node.output, folded, strict=False):
                self.const[out] = value
            return
        translate = self.translators.get(op)
        if translate is None:
            self.fail(
                f"op '{op}' (opset {self.opset}) has no translation to rtgraph",
                "docs/onnx.md lists the supported ops",
            )
        for extra in node.output[1:]:
            if extra:
                self.unusable[extra] = f"output {list(node.output).index(extra) + 1} of {op}"
        expr = translate(self, node)
        if expr is not None:  # None: the output is an operand under another name
            self.define(node.output[0], expr)

    def define(self, out: str, expr: str) -> None:
        """Value ``out`` of the current node as the statement ``name = expr``, its shape and
        dtype ONNX's inferred ones (a translator of several outputs defines the others)."""
        node = self.current
        self.unusable.pop(out, None)
        dims, elem = self.inferred.get(out, (None, 0))
        if dims is None or any(not isinstance(d, int) or d <= 0 for d in dims):
            self.fail(f"ONNX shape inference gives '{out}' no static shape ({dims})", None)
        name = rtg_name(out, self.taken)
        self.name[out] = name
        self.shape[out] = tuple(int(d) for d in dims)  # type: ignore[union-attr]
        self.dtype[out] = TENSOR_DTYPES.get(elem, self.dtype.get(node.input[0], "f32"))
        self.body.append(f"    {name} = {expr}  # {self._label()}")

    def let(self, expr: str, hint: str) -> str:
        """A statement ``name = expr`` for a value the current node computes on the way (one a
        translation reads twice); its name."""
        name = rtg_name(f"{self.current.output[0]}_{hint}", self.taken)
        self.body.append(f"    {name} = {expr}  # {self._label()}")
        return name

    def _label(self) -> str:
        node = self.current
        return f"{node.op_type} '{node.name}'" if node.name else node.op_type

    def finish(self, name: str, device: str, graph: Any) -> Imported:
        outputs: dict[str, str] = {}
        lines = []
        for value in graph.output:
            if value.name in self.const:
                self.index, self.current = len(graph.node) - 1, None
                raise InputError(f"graph output '{value.name}' is a constant: nothing computes it")
            rtg = self.tensor(value.name)
            outputs[rtg] = value.name
            lines.append(f"    output {rtg}")
        header = [
            f"# {os.path.basename(self.source)} (ONNX opset {self.opset}) as rtgraph's ONNX",
            "# importer wrote it: a statement per node, named after its output; the params hold",
            "# the model's weights.",
            f'device "{device}"',
            f"program {name}() {{",
        ]
        text = "\n".join([*header, *self.declarations, "", *self.body, *lines, "}"]) + "\n"
        return Imported(name, text, self.params, self.inputs, outputs)

    # --- what translators read ------------------------------------------------------------

    def fail(self, message: str, hint: str | None) -> None:
        raise InputError(message, span=self.nodes.span(self.index), hint=hint)

    def attr(self, node: Any, name: str, default: Any = None) -> Any:
        for a in node.attribute:
            if a.name == name:
                return self.onnx.helper.get_attribute_value(a)
        return default

    def tensor(self, value: str) -> str:
        """The language name of tensor ``value`` (a constant becomes a param)."""
        if value in self.unusable:
            self.fail(f"'{value}' ({self.unusable[value]}) has no rtgraph equivalent", None)
        if value in self.const:
            return self.param(value, self.const[value])
        if value not in self.name:
            self.fail(f"'{value}' is read before any node computes it", None)
        return self.name[value]

    def operand(self, node: Any, i: int) -> str:
        return self.tensor(node.input[i])

    def param(self, value: str, array: np.ndarray, rewrite: str = "") -> str:
        """A param holding ``array`` (constant ``value`` after ``rewrite``), declared once."""
        key = (value, rewrite)
        if key not in self.param_of:
            dtype = _array_dtype(array)
            if dtype is None:
                self.fail(
                    f"constant '{value}' of {array.dtype} is read as a tensor",
                    "rtgraph tensors are f32, f16, bf16, i8 or i32",
                )
            name = rtg_name(value + (f"_{rewrite}" if rewrite else ""), self.taken)
            self.param_of[key] = name
            # (np.ascontiguousarray would make a rank-0 constant rank 1)
            self.params[name] = np.array(array, dtype=NUMPY_DTYPE[dtype], order="C")
            self.declarations.append(f"    param  {name} : {_type(dtype, array.shape)}")
        return self.param_of[key]

    def constant(self, node: Any, i: int, what: str) -> np.ndarray:
        """The array of operand ``i``, which must be a constant (``what`` says which)."""
        value = node.input[i] if i < len(node.input) else ""
        if value not in self.const:
            self.fail(
                f"{node.op_type}: {what} must be a constant here, and '{value}' is computed",
                "rtgraph compiles static shapes: fold the shape computation into constants",
            )
        return self.const[value]

    def shape_of(self, node: Any, i: int) -> tuple[int, ...]:
        value = node.input[i]
        if value in self.const:
            return tuple(self.const[value].shape)
        self.tensor(value)  # fails if no op may read it
        return self.shape[value]

    def alias(self, node: Any, i: int = 0) -> None:
        """The node's first output is operand ``i`` under another name."""
        source, out = node.input[i], node.output[0]
        if source in self.const:
            self.const[out] = self.const[source]
        else:
            self.tensor(source)
            self.name[out], self.shape[out] = self.name[source], self.shape[source]
            self.dtype[out] = self.dtype[source]

    def _constant_attribute(self, node: Any) -> np.ndarray:
        for a in node.attribute:
            if a.name == "value":
                return self.onnx.numpy_helper.to_array(a.t)
            if a.name in ("value_float", "value_int"):
                return np.array(self.onnx.helper.get_attribute_value(a))
            if a.name in ("value_floats", "value_ints"):
                return np.array(list(self.onnx.helper.get_attribute_value(a)))
        self.fail("Constant: only tensor, float and int values are supported", None)
        raise AssertionError


def _array_dtype(array: np.ndarray) -> str | None:
    if array.dtype == np.float32 or array.dtype == np.float64:
        return "f32"  # ONNX doubles are held in f32
    return {np.dtype(np.float16): "f16", np.dtype(np.int8): "i8", np.dtype(np.int32): "i32"}.get(
        array.dtype
    )


def _type(dtype: str, shape: Sequence[int]) -> str:
    return f"{dtype}[{', '.join(str(int(d)) for d in shape)}]" if len(shape) else dtype


# --- translators ----------------------------------------------------------------------------


def _unary(op: str) -> Translator:
    return lambda t, node: f"{op}({t.operand(node, 0)})"


def _binary(symbol: str) -> Translator:
    def translate(t: Translation, node: Any) -> str:
        return f"{_term(t, node, 0)} {symbol} {_term(t, node, 1)}"

    return translate


def _term(t: Translation, node: Any, i: int) -> str:
    """Operand ``i`` of an elementwise op: a one-element constant that changes no shape is
    written as a number (weak typing keeps the tensor's dtype)."""
    value = node.input[i]
    other = t.shape_of(node, 1 - i)
    if value in t.const:
        array = t.const[value]
        if array.size == 1 and array.ndim <= len(other) and array.dtype.kind == "f":
            return num(array.reshape(()))
    if i == 1 and t.opset < 7 and t.attr(node, "broadcast", 0):
        return _legacy_broadcast(t, node, len(other))
    return t.operand(node, i)


def _legacy_broadcast(t: Translation, node: Any, rank: int) -> str:
    """Operand B of a binary op before opset 7 (``broadcast = 1``): its dims line up with A's
    from ``axis`` on (default: A's trailing ones), so it gets trailing 1s to broadcast."""
    shape = t.shape_of(node, 1)
    axis = int(t.attr(node, "axis", rank - len(shape)))
    ones = rank - (axis % rank if rank else 0) - len(shape)
    if ones <= 0:
        return t.operand(node, 1)
    aligned = [*shape, *[1] * ones]
    value = node.input[1]
    if value in t.const:
        return t.param(value, t.const[value].reshape(aligned), "aligned")
    return f"reshape({t.operand(node, 1)}, {ints(aligned)})"


def _negative_part(t: Translation, node: Any, scale: str) -> str:
    """``relu(x) + f(min(x, 0))`` for the activations that differ from ReLU below 0 only."""
    x = t.operand(node, 0)
    return f"relu({x}) + {scale.format(neg=f'minimum({x}, 0.0)')}"


def _leaky_relu(t: Translation, node: Any) -> str:
    return _negative_part(t, node, "{neg} * " + num(float(t.attr(node, "alpha", 0.01))))


def _prelu(t: Translation, node: Any) -> str:
    x, slope = t.shape_of(node, 0), t.shape_of(node, 1)
    if t.opset < 7 and len(slope) == 1 and len(x) > 2 and slope[0] == x[1]:
        value = node.input[1]  # before opset 7 a [C] slope is per channel (axis 1)
        aligned = [slope[0], *[1] * (len(x) - 2)]
        if value in t.const:
            s = t.param(value, t.const[value].reshape(aligned), "aligned")
        else:
            s = f"reshape({t.operand(node, 1)}, {ints(aligned)})"
    else:
        s = t.operand(node, 1)
    return _negative_part(t, node, "{neg} * " + s)


def _elu(t: Translation, node: Any) -> str:
    alpha = num(float(t.attr(node, "alpha", 1.0)))
    return _negative_part(t, node, "(exp({neg}) - 1.0) * " + alpha)


def _selu(t: Translation, node: Any) -> str:
    alpha = float(t.attr(node, "alpha", 1.67326319217681884765625))
    gamma = float(t.attr(node, "gamma", 1.05070102214813232421875))
    elu = _negative_part(t, node, "(exp({neg}) - 1.0) * " + num(alpha))
    return f"({elu}) * {num(gamma)}"


def _clip(t: Translation, node: Any) -> str:
    expr = t.operand(node, 0)
    for i, (name, op) in enumerate((("min", "maximum"), ("max", "minimum")), 1):
        if t.opset < 11:
            bound = t.attr(node, name, None)
            if bound is not None:
                expr = f"{op}({expr}, {num(float(bound))})"
        elif i < len(node.input) and node.input[i]:
            value = node.input[i]
            if value in t.const and t.const[value].size == 1:
                expr = f"{op}({expr}, {num(float(t.const[value].reshape(())))})"
            else:
                expr = f"{op}({expr}, {t.operand(node, i)})"
    return expr


def _log_softmax(t: Translation, node: Any) -> str:
    """``d - log(sum(exp(d)))`` with ``d = x - max(x)``, along the axis (before opset 13: over
    the input flattened from ``axis`` on, as Softmax)."""
    shape = t.shape_of(node, 0)
    rank = len(shape)
    axis = int(t.attr(node, "axis", 1 if t.opset < 13 else -1)) % rank
    x, flat = t.operand(node, 0), t.opset < 13 and axis != rank - 1
    if flat:
        rows, cols = int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))
        x, axis = t.let(f"reshape({x}, [{rows}, {cols}])", "rows"), 1
    d = t.let(f"{x} - reduce_max({x}, axis = {axis}, keepdims = true)", "shifted")
    expr = f"{d} - log(reduce_sum(exp({d}), axis = {axis}, keepdims = true))"
    return f"reshape({expr}, {ints(shape)})" if flat else expr


def _alias(t: Translation, node: Any) -> None:
    """Identity, and Dropout at inference: the input under the output's name (Dropout's mask
    output, if read, is refused)."""
    t.alias(node)
    return None


def _matmul(t: Translation, node: Any) -> str:
    return f"{t.operand(node, 0)} @ {t.operand(node, 1)}"


def _sum(t: Translation, node: Any) -> str:
    return " + ".join(t.operand(node, i) for i in range(len(node.input)))


def _softmax(t: Translation, node: Any) -> str:
    shape = t.shape_of(node, 0)
    rank = len(shape)
    axis = int(t.attr(node, "axis", 1 if t.opset < 13 else -1))
    axis = axis + rank if axis < 0 else axis
    x = t.operand(node, 0)
    if t.opset >= 13 or axis == rank - 1:
        return f"softmax({x}, axis = {axis - rank})"
    # before opset 13: softmax over the input flattened to [prod(:axis), prod(axis:)]
    rows, cols = int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))
    return f"reshape(softmax(reshape({x}, [{rows}, {cols}]), axis = -1), {ints(shape)})"


def _reshape(t: Translation, node: Any) -> str:
    shape = t.shape_of(node, 0)
    if t.opset < 5:
        target = list(t.attr(node, "shape", []))
    else:
        target = [int(v) for v in t.constant(node, 1, "the shape")]
    out = [
        shape[k] if v == 0 and not t.attr(node, "allowzero", 0) else v for k, v in enumerate(target)
    ]
    return f"reshape({t.operand(node, 0)}, {ints(out)})"


def _flatten(t: Translation, node: Any) -> str:
    shape = t.shape_of(node, 0)
    axis = int(t.attr(node, "axis", 1))
    axis = axis + len(shape) if axis < 0 else axis
    rows, cols = int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))
    return f"reshape({t.operand(node, 0)}, [{rows}, {cols}])"


def _squeeze_shape(t: Translation, node: Any) -> list[int]:
    shape = list(t.shape_of(node, 0))
    axes = axes_of(t, node)
    if node.op_type == "Unsqueeze":
        rank = len(shape) + len(axes)
        for a in sorted(a + rank if a < 0 else a for a in axes):
            shape.insert(a, 1)
        return shape
    rank = len(shape)
    drop = (
        {a + rank if a < 0 else a for a in axes}
        if axes
        else {k for k, d in enumerate(shape) if d == 1}
    )
    return [d for k, d in enumerate(shape) if k not in drop]


def _squeeze(t: Translation, node: Any) -> str:
    return f"reshape({t.operand(node, 0)}, {ints(_squeeze_shape(t, node))})"


def _transpose(t: Translation, node: Any) -> str:
    rank = len(t.shape_of(node, 0))
    perm = list(t.attr(node, "perm", list(reversed(range(rank)))))
    return f"transpose({t.operand(node, 0)}, {ints(perm)})"


def _concat(t: Translation, node: Any) -> str:
    rank = len(t.shape_of(node, 0))
    axis = int(t.attr(node, "axis", 1))
    axis = axis + rank if axis < 0 else axis
    parts = ", ".join(t.operand(node, i) for i in range(len(node.input)))
    return f"concat({parts}, axis = {axis})"


def _zero_point(t: Translation, node: Any, i: int) -> str | None:
    """Optional operand ``i``, a zero point: None when absent or a constant of zeros."""
    if i >= len(node.input) or not node.input[i]:
        return None
    value = node.input[i]
    if value in t.const and not t.const[value].any():
        return None
    return t.operand(node, i)


def _quantize_args(t: Translation, node: Any, op: str) -> str:
    """``op(x, scale[, zero_point], axis = a)`` of QuantizeLinear / DequantizeLinear."""
    if t.attr(node, "block_size", 0):
        t.fail(f"{node.op_type}: blocked quantization (block_size) has no rtgraph equivalent", None)
    args = [t.operand(node, 0), t.operand(node, 1)]
    zero = _zero_point(t, node, 2)
    if zero is not None:
        args.append(zero)
    if len(t.shape_of(node, 1)):  # a per-channel scale: along ONNX's axis (default 1)
        args.append(f"axis = {int(t.attr(node, 'axis', 1))}")
    return f"{op}({', '.join(args)})"


def _quantize_linear(t: Translation, node: Any) -> str:
    """QuantizeLinear to int8 (its zero point's type, or ``output_dtype``): ``quantize``."""
    _, elem = t.inferred.get(node.output[0], (None, 0))
    if elem != 3:  # TensorProto.INT8
        kind = t.onnx.TensorProto.DataType.Name(elem) if elem else "an unknown type"
        t.fail(
            f"QuantizeLinear to {kind}: rtgraph quantizes to int8 only",
            "give it an int8 zero point (without one, ONNX quantizes to uint8)",
        )
    return _quantize_args(t, node, "quantize")


def _matmul_integer(t: Translation, node: Any) -> str:
    """MatMulInteger of int8 operands without zero points: ``a @ b`` (an i32 product)."""
    if _zero_point(t, node, 2) is not None or _zero_point(t, node, 3) is not None:
        t.fail(
            "MatMulInteger with a nonzero zero point: rtgraph's int8 matmul is symmetric",
            "quantize the operands symmetrically (zero points of 0)",
        )
    return f"{t.operand(node, 0)} @ {t.operand(node, 1)}"


TRANSLATORS: dict[str, Translator] = {
    "MatMul": _matmul,
    "MatMulInteger": _matmul_integer,
    "QuantizeLinear": _quantize_linear,
    "DequantizeLinear": lambda t, node: _quantize_args(t, node, "dequantize"),
    "Add": _binary("+"),
    "Sub": _binary("-"),
    "Mul": _binary("*"),
    "Div": _binary("/"),
    "Sum": _sum,
    "Relu": _unary("relu"),
    "Sigmoid": _unary("sigmoid"),
    "Tanh": _unary("tanh"),
    "Exp": _unary("exp"),
    "Log": _unary("log"),
    "Sqrt": _unary("sqrt"),
    "Neg": _unary("neg"),
    "Softmax": _softmax,
    "Reshape": _reshape,
    "Flatten": _flatten,
    "Squeeze": _squeeze,
    "Unsqueeze": _squeeze,
    "Transpose": _transpose,
    "Concat": _concat,
    "Dropout": _alias,
    "Identity": _alias,
    "LeakyRelu": _leaky_relu,
    "PRelu": _prelu,
    "Elu": _elu,
    "Selu": _selu,
    "Softplus": lambda t, node: f"log(exp({t.operand(node, 0)}) + 1.0)",
    "Abs": lambda t, node: f"maximum({t.operand(node, 0)}, neg({t.operand(node, 0)}))",
    "Clip": _clip,
    "LogSoftmax": _log_softmax,
}
