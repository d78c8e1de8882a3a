"""The data of inputs and params: seeded values for those not supplied, checks for those that are.

Every generated tensor's values depend only on the seed and the tensor's name, so the reference
interpreter, the emulator and a re-run all see the same numbers whatever order they ask in.
Params are scaled by 1/sqrt(fan-in) so that deep chains of matmuls stay in f16 range.

Supplied data is checked the same way by the interpreter and the emulator: every name is one the
program declares, every declared tensor is supplied unless the caller asked to fill the rest
from the seed (``fill_missing``), each array has the declared shape, and converting it to the
declared dtype loses nothing a user would not expect — a NaN never becomes INT_MIN, 300 never
wraps to 44 in an ``i8``, 70000 never becomes ``inf`` in an ``f16``. Ordinary float rounding
(f32 → f16) is allowed.

A param the precision pass made (``derive``, :mod:`rtgraph.ir.weights`) is not supplied: the
user supplies its *source* — the param of the program they wrote, with the type they declared —
and :func:`param_values` makes every derived param from it, once per source, for the interpreter
and the emulator alike.
"""

from __future__ import annotations

import zlib
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from numbers import Integral

import numpy as np

from rtgraph.dtypes import DTYPES, TensorType, to_value
from rtgraph.errors import CheckError, InputError, Span, UsageError, did_you_mean
from rtgraph.ir.graph import Node, OpNode, Tensor
from rtgraph.ir.weights import Derive, derived_value
from rtgraph.ops import lookup

#: The largest seed: seeds are integers from 0 to 2**63 - 1.
MAX_SEED = 2**63 - 1

#: The hint of a missing input or param.
FILL_MISSING_HINT = "pass --fill-missing to generate them from --seed"


def check_seed(seed: object) -> int:
    """``seed`` as an int, or a usage error for a seed that is not an integer in range."""
    if isinstance(seed, bool) or not isinstance(seed, Integral):
        raise UsageError(
            f"seed {seed!r} is not an integer", hint=f"a seed is an integer from 0 to {MAX_SEED}"
        )
    if not 0 <= seed <= MAX_SEED:
        raise UsageError(
            f"seed {seed} is out of range", hint=f"a seed is an integer from 0 to {MAX_SEED}"
        )
    return int(seed)


def generate(
    name: str,
    shape: tuple[int, ...],
    dtype: str,
    seed: int,
    *,
    param: bool,
    nonnegative: bool = False,
) -> np.ndarray:
    """Values for tensor ``name`` (value form of ``dtype``), reproducible from ``seed``;
    their absolute values for a ``nonnegative`` param (:func:`nonnegative_params`)."""
    rng = np.random.default_rng([check_seed(seed), zlib.crc32(name.encode())])
    if not DTYPES[dtype].is_float:
        values = rng.integers(-4, 5, size=shape)
        return to_value(np.abs(values) if nonnegative else values, dtype)
    values = rng.standard_normal(size=shape, dtype=np.float32)
    if param and len(shape) >= 2:
        values *= np.float32(1.0 / np.sqrt(max(shape[-2], 1)))
    return to_value(np.abs(values) if nonnegative else values, dtype)


def nonnegative_params(tensors: dict[str, Tensor], nodes: list[Node]) -> dict[str, Tensor]:
    """``tensors`` with ``nonnegative`` set on every param passed as it is to an operand its op
    needs at or above zero (the registry's ``nonnegative_args``: batchnorm's variance), so that
    a seeded run generates ``|x|`` there instead of a negative variance's NaNs."""
    marked = set()
    for node in nodes:
        op = lookup(node.op) if isinstance(node, OpNode) else None
        for k in op.nonnegative_args if op is not None else ():
            if k < len(node.inputs) and tensors[node.inputs[k]].kind == "param":
                marked.add(node.inputs[k])
    if not marked:
        return tensors
    return {n: replace(t, nonnegative=True) if n in marked else t for n, t in tensors.items()}


