"""Calibration for the precision pass: sample batches, the values a program takes on them, and
the int8 scale of an activation chosen from those values.

Batches come from ``--calibration X.npz`` (an array per input: one batch of the declared
shape, or several along a new leading axis; params may be given too) or are generated:
``--calibration-batches N`` inputs from seeds 1 … N, held out from the seed-0 data a run checks
by default. Params are the program's own weights (an imported model's), those in the file, or
the ones a run generates from seed 0: calibration must see the weights the program will run
with, as AMCT and TensorRT calibrate the trained model.

Scale methods, all symmetric (zero point 0) over a histogram of magnitudes of :data:`BINS` bins
from 0 to the largest magnitude seen: ``max`` (that magnitude), ``percentile``
(:data:`PERCENTILE` of the magnitudes) and ``entropy`` — TensorRT's: the clipping threshold
whose 128-level quantized histogram is closest to the clipped one in KL divergence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from rtgraph.compiler.options import CompileOptions
from rtgraph.errors import InputError
from rtgraph.ir.data import generate
from rtgraph.ir.graph import Program
from rtgraph.ir.interpreter import evaluate
from rtgraph.ir.npz import load_npz
from rtgraph.ir.weights import QMAX

#: Histogram bins of an activation's magnitudes (TensorRT's entropy calibration uses 2048).
BINS = 2048
#: Quantized levels of one sign the entropy method compares with (int8: 128).
LEVELS = 128
#: Candidate thresholds the entropy method tries: every STRIDE-th bin edge from LEVELS on.
STRIDE = 16
#: The ``percentile`` method's percentile of the magnitudes.
PERCENTILE = 99.99


@dataclass(frozen=True)
class Batch:
    """One calibration batch: every input's value, and the params."""

    inputs: Mapping[str, np.ndarray]
    params: Mapping[str, np.ndarray]


def batches(program: Program, options: CompileOptions) -> list[Batch]:
    """The calibration batches ``options`` ask for (a bad file: a located-by-name InputError)."""
    params = options.calibration_params
    if params is None:  # the weights a run generates from seed 0, made once
        params = {
            t.name: generate(
                t.name, t.type.shape, t.type.dtype, 0, param=True, nonnegative=t.nonnegative
            )
            for t in program.params_()
        }
    if options.calibration is None:
        return [
            Batch(
                {
                    t.name: generate(t.name, t.type.shape, t.type.dtype, seed, param=False)
                    for t in program.inputs()
                },
                params,
            )
            for seed in range(1, options.calibration_batches + 1)
        ]
    return _from_file(program, options.calibration, params)


def _from_file(program: Program, path: str, params: Mapping[str, np.ndarray] | None) -> list[Batch]:
    inputs = {t.name: t for t in program.inputs()}
    weights = {t.name: t for t in program.params_()}
    arrays = load_npz(path, known=[*inputs, *weights], role="input", owner=program.name)
    where = f"--calibration {path}"
    missing = [name for name in inputs if name not in arrays]
    if missing:
        raise InputError(
            f"{where}: input '{missing[0]}' is missing",
            hint=f"the file needs an array for every input: {', '.join(inputs)}",
        )
    counts = {}
    for name, t in inputs.items():
        a = arrays[name]
        if tuple(a.shape) == t.type.shape:
            counts[name] = 1
        elif a.ndim == t.type.rank + 1 and tuple(a.shape[1:]) == t.type.shape:
            counts[name] = a.shape[0]
        else:
            raise InputError(
                f"{where}: input '{name}' has shape {list(a.shape)}; the program declares "
                f"{list(t.type.shape)}",
                hint=f"give one batch of shape {list(t.type.shape)}, or several as "
                f"[B, {', '.join(map(str, t.type.shape))}]",
            )
        _check_values(where, name, a)
    if len(set(counts.values())) > 1:
        raise InputError(
            f"{where}: the inputs hold different numbers of batches "
            f"({', '.join(f'{n}: {c}' for n, c in counts.items())})",
            hint="give every input the same leading batch axis",
        )
    count = next(iter(counts.values()), 1)
    if count == 0:
        raise InputError(f"{where}: the file holds no batches (a leading axis of 0)")
    given = {name: arrays[name] for name in weights if name in arrays}
    for name, a in given.items():
        _check_values(where, name, a)
    merged = {**params, **given}
    return [
        Batch(
            {
                name: arrays[name] if arrays[name].ndim == t.type.rank else arrays[name][b]
                for name, t in inputs.items()
            },
            merged,
        )
        for b in range(count)
    ]


