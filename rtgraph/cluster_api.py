"""The library surface for many devices: compile a program for a cluster, run it, check it.

    import rtgraph
    program = rtgraph.load("models/mlp_train.rtg")
    compiled = rtgraph.compile_cluster(program, cluster="toy", data_parallel=4)
    run = rtgraph.run_cluster(compiled)
    print(run.makespan_us, run.check)

A cluster program's host data is the whole program's: the inputs and params the reference
interpreter would make for it (from ``seed``), spread over the ranks by the program's layouts
(row blocks or whole), and its outputs are gathered back the same way — so a run is checked
against the single-device reference of the program as written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rtgraph import frontend
from rtgraph.cluster.load import load_cluster
from rtgraph.cluster.spec import ClusterSpec
from rtgraph.compiler import CompileOptions
from rtgraph.compiler.parallel.compile_cluster import ClusterProgram
from rtgraph.compiler.parallel.compile_cluster import compile_cluster as _compile_cluster
from rtgraph.compiler.parallel.layouts import HostLayout
from rtgraph.emulator.cluster import ClusterResult
from rtgraph.emulator.cluster import run_cluster as _run_cluster
from rtgraph.errors import UsageError
from rtgraph.ir.data import check_seed, generate
from rtgraph.ir.graph import Program
from rtgraph.ir.reference import reference

#: The cluster a program runs on when none is named.
DEFAULT_CLUSTER = "toy"


def cluster(spec: str | ClusterSpec | None = None) -> ClusterSpec:
    """A cluster spec by name or path (default ``toy``)."""
    return spec if isinstance(spec, ClusterSpec) else load_cluster(spec or DEFAULT_CLUSTER)


def compile_cluster(
    program: Program,
    *,
    cluster: str | ClusterSpec | None = None,
    data_parallel: int = 1,
    pipeline: int = 1,
    micro_batches: int = 1,
    schedule: str = "1f1b",
    tensor_parallel: int = 1,
    batch: str = "B",
    options: CompileOptions | None = None,
) -> ClusterProgram:
    """Compile ``program`` for a cluster: by its ``device[…]`` blocks; as
    ``data_parallel``-way data parallelism — each replica the program checked with its parameter
    ``batch`` divided by ``data_parallel``; or as a ``pipeline``-stage pipeline of
    ``micro_batches`` micro-batches (``batch`` divided by ``micro_batches``) under ``schedule``
    (``gpipe`` or ``1f1b``), its stages the program's ``device[…]`` blocks or balanced by the
    cost model; or as ``tensor_parallel``-way tensor parallelism (weights cut, Megatron-style)."""
    spec = globals()["cluster"](cluster)
    for label, n in (
        ("data parallelism", data_parallel),
        ("a pipeline", pipeline),
        ("a pipeline", micro_batches),
    ):
        if n < 1:
            raise UsageError(f"{label} needs a count of at least 1, got {n}")
    if sum(k > 1 for k in (data_parallel, pipeline, tensor_parallel)) > 1:
        raise UsageError(
            "data, pipeline and tensor parallelism together are not supported yet",
            hint="use one of --data-parallel, --pipeline and --tensor-parallel",
        )
    if tensor_parallel > 1:
        return _compile_cluster(program, spec, options, tensor_parallel=tensor_parallel)
    if pipeline > 1:
        micro = _replica(program, micro_batches, batch) if micro_batches > 1 else program
        return _compile_cluster(
            program,
            spec,
            options,
            micro_batch=micro,
            stages=pipeline,
            micro_batches=micro_batches,
            schedule=schedule,
        )
    replica = _replica(program, data_parallel, batch) if data_parallel > 1 else None
    return _compile_cluster(
        program, spec, options, data_parallel_replica=replica, replicas=data_parallel
    )


def _replica(program: Program, n: int, batch: str) -> Program:
    """``program`` checked with its parameter ``batch`` divided by ``n``."""
    if batch not in program.params:
        have = ", ".join(program.params) or "none"
        raise UsageError(
            f"data parallelism divides the program's batch parameter '{batch}', which program "
            f"'{program.name}' does not have (its parameters: {have})",
            hint="name the batch parameter with batch= (--batch)",
        )
    size = program.params[batch]
    if size % n:
        raise UsageError(
            f"the batch {batch} = {size} does not split into {n} equal parts",
            hint=f"use a batch that is a multiple of {n}",
        )
    if program.source is None:
        raise UsageError("data parallelism re-checks the program's source, which it lacks")
    params = {**program.params, batch: size // n}
    return frontend.parse(program.source.text, program.source.name, params)


@dataclass
class ClusterRun:
    """A cluster run: the emulator's result, the outputs gathered from the ranks, and per
    output its check against the whole program's reference (:func:`check_outputs`)."""

    program: ClusterProgram
    result: ClusterResult
    outputs: dict[str, np.ndarray]
    check: dict[str, dict[str, Any]]

    @property
    def makespan_us(self) -> float:
        return self.result.makespan_us