def check_names(
    role: str,
    given: Collection[str],
    declared: Mapping[str, Span | None],
    owner: str,
    *,
    fill_missing: bool,
) -> None:
    """Refuse supplied ``role`` names the program does not declare, and — unless
    ``fill_missing`` — declared ones not supplied (located at the first one's declaration)."""
    extra = sorted(set(given) - set(declared))
    if extra:
        raise InputError(
            f"{role} '{extra[0]}' supplied but program '{owner}' declares no such {role}",
            hint=did_you_mean(extra[0], declared)
            or f"its {role}s are: {', '.join(sorted(declared)) or '(none)'}",
        )
    missing = [name for name in declared if name not in given]
    if missing and not fill_missing:
        names = ", ".join(f"'{n}'" for n in missing)
        what = f"{role} {names} is" if len(missing) == 1 else f"{role}s {names} are"
        raise InputError(
            f"{what} missing: the supplied {role}s must hold every {role} of program '{owner}'",
            span=declared[missing[0]],
            hint=FILL_MISSING_HINT,
        )


@dataclass(frozen=True)
class DeclaredParam:
    """A param as a program holds it — the IR's tensor or the stream program's host tensor —
    with its declaration's span for messages and, for one made at load time, its ``derive``."""

    name: str
    type: TensorType
    span: Span | None = None
    derive: Derive | None = None
    nonnegative: bool = False


def supplied_params(params: Iterable[DeclaredParam]) -> dict[str, tuple[TensorType, Span | None]]:
    """The params a user supplies for a program holding ``params``, in declaration order: each
    param not derived, and the source of each derived one (with the source program's type and
    the first derived param's span). Params that disagree on a source's type are a
    :class:`~rtgraph.errors.CheckError` (a compiler bug; a loaded stream program is checked
    for it first)."""
    out: dict[str, tuple[TensorType, Span | None]] = {}
    for p in params:
        name, declared = (
            (p.name, p.type) if p.derive is None else (p.derive.source, p.derive.source_type)
        )
        known = out.setdefault(name, (declared, p.span))[0]
        if known != declared:
            raise CheckError(
                f"param '{name}' is supplied as {known} and as {declared}: the params made "
                "from it disagree on its type",
                span=p.span,
            )
    return out


def check_params(
    params: Sequence[DeclaredParam], given: Collection[str], owner: str, *, fill_missing: bool
) -> None:
    """:func:`check_names` for the params a user supplies (:func:`supplied_params`), with a
    derived param's name refused first, its source named in the hint."""
    declared = supplied_params(params)
    for p in params:
        if p.derive is not None and p.name in given and p.name not in declared:
            source = p.derive.source
            raise InputError(
                f"param '{p.name}' is not supplied: it is made when program '{owner}' is "
                f"loaded, from param '{source}'",
                span=p.span,
                hint=f"supply '{source}' as the program was written ({p.derive.source_type})",
            )
    spans = {name: span for name, (_, span) in declared.items()}
    check_names("param", given, spans, owner, fill_missing=fill_missing)


def param_values(
    params: Sequence[DeclaredParam], given: Mapping[str, object] | None, seed: int
) -> dict[str, np.ndarray]:
    """The value of every param of ``params`` by name: the supplied array (checked against the
    declared type) or one generated from ``seed``; a derived param made from its source's value,
    computed once for all the params made from it. The names in ``given`` must have passed
    :func:`check_params` (source names, not derived ones): both callers check them first."""
    declared = supplied_params(params)
    nonnegative = {p.name if p.derive is None else p.derive.source for p in params if p.nonnegative}
    sources: dict[str, np.ndarray] = {}
    for name, (t, span) in declared.items():
        array = None if given is None else given.get(name)
        if array is None:
            sources[name] = generate(
                name, t.shape, t.dtype, seed, param=True, nonnegative=name in nonnegative
            )
        else:
            sources[name] = supplied_value(
                array, label=name, origin="param", shape=t.shape, dtype=t.dtype, span=span
            )
    values: dict[str, np.ndarray] = {}
    for p in params:
        if p.derive is None:
            values[p.name] = sources[p.name]
            continue
        try:
            values[p.name] = derived_value(p.derive, sources[p.derive.source], p.type, p.name)
        except InputError as e:  # (weights that cannot be quantized) at the param's declaration
            raise InputError(e.message, span=e.span or p.span, hint=e.hint) from None
    return values