def _check_values(where: str, name: str, a: np.ndarray) -> None:
    if a.dtype.kind not in "fiub":
        raise InputError(f"{where}: '{name}' has dtype {a.dtype}, not numeric")
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        index = tuple(int(i) for i in np.argwhere(~np.isfinite(a))[0])
        raise InputError(
            f"{where}: '{name}' holds {a[index].item()!r} at index {list(index)}",
            hint="calibration data must be finite",
        )


def observed_runs(
    program: Program, runs: Sequence[Batch], observe: Sequence[str]
) -> list[dict[str, np.ndarray]]:
    """The outputs and the ``observe`` tensors of ``program`` on each batch (the reference
    interpreter's values)."""
    watched = replace(program, outputs=list(dict.fromkeys([*program.outputs, *observe])))
    return [evaluate(watched, dict(run.inputs), 0, run.params, fill_missing=True) for run in runs]


def activation_scale(values: Sequence[np.ndarray], method: str) -> float:
    """The int8 scale (threshold / 127) of an activation that took ``values``."""
    magnitudes = [np.abs(np.asarray(v, dtype=np.float32)).ravel() for v in values]
    top = max((float(m.max()) for m in magnitudes if m.size), default=0.0)
    if not np.isfinite(top):
        raise InputError(
            "calibration: an activation took a non-finite value",
            hint="the program overflows on the calibration data; check the data or its scale",
        )
    if top == 0.0:
        return 1.0
    if method == "max":
        return top / QMAX
    hist = sum(np.histogram(m, bins=BINS, range=(0.0, top))[0] for m in magnitudes)
    edges = np.linspace(0.0, top, BINS + 1)
    if method == "percentile":
        cdf = np.cumsum(hist) / hist.sum()
        i = int(np.searchsorted(cdf, PERCENTILE / 100.0))
        return float(edges[min(i + 1, BINS)]) / QMAX
    return float(edges[_entropy_threshold(np.asarray(hist, dtype=np.float64))]) / QMAX


def _entropy_threshold(hist: np.ndarray) -> int:
    """The bin edge (index) TensorRT's entropy calibration clips at: the ``i`` minimising
    KL(P ‖ Q), P the first ``i`` bins with the clipped tail added to the last, Q that
    histogram merged into :data:`LEVELS` levels and spread back over each level's nonempty
    bins."""
    best, best_kl = BINS, np.inf
    for i in range(LEVELS, BINS + 1, STRIDE):
        p = hist[:i].copy()
        p[-1] += hist[i:].sum()
        if p.sum() == 0:
            continue
        # Merge the i bins into LEVELS levels (bins as evenly as the division allows).
        starts = (np.arange(LEVELS) * i) // LEVELS
        nonzero = hist[:i] > 0
        level_sum = np.add.reduceat(hist[:i], starts)
        level_count = np.add.reduceat(nonzero.astype(np.float64), starts)
        level_of = np.repeat(np.arange(LEVELS), np.diff(np.append(starts, i)))
        spread = np.divide(level_sum, level_count, out=np.zeros(LEVELS), where=level_count > 0)[
            level_of
        ]
        q = np.where(nonzero, spread, 0.0)
        kl = _kl(p, q)
        if kl < best_kl:
            best, best_kl = i, kl
    return best


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    """KL(P ‖ Q) of two unnormalised histograms; a bin P has and Q lacks costs as if Q held
    a small fraction of a count there (TensorRT smooths the same way)."""
    p = p / p.sum()
    q = np.where((q == 0) & (p > 0), 1e-4, q)
    q = q / q.sum()
    mask = p > 0
    return float(np.sum(p[mask] * np.log(p[mask] / q[mask])))
