"""How each ONNX op becomes ``.rtg``: one translator per op, and the walk that applies them.

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
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rtgraph.errors import InputError
from rtgraph.frontend.onnx_folds import FOLDS, axes_of
from rtgraph.frontend.onnx_graph import NUMPY_DTYPE, TENSOR_DTYPES, Imported, NodeText, rtg_name

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
    ) -> None:
        self.source = source
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
        translate = TRANSLATORS.get(op)
        if translate is None:
            self.fail(
                f"op '{op}' (opset {self.opset}) has no translation to rtgraph",
                "docs/onnx.md lists the supported ops",
            )
        for extra in node.output[1:]:
            if extra:
                self.unusable[extra] = f"output {list(node.output).index(extra) + 1} of {op}"
        expr = translate(self, node)
        out = node.output[0]
        if expr is None:  # the output is an operand under another name
            return
        dims, elem = self.inferred.get(out, (None, 0))
        if dims is None or any(not isinstance(d, int) or d <= 0 for d in dims):
            self.fail(f"ONNX shape inference gives '{out}' no static shape ({dims})", None)
        name = rtg_name(out, self.taken)
        self.name[out] = name
        self.shape[out] = tuple(int(d) for d in dims)  # type: ignore[union-attr]
        self.dtype[out] = TENSOR_DTYPES.get(elem, self.dtype.get(node.input[0], "f32"))
        label = f"{op} '{node.name}'" if node.name else op
        self.body.append(f"    {name} = {expr}  # {label}")

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
            self.params[name] = np.ascontiguousarray(array, dtype=NUMPY_DTYPE[dtype])
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


def _ints(values: Sequence[int]) -> str:
    return f"[{', '.join(str(int(v)) for v in values)}]"


def _num(x: float) -> str:
    text = repr(float(x))
    return text if "e" in text or "." in text else f"{text}.0"


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
            return _num(array.reshape(()))
    return t.operand(node, i)


def _alias(t: Translation, node: Any) -> None:
    """Identity, and Dropout at inference: the input under the output's name (Dropout's mask
    output, if read, is refused)."""
    t.alias(node)
    return None


def _pads(t: Translation, node: Any, rank: int) -> list[int]:
    if t.attr(node, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        t.fail(f"{node.op_type}: auto_pad is not supported", "export with explicit pads")
    pads = list(t.attr(node, "pads", [0] * (2 * rank)))
    begin, end = pads[:rank], pads[rank:]
    if begin != end:
        t.fail(
            f"{node.op_type}: asymmetric padding {pads} is not supported",
            "rtgraph pads both sides of an axis alike",
        )
    return begin


def _conv(t: Translation, node: Any) -> str:
    w = t.shape_of(node, 1)
    if len(w) != 4:
        t.fail("Conv: only 2-D convolutions (NCHW) are supported", None)
    if any(d != 1 for d in t.attr(node, "dilations", [1, 1])):
        t.fail("Conv: dilations other than 1 are not supported", None)
    stride = list(t.attr(node, "strides", [1, 1]))
    pad = _pads(t, node, 2)
    groups = int(t.attr(node, "group", 1))
    extra = f", groups = {groups}" if groups != 1 else ""
    folded = _fold_batchnorm(t, node)
    weights = t.operand(node, 1) if folded is None else folded[0]
    expr = (
        f"conv2d({t.operand(node, 0)}, {weights}, stride = {_ints(stride)}, "
        f"padding = {_ints(pad)}{extra})"
    )
    if folded is not None:
        expr = f"{expr} + {folded[1]}"
    elif len(node.input) > 2 and node.input[2]:
        bias = node.input[2]
        if bias in t.const:
            b = t.param(bias, t.const[bias].reshape(1, -1, 1, 1), "nchw")
        else:
            b = f"reshape({t.tensor(bias)}, [1, {w[0]}, 1, 1])"
        expr = f"{expr} + {b}"
    return expr


def _fold_batchnorm(t: Translation, conv: Any) -> tuple[str, str] | None:
    """When the conv's only reader is an inference BatchNormalization and every weight of both
    is a constant, the two as one conv, as ATC converts them: weights W·s and bias
    (b − mean)·s + beta with s = gamma / sqrt(var + eps), computed in float64 at import. The
    names of the folded weight and bias params, or None when it does not apply."""
    out = conv.output[0]
    readers = t.readers.get(out, [])
    if len(readers) != 1 or readers[0] is None or readers[0].op_type != "BatchNormalization":
        return None
    bn = readers[0]
    bias = conv.input[2] if len(conv.input) > 2 else ""
    needed = [conv.input[1], *bn.input[1:5], *([bias] if bias else [])]
    if t.attr(bn, "training_mode", 0) or not all(v in t.const for v in needed):
        return None
    gamma, beta, mean, var = (t.const[v].astype(np.float64) for v in bn.input[1:5])
    scale = gamma / np.sqrt(var + float(t.attr(bn, "epsilon", 1e-5)))
    w = t.const[conv.input[1]].astype(np.float64) * scale[:, None, None, None]
    b = t.const[bias].astype(np.float64) if bias else np.zeros_like(scale)
    shift = ((b - mean) * scale + beta).reshape(1, -1, 1, 1)
    t.folded.add(out)
    name = bn.output[0]
    weights = t.param(name + "_w", w.astype(np.float32))
    return weights, t.param(name + "_b", shift.astype(np.float32))


def _gemm(t: Translation, node: Any) -> str:
    alpha = float(t.attr(node, "alpha", 1.0))
    beta = float(t.attr(node, "beta", 1.0))
    ops = []
    for i, flag in ((0, "transA"), (1, "transB")):
        transposed = bool(t.attr(node, flag, 0))
        value = node.input[i]
        if value in t.const and transposed:
            ops.append(t.param(value, t.const[value].T, "t"))
        elif transposed:
            ops.append(f"transpose({t.operand(node, i)}, [1, 0])")
        else:
            ops.append(t.operand(node, i))
    expr = f"{ops[0]} @ {ops[1]}"
    if alpha != 1.0:
        expr = f"({expr}) * {_num(alpha)}"
    if len(node.input) > 2 and node.input[2] and beta != 0.0:
        c = node.input[2]
        if c in t.const:
            term = t.param(c, t.const[c] * beta, "" if beta == 1.0 else "scaled")
        else:
            term = t.tensor(c) if beta == 1.0 else f"{t.tensor(c)} * {_num(beta)}"
        expr = f"{expr} + {term}"
    return expr


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
    return f"reshape(softmax(reshape({x}, [{rows}, {cols}]), axis = -1), {_ints(shape)})"


def _reshape(t: Translation, node: Any) -> str:
    shape = t.shape_of(node, 0)
    if t.opset < 5:
        target = list(t.attr(node, "shape", []))
    else:
        target = [int(v) for v in t.constant(node, 1, "the shape")]
    out = [
        shape[k] if v == 0 and not t.attr(node, "allowzero", 0) else v for k, v in enumerate(target)
    ]
    return f"reshape({t.operand(node, 0)}, {_ints(out)})"


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
    return f"reshape({t.operand(node, 0)}, {_ints(_squeeze_shape(t, node))})"


def _transpose(t: Translation, node: Any) -> str:
    rank = len(t.shape_of(node, 0))
    perm = list(t.attr(node, "perm", list(reversed(range(rank)))))
    return f"transpose({t.operand(node, 0)}, {_ints(perm)})"


def _concat(t: Translation, node: Any) -> str:
    rank = len(t.shape_of(node, 0))
    axis = int(t.attr(node, "axis", 1))
    axis = axis + rank if axis < 0 else axis
    parts = ", ".join(t.operand(node, i) for i in range(len(node.input)))
    return f"concat({parts}, axis = {axis})"


def _batchnorm(t: Translation, node: Any) -> str | None:
    if node.input[0] in t.folded:  # folded into the conv before it
        t.alias(node)
        return None
    if t.attr(node, "training_mode", 0):
        t.fail("BatchNormalization: training mode is not supported", "export for inference")
    eps = float(t.attr(node, "epsilon", 1e-5))
    args = ", ".join(t.operand(node, i) for i in range(5))
    return f"batchnorm({args}, eps = {_num(eps)})"


def _pool(kind: str) -> Translator:
    def translate(t: Translation, node: Any) -> str:
        if t.attr(node, "ceil_mode", 0):
            t.fail(f"{node.op_type}: ceil_mode is not supported", "export with ceil_mode = 0")
        if any(d != 1 for d in t.attr(node, "dilations", [1, 1])):
            t.fail(f"{node.op_type}: dilations other than 1 are not supported", None)
        if kind == "max" and t.attr(node, "storage_order", 0):
            t.fail("MaxPool: column-major storage_order is not supported", None)
        kernel = list(t.attr(node, "kernel_shape", []))
        if len(kernel) != 2:
            t.fail(f"{node.op_type}: only 2-D pooling (NCHW) is supported", None)
        stride = list(t.attr(node, "strides", [1, 1]))
        pad = _pads(t, node, 2)
        if kind == "avg" and any(pad) and not t.attr(node, "count_include_pad", 0):
            t.fail(
                "AveragePool: padding left out of the average (count_include_pad = 0) is not "
                "supported",
                "rtgraph's avg pool counts padding as zeros (count_include_pad = 1)",
            )
        return (
            f"pool2d({t.operand(node, 0)}, kind = {kind}, kernel = {_ints(kernel)}, "
            f"stride = {_ints(stride)}, padding = {_ints(pad)})"
        )

    return translate


def _global_pool(kind: str) -> Translator:
    op = "reduce_mean" if kind == "avg" else "reduce_max"
    return lambda t, node: f"{op}({t.operand(node, 0)}, axis = [2, 3], keepdims = true)"


TRANSLATORS: dict[str, Translator] = {
    "Conv": _conv,
    "Gemm": _gemm,
    "MatMul": _matmul,
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
    "BatchNormalization": _batchnorm,
    "MaxPool": _pool("max"),
    "AveragePool": _pool("avg"),
    "GlobalAveragePool": _global_pool("avg"),
    "GlobalMaxPool": _global_pool("max"),
    "Dropout": _alias,
    "Identity": _alias,
}