def supplied_value(
    array: object,
    *,
    label: str,
    origin: str,
    shape: tuple[int, ...],
    dtype: str,
    span: Span | None = None,
) -> np.ndarray:
    """A supplied array as the C-contiguous value form of ``dtype``, or an error located at
    the tensor's declaration: not numeric, the wrong shape, or a lossy conversion."""
    array = np.asarray(array)
    if array.dtype.kind not in "fiub":
        raise InputError(f"{origin} '{label}' has dtype {array.dtype}, not numeric", span=span)
    if tuple(array.shape) != tuple(shape):
        raise InputError(
            f"{origin} '{label}' has shape {list(array.shape)}, the program declares {list(shape)}",
            span=span,
            hint=f"supply an array of shape {list(shape)} ({dtype})",
        )
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is found below, by element
        value = to_value(array, dtype)
    problem = _first_loss(array, value, dtype)
    if problem is not None:
        index, reason, hint = problem
        shown = array[index].item()
        raise InputError(
            f"{origin} '{label}' holds {shown!r} at index {index}: {reason}", span=span, hint=hint
        )
    return value if value.flags.c_contiguous else np.ascontiguousarray(value)


def _first_loss(
    array: np.ndarray, value: np.ndarray, dtype: str
) -> tuple[tuple[int, ...], str, str] | None:
    """The first element that converting ``array`` to ``dtype`` (giving ``value``) would
    change beyond float rounding: its index, why, and a hint; None when nothing is lost."""
    kind = array.dtype.kind
    if kind == "b" or array.size == 0:
        return None
    if DTYPES[dtype].is_float:
        with np.errstate(invalid="ignore"):
            bad = np.isfinite(array) & ~np.isfinite(value)
        if not bad.any():
            return None
        return (
            _index(bad),
            f"beyond the largest finite {dtype} ({_largest(dtype):g}), it would become inf",
            "scale the data into range, or declare the tensor with a wider float type",
        )
    info = np.iinfo(DTYPES[dtype].value)
    if kind == "f":
        wide = array.astype(np.float64)
        with np.errstate(invalid="ignore"):
            nonfinite = ~np.isfinite(wide)
            if nonfinite.any():
                return (
                    _index(nonfinite),
                    f"{dtype} holds only finite whole numbers",
                    "replace NaN and infinity before supplying it, or declare a float type",
                )
            fraction = wide != np.trunc(wide)
            if fraction.any():
                return (
                    _index(fraction),
                    f"{dtype} holds only whole numbers",
                    "round the data yourself (numpy.rint) if that is what you mean",
                )
        outside = (wide < info.min) | (wide > info.max)
    else:  # integers: compare exactly, whatever the signedness
        outside = value.astype(array.dtype) != array
        if kind == "u" and info.min < 0:
            outside |= value < 0
    if not outside.any():
        return None
    return (
        _index(outside),
        f"outside the range of {dtype} ({info.min} to {info.max})",
        "supply values in range, or declare a wider type",
    )


def _largest(dtype: str) -> float:
    """The largest finite value of a float dtype's value form (bf16 rounds to its own)."""
    if dtype == "bf16":
        return float(np.float32(3.3895313892515355e38))
    return float(np.finfo(DTYPES[dtype].value).max)


def _index(mask: np.ndarray) -> tuple[int, ...]:
    """The first True element's index (row-major), as a tuple of ints."""
    flat = int(np.argmax(mask.reshape(-1)))
    return tuple(int(i) for i in np.unravel_index(flat, mask.shape))
