"""What a run is checked against: the reference interpreter's outputs, whole or at a sample.

Three modes (``rtgraph run --check``, ``rtgraph.reference(check=)``):

* ``full`` — every element of every output, from :func:`.interpreter.evaluate`;
* ``sample`` — :data:`SAMPLE_SIZE` elements per output at most, a grid of indices picked from
  the seed and the output's name (up to :data:`SAMPLE_COLUMNS` along the last axis, then as many
  as fit along each axis before it), from :func:`.sampled.evaluate_sampled`, which computes each
  op only where those elements need it wherever that is exact and whole otherwise;
* ``none`` — nothing is checked.

The default is ``full`` for a program whose ops do at most :data:`FULL_CHECK_FLOPS` of
arithmetic (the op registry's cost rules) and ``sample`` above that.

References of programs whose inputs and params are all generated from the seed are kept per
(program object, seed, mode) — the last :data:`CACHED` of them — so repeated runs of one program
(sweeps, benchmarks, tests) evaluate it once; a full reference also answers a sample. The arrays
are read-only and shared between the calls that return them.
"""

from __future__ import annotations

import weakref
import zlib
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from rtgraph.errors import UsageError
from rtgraph.ir.data import check_seed
from rtgraph.ir.graph import OpNode, Program
from rtgraph.ir.interpreter import evaluate
from rtgraph.ir.sampled import Box, evaluate_sampled, take
from rtgraph.ops import lookup

CHECK_MODES = ("full", "sample", "none")
#: Above this much arithmetic (flops, by the op registry's cost rules) a run is checked on a
#: sample by default.
FULL_CHECK_FLOPS = 2 * 10**9
#: Elements checked per output in ``sample`` mode, at most.
SAMPLE_SIZE = 256
#: ... of which at most this many along the last axis.
SAMPLE_COLUMNS = 64
#: References kept for repeated runs.
CACHED = 4


@dataclass(frozen=True, eq=False)
class Reference(Mapping[str, np.ndarray]):
    """The reference outputs by name, and how much of them holds: ``mode`` is ``full``,
    ``sample`` or ``none`` (no outputs); in ``sample`` mode ``boxes`` holds each output's
    sampled elements (per axis, None or the indices) and :meth:`elements` gives them."""

    mode: str
    outputs: Mapping[str, np.ndarray]
    boxes: Mapping[str, Box] | None = None

    def __getitem__(self, name: str) -> np.ndarray:
        return self.outputs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.outputs)

    def __len__(self) -> int:
        return len(self.outputs)

    def elements(self, name: str, array: np.ndarray) -> np.ndarray:
        """The checked elements of ``array`` (an output of ``name``'s shape): all of it in
        ``full`` mode, the sample's grid in ``sample`` mode."""
        if self.boxes is None:
            return np.asarray(array)
        return take(np.asarray(array), self.boxes[name])


def program_flops(program: Program) -> int:
    """The arithmetic of ``program``'s ops, by the op registry's cost rules."""
    total = 0
    for node in program.nodes:
        if isinstance(node, OpNode) and node.op != "kernel":
            types = [program.tensors[name].type for name in node.inputs]
            out = program.tensors[node.output].type
            total += lookup(node.op).cost(types, out, node.attrs).flops
    return total


def check_mode(program: Program, check: str | None) -> str:
    """``check`` if given (one of :data:`CHECK_MODES`), else the default for ``program``."""
    if check is None:
        return "full" if program_flops(program) <= FULL_CHECK_FLOPS else "sample"
    if check not in CHECK_MODES:
        raise UsageError(
            f"unknown check mode {check!r}", hint=f"use one of {', '.join(CHECK_MODES)}"
        )
    return check


def sample_box(name: str, shape: tuple[int, ...], seed: int) -> Box:
    """The sampled elements of output ``name``: a grid of at most :data:`SAMPLE_SIZE`
    elements, at most :data:`SAMPLE_COLUMNS` along the last axis, indices drawn from ``seed``
    and the name (an axis short enough is taken whole)."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    left, box = SAMPLE_SIZE, []
    for axis, n in reversed(list(enumerate(shape))):
        count = min(n, SAMPLE_COLUMNS if axis == len(shape) - 1 else left, left)
        left //= max(count, 1)
        box.append(None if count == n else np.sort(rng.choice(n, size=count, replace=False)))
    return tuple(reversed(box))


def reference(
    program: Program,
    *,
    check: str | None = None,
    seed: int = 0,
    inputs: Mapping[str, np.ndarray] | None = None,
    params: Mapping[str, np.ndarray] | None = None,
    fill_missing: bool = False,
) -> Reference:
    """The reference interpreter's outputs of ``program`` to check a run against (pass them to
    ``rtgraph.compare``): ``check`` ``full`` (every element), ``sample`` (a few hundred per
    output, computed only where they need) or ``none``; None picks the program's default
    (:func:`check_mode`: ``full``, or ``sample`` for a program of more than a few GFLOP). Kept
    per (program, seed) when nothing is supplied, so repeated runs evaluate it once. Inputs,
    params, seed and ``fill_missing`` as for :func:`.interpreter.evaluate`; the modes, the
    threshold and the sample: docs/emulator.md."""
    mode = check_mode(program, check)
    if mode == "none":
        return Reference("none", {})
    seed = check_seed(seed)
    cacheable = inputs is None and params is None
    if cacheable:
        found = _cached(program, seed, "full") or _cached(program, seed, mode)
        if found is not None:
            return found if found.mode == mode else _as_sample(found, program, seed)
    if mode == "full":
        outputs = evaluate(program, inputs, seed, params, fill_missing=fill_missing)
        found = Reference("full", outputs)
    else:
        boxes = {
            name: sample_box(name, program.tensors[name].type.shape, seed)
            for name in program.outputs
        }
        outputs = evaluate_sampled(program, boxes, inputs, seed, params, fill_missing=fill_missing)
        found = Reference("sample", outputs, boxes)
    for array in found.outputs.values():
        array.flags.writeable = False
    if cacheable:
        _keep(program, seed, found)
    return found


def _as_sample(full: Reference, program: Program, seed: int) -> Reference:
    boxes = {
        name: sample_box(name, program.tensors[name].type.shape, seed) for name in program.outputs
    }
    return Reference("sample", full.outputs, boxes)


# --- the cache -------------------------------------------------------------------------------
_CACHE: OrderedDict[tuple[int, int, str], tuple[weakref.ref, Reference]] = OrderedDict()


def _cached(program: Program, seed: int, mode: str) -> Reference | None:
    key = (id(program), seed, mode)
    entry = _CACHE.get(key)
    if entry is None or entry[0]() is not program:  # an id reused by a newer program
        return None
    _CACHE.move_to_end(key)
    return entry[1]


def _keep(program: Program, seed: int, found: Reference) -> None:
    _CACHE[(id(program), seed, found.mode)] = (weakref.ref(program), found)
    _CACHE.move_to_end((id(program), seed, found.mode))
    while len(_CACHE) > CACHED:
        _CACHE.popitem(last=False)


def clear_cache() -> None:
    """Forget every kept reference."""
    _CACHE.clear()