def run_cluster(
    compiled: ClusterProgram,
    *,
    seed: int = 0,
    numerics: bool = True,
    inputs: Mapping[str, np.ndarray] | None = None,
    params: Mapping[str, np.ndarray] | None = None,
) -> ClusterRun:
    """Run ``compiled`` on its cluster with the whole program's data — ``inputs`` and
    ``params`` where given, else made from ``seed`` as the reference interpreter makes them;
    with ``numerics``, gather the outputs and check them against the reference."""
    seed = check_seed(seed)
    compiled.check_transfers()  # programs replaced since compiling: refused, located
    whole = compiled.whole
    given_inputs, given_params = dict(inputs or {}), dict(params or {})
    inputs = {
        t.name: given_inputs.get(t.name)
        if t.name in given_inputs
        else generate(t.name, t.type.shape, t.type.dtype, seed, param=False)
        for t in whole.inputs()
    }
    params = {
        t.name: given_params.get(t.name)
        if t.name in given_params
        else generate(
            t.name, t.type.shape, t.type.dtype, seed, param=True, nonnegative=t.nonnegative
        )
        for t in whole.params_()
    }
    per_inputs: list[dict[str, np.ndarray]] = [{} for _ in compiled.ranks]
    for name, layout in compiled.inputs.items():
        for rank, there, block in layout.parts:
            per_inputs[rank][there] = _block(inputs[name], block, layout)
    per_params: list[dict[str, np.ndarray]] = [{} for _ in compiled.ranks]
    for r, p in enumerate(compiled.ranks):
        for name in params:
            layout = compiled.params.get(name)
            if layout is not None:
                for rank, there, block in layout.parts:
                    if rank == r:
                        per_params[r][there] = _block(params[name], block, layout)
            elif name in p.tensors:
                per_params[r][name] = params[name]
    result = _run_cluster(
        compiled.programs,
        compiled.cluster,
        inputs=per_inputs,
        params=per_params,
        seed=seed,
        numerics=numerics,
    )
    outputs: dict[str, np.ndarray] = {}
    check: dict[str, dict[str, Any]] = {}
    if numerics:
        outputs = gather(compiled, result)
        ref = reference(whole, check="full", seed=seed, inputs=inputs, params=params)
        check = check_outputs(outputs, dict(ref.outputs))
    return ClusterRun(compiled, result, outputs, check)


def _block(array: np.ndarray, block: int, layout: HostLayout) -> np.ndarray:
    """Block ``block`` of ``array`` as ``layout`` cuts it."""
    if layout.blocks == 1:
        return array
    size = array.shape[layout.axis] // layout.blocks
    return np.take(array, range(block * size, (block + 1) * size), axis=layout.axis)


def gather(compiled: ClusterProgram, result: ClusterResult) -> dict[str, np.ndarray]:
    """The whole program's outputs from the ranks' (row blocks joined, a whole one rank 0's —
    or its one holder's)."""
    out = {}
    for name, layout in compiled.outputs.items():
        first: dict[int, np.ndarray] = {}
        for rank, there, block in layout.parts:
            first.setdefault(block, result.devices[rank].outputs[there])
        held = [first[k] for k in range(layout.blocks)]
        out[name] = np.concatenate(held, axis=0) if layout.layout == "rows" else held[0]
    return out


def check_outputs(
    outputs: dict[str, np.ndarray], ref: dict[str, np.ndarray]
) -> dict[str, dict[str, Any]]:
    """Per output: ``check`` — ``bit-exact`` or ``differs`` — and ``max_abs``/``max_rel``
    against the reference. A collective sums in its algorithm's order and a replica's dot
    products are shorter than the whole batch's, so a data-parallel sum may differ from the
    reference in its last bits; the bound that difference must keep (γ_k·Σ|terms|) depends on
    the terms, which the caller knows (tests/test_parallel.py derives it per program)."""
    report = {}
    for name, want in ref.items():
        a = np.asarray(outputs[name], np.float64)
        b = np.asarray(want, np.float64)
        equal = bool(np.array_equal(a, b, equal_nan=True))
        diff = float(np.max(np.abs(a - b), initial=0.0))
        scale = float(np.max(np.abs(b), initial=0.0))
        report[name] = {
            "check": "bit-exact" if equal else "differs",
            "max_abs": diff,
            "max_rel": diff / scale if scale else diff,
        }
    return report
