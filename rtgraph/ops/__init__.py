"""Ops: the registry (what an op is) and the op families (every op of the language).

:mod:`.registry` defines :class:`OpDef` and holds the registered ops; :mod:`.rules` holds what
the families share (operand checks, attribute values, kernel helpers, cost formulas). Each
family module declares its ops as ``OPS``, and importing this package registers them, family by
family in the order of :data:`FAMILIES` (the order of the language spec, and of
:func:`all_ops`). :func:`op_table` prints them all, as ``rtgraph ops`` and docs/language.md
show them.

Precision policy (what every kernel computes in, so the emulator and the reference interpreter
agree bit for bit and both behave like a device):

* f16 and bf16 operands are upcast to f32 and the result is rounded once to the output dtype
  (by :func:`run_kernel`). ``matmul`` accumulates in f32, as a Cube unit does; this is also
  NumPy's only fast path (its float16 matmul has no BLAS behind it).
* f32 computes in f32: constants are f32 scalars, sums accumulate in f32 (NumPy's pairwise
  summation), ``exp`` of f32 stays f32. The exception is ``conv2d``, which accumulates every
  float dtype in f64 and rounds once, so an output channel's value does not depend on where
  BLAS's blocking puts its column (:func:`.cube.accumulator`).
* Integers compute in int64 and wrap (two's complement) to the output type: ``add``, ``mul``
  and ``reduce_sum`` of i8/i32 overflow like the hardware's integer units. ``matmul`` and
  ``conv2d`` of i8 operands return i32, as a Cube accumulates int8 products in i32 (exact
  until the sum passes 2**31, then wrapping); of i32 operands, i32. Integer ``div``
  truncates toward zero and ``x / 0`` is 0 (no trap, no crash); ``reduce_mean`` and
  ``pool2d(kind=avg)`` of integers truncate toward zero as well.
  ``scale`` of an integer tensor multiplies in f64, truncates toward zero and saturates
  (NaN, from ``0 * inf``, is 0).
* ``quantize`` divides in f32, rounds half to even, adds the zero point and saturates (NaN is
  the zero point); ``dequantize`` computes ``(q - zero_point) * scale`` in f64 and rounds
  once (:mod:`.quant`).
* ``cast`` from float to integer truncates toward zero, saturates at the integer range and maps
  NaN to 0; integer to integer wraps; int to bf16 rounds once (round-to-odd to f32 first).
* Transcendental ops and normalisations (``exp log sqrt rsqrt tanh sigmoid gelu silu erf
  pow``, ``softmax``, ``layernorm``, ``rmsnorm``, ``groupnorm``, ``lrn``) need a
  floating-point operand.
* Floating-point results follow IEEE: overflow is inf, ``log(-1)`` is NaN, no warnings.
  ``gelu`` is the tanh approximation (the device kernels of common NPU libraries offer it);
  ``erf`` is Python's ``math.erf`` per element in f64, rounded once (NumPy has no vectorised
  erf), so the exact GELU is ``0.5 * x * (1 + erf(x / sqrt(2)))``.
"""

from rtgraph.ops import (
    comm,
    copies,
    cube,
    elementwise,
    fused,
    layout,
    movement,
    quant,
    reductions,
    synthetic,
)
from rtgraph.ops.registry import (
    REQUIRED,
    AttrSpec,
    Cost,
    OpDef,
    OpError,
    all_ops,
    fusion_of,
    language_op,
    language_ops,
    lookup,
    register,
    run_kernel,
)
from rtgraph.ops.table import op_table

#: The op families, in the order the language spec lists them: Cube, Vector elementwise,
#: quantization, reductions and normalisations, data movement and windows, layout, DMA, the
#: collectives (and the transfers the compiler makes of them), the synthetic kernel; then the
#: ops only the compiler makes (the fused Vector kernel).
FAMILIES = (
    cube,
    elementwise,
    quant,
    reductions,
    movement,
    layout,
    copies,
    comm,
    synthetic,
    fused,
)


def _register_families() -> None:
    for family in FAMILIES:
        for op in family.OPS:
            register(op)


_register_families()

__all__ = [
    "FAMILIES",
    "REQUIRED",
    "AttrSpec",
    "Cost",
    "OpDef",
    "OpError",
    "all_ops",
    "fusion_of",
    "language_op",
    "language_ops",
    "lookup",
    "op_table",
    "run_kernel",
]
