"""Params made when a program is loaded, from the data supplied for a param of the source program:
the weight conversion a deployment tool does offline (ATC storing f16 weights of an f32 model,
AMCT quantizing them to int8 with one scale per output channel).

The precision pass (:mod:`rtgraph.compiler.optimizer.choose_precision`) retypes a param — or adds
one — and says with a :class:`Derive` how its value is made from the value the user supplies (or
the seed generates) for the param the *source* program declared. The user's interface stays the
source program's: they supply ``w`` as declared (say f32) and the compiled program holds ``w`` as
int8 plus ``w/scale``; the interpreter and the emulator both make those values with
:func:`derived_value`, so they agree bit for bit.

Rules:

* ``convert`` — the source's value rounded once to the param's dtype (f32 → f16, or widened);
* ``quantize`` — symmetric int8: ``q = clip(rint(w / s), -127, 127)`` with ``s`` from
  :func:`weight_scales` (per channel along ``axis``, per tensor when ``axis`` is None), rounding
  half to even as ONNX's QuantizeLinear does;
* ``scale`` — those scales times ``factor`` (an activation's scale, so that one multiply of the
  int32 product gives the real value: the dequantize scale of a Cube's output path), in the
  param's (float) dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from rtgraph.dtypes import DTYPES, TensorType, to_value
from rtgraph.errors import InputError

Rule = Literal["convert", "quantize", "scale"]
RULES: tuple[Rule, ...] = ("convert", "quantize", "scale")

#: The largest magnitude of a symmetric int8 value (-128 is left out so that the range is
#: symmetric and negation cannot overflow, as AMCT and TensorRT do for weights).
QMAX = 127


@dataclass(frozen=True)
class Derive:
    """How a param's value is made at load time from the value of the source program's param
    ``source`` (declared with ``source_type``)."""

    source: str
    source_type: TensorType
    rule: Rule
    axis: int | None = None
    factor: float = 1.0


def weight_scales(w: np.ndarray, axis: int | None) -> np.ndarray:
    """The symmetric int8 scale of ``w``: ``max |w| / 127`` over the whole tensor (``axis``
    None, a 0-d array) or over every axis but ``axis`` (one per channel), in f32; a channel of
    zeros gets scale 1 (its values quantize to 0 either way). A subnormal scale is rounded up,
    so that every value is within half a step of its dequantized form."""
    a = np.abs(np.asarray(w, dtype=np.float32))
    if axis is None:
        m = np.asarray(a.max() if a.size else np.float32(0), dtype=np.float32)
    else:
        others = tuple(d for d in range(a.ndim) if d != axis % a.ndim)
        m = a.max(axis=others) if a.size else np.zeros(a.shape[axis], np.float32)
    s = (m / np.float32(QMAX)).astype(np.float32)
    # A subnormal scale keeps few bits: rounded down, max |w| / s could pass 127.5 and clip by
    # more than half a step. Rounded up it cannot (normal scales are within 2**-24 already).
    low = (s < np.finfo(np.float32).tiny) & (s.astype(np.float64) * QMAX < m)
    s = np.where(low, np.nextafter(s, np.float32(np.inf)), s)
    return np.where(s > 0, s, np.float32(1)).astype(np.float32)


def quantized(w: np.ndarray, scales: np.ndarray, axis: int | None) -> np.ndarray:
    """``w`` in int8 with ``scales`` (from :func:`weight_scales`): ``clip(rint(w / s))``,
    computed in f32, halves to even."""
    w32 = np.asarray(w, dtype=np.float32)
    s = scales
    if axis is not None and w32.ndim:
        shape = [1] * w32.ndim
        shape[axis % w32.ndim] = -1
        s = scales.reshape(shape)
    return np.clip(np.rint(w32 / s), -QMAX, QMAX).astype(np.int8)


def derived_value(derive: Derive, source: np.ndarray, target: TensorType, name: str) -> np.ndarray:
    """The value form of the param ``name`` (of type ``target``) made by ``derive`` from its
    source's value ``source`` (value form of ``derive.source_type``). Non-finite weights cannot
    be quantized: an :class:`~rtgraph.errors.InputError` naming the source param."""
    if derive.rule == "convert":
        with np.errstate(over="ignore", invalid="ignore"):
            return to_value(source, target.dtype)
    if not np.isfinite(np.asarray(source, dtype=np.float32)).all():
        raise InputError(
            f"param '{derive.source}' holds a non-finite value: its int8 form '{name}' needs "
            "finite weights",
            hint="supply finite weights, or compile with --precision keep (or f16)",
        )
    scales = weight_scales(source, derive.axis)
    if derive.rule == "quantize":
        return quantized(source, scales, derive.axis)
    value = scales.astype(np.float64) * derive.factor
    return to_value(np.broadcast_to(value, target.shape), target.dtype)


def describe(derive: Derive) -> str:
    """The rule as the IR listing shows it: ``quantize(w: f32[768, 768], axis=1)``."""
    args = [f"{derive.source}: {derive.source_type}"]
    if derive.rule != "convert" and derive.axis is not None:
        args.append(f"axis={derive.axis}")
    if derive.rule == "scale" and derive.factor != 1.0:
        args.append(f"factor={derive.factor!r}")
    return f"{derive.rule}({', '.join(args)})"


def derive_problem(derive: Derive, target: TensorType) -> str | None:
    """What makes ``derive`` unable to make a value of type ``target`` (a rule, axis, factor,
    shape or dtype :func:`derived_value` cannot use), or None: the check a loaded stream
    program's ``derive`` passes before any value is made."""
    source = derive.source_type
    if derive.rule not in RULES:
        return f"unknown rule {derive.rule!r} (the rules are: {', '.join(RULES)})"
    if source.dtype not in DTYPES or target.dtype not in DTYPES:
        return f"unknown dtype in {source} → {target}"
    if not math.isfinite(derive.factor):
        return f"factor {derive.factor!r} is not finite"
    axis = derive.axis
    if axis is not None and derive.rule != "convert" and not -source.rank <= axis < source.rank:
        return f"axis {axis} is not an axis of the source's {source}"
    if derive.rule == "convert":
        widened = not DTYPES[source.dtype].is_float and (
            DTYPES[target.dtype].itemsize >= DTYPES[source.dtype].itemsize
        )
        if not (DTYPES[target.dtype].is_float or widened):
            return f"convert makes a float or a wider integer, not {source.dtype} → {target.dtype}"
    elif not DTYPES[source.dtype].is_float:
        return f"{derive.rule} reads float weights, not {source.dtype}"
    if derive.rule == "quantize" and target.dtype != "i8":
        return f"quantize makes i8, not {target.dtype}"
    if derive.rule == "scale":
        if not DTYPES[target.dtype].is_float:
            return f"scale makes a float, not {target.dtype}"
        scales = () if axis is None else (source.shape[axis],)
        if not _broadcasts(scales, target.shape):
            count = f"{scales[0]} scales (one per channel)" if scales else "one scale"
            return f"its {count} cannot fill the param's {target}"
    elif source.shape != target.shape:
        return f"{derive.rule} keeps the shape: the source is {source}, the param {target}"
    return None


def _broadcasts(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    try:
        return np.broadcast_shapes(shape, target) == tuple(target)
    except ValueError:
        return False
