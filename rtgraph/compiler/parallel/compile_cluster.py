"""A program for a cluster: the per-rank programs (by placement or data parallelism), each
compiled by the single-device pipeline for the cluster's device, and how the host's tensors
spread over the ranks.

The per-rank programs go through the whole single-device compiler — the optimizer, lowering,
memory planning, streams and barriers — each on its own: a transfer is an op on the ``link``
unit whose operand and result are ordinary tensors, so the byte-level hazards around it and the
events they need come out of the same passes as for any other op. Nothing orders two devices
but the transfers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rtgraph.cluster.spec import ClusterSpec
from rtgraph.compiler.options import CompileOptions
from rtgraph.compiler.parallel.expand_collectives import expand_collectives
from rtgraph.compiler.parallel.layouts import HostLayout
from rtgraph.compiler.parallel.pipeline_parallel import pipeline_parallel
from rtgraph.compiler.parallel.place import place, placed_ranks
from rtgraph.compiler.parallel.replicate import data_parallel
from rtgraph.compiler.parallel.tensor_parallel import tensor_parallel as _tensor_parallel
from rtgraph.compiler.parallel.transfers import Tags
from rtgraph.compiler.pipeline import compile_program
from rtgraph.errors import UsageError
from rtgraph.ir.graph import Program
from rtgraph.stream_program.program import StreamProgram
from rtgraph.stream_program.transfers import check_transfers


@dataclass
class ClusterProgram:
    """What runs on a cluster: ``programs[r]`` on rank r, the whole program they came from
    (the reference's), and the layouts of its inputs and outputs over the ranks."""

    name: str
    cluster: ClusterSpec
    whole: Program
    ranks: list[Program]
    programs: list[StreamProgram]
    inputs: dict[str, HostLayout]
    outputs: dict[str, HostLayout]
    parallelism: str
    meta: dict[str, Any] = field(default_factory=dict)
    #: The params cut over the ranks (tensor parallelism); any other is whole on each rank.
    params: dict[str, HostLayout] = field(default_factory=dict)
    #: The program objects :meth:`check_transfers` last passed.
    checked: tuple[StreamProgram, ...] = field(default=(), repr=False, compare=False)

    @property
    def devices(self) -> int:
        return len(self.programs)

    def check_transfers(self) -> None:
        """:func:`~rtgraph.stream_program.transfers.check_transfers` over the ranks' programs —
        once for these very objects: a program replaced since (edited, loaded) is checked
        again before it runs."""
        if len(self.checked) == len(self.programs) and all(
            a is b for a, b in zip(self.checked, self.programs, strict=True)
        ):
            return
        check_transfers(self.programs)
        self.checked = tuple(self.programs)


def compile_cluster(
    whole: Program,
    cluster: ClusterSpec,
    options: CompileOptions | None = None,
    *,
    data_parallel_replica: Program | None = None,
    replicas: int = 1,
    micro_batch: Program | None = None,
    stages: int = 1,
    micro_batches: int = 1,
    schedule: str = "1f1b",
    tensor_parallel: int = 1,
) -> ClusterProgram:
    """Compile ``whole`` for ``cluster``: by its ``device[…]`` placement; or — given the replica
    (``whole`` checked at 1/``replicas`` of its batch) — as ``replicas``-way data parallelism;
    or — given the micro-batch (``whole`` at 1/``micro_batches``) — as a ``stages``-stage
    pipeline under ``schedule``."""
    options = options or CompileOptions()
    tags = Tags()
    meta: dict[str, Any] = {}
    params: dict[str, HostLayout] = {}
    if tensor_parallel > 1:
        _fits(tensor_parallel, cluster, "tensor-parallel ranks")
        ranks, params, cut = _tensor_parallel(whole, tensor_parallel, tags)
        everywhere = tuple(range(tensor_parallel))
        inputs = {t.name: HostLayout.of(t.name, "whole", everywhere) for t in whole.inputs()}
        outputs = {name: HostLayout.of(name, "whole", (0,)) for name in whole.outputs}
        parallelism = f"tensor-parallel {tensor_parallel}"
        meta["tensor"] = {"cut": cut.cut, "whole": list(cut.whole), "allreduces": cut.allreduces}
    elif stages > 1:
        _fits(stages, cluster, "pipeline stages")
        if micro_batch is None:
            raise UsageError("pipelining needs the program checked at 1/M of its batch")
        ranks, inputs, outputs, cut = pipeline_parallel(
            whole, micro_batch, stages, micro_batches, schedule, cluster.device_spec, tags
        )
        parallelism = f"pipeline {stages} stages × {micro_batches} micro-batches, {schedule}"
        meta["stages"] = {
            "named": cut.named,
            "estimated_us": list(cut.estimated_us),
            "ops": [cut.of.count(s) for s in range(stages)],
            "backward_ops": sum(cut.backward),
            "micro_batches": micro_batches,
            "schedule": schedule,
        }
    elif replicas > 1:
        _fits(replicas, cluster, "data-parallel replicas")
        if data_parallel_replica is None:
            raise UsageError("data parallelism needs the program checked at 1/N of its batch")
        ranks, inputs, outputs = data_parallel(whole, data_parallel_replica, replicas, tags)
        parallelism = f"data-parallel {replicas}"
    else:
        n = placed_ranks(whole)
        _fits(n, cluster, "devices the program places ops on")
        ranks = [expand_collectives([p], tags)[0] for p in place(whole, n, cluster.name, tags)]
        inputs = {
            t.name: HostLayout.of(t.name, "whole", _holding(ranks, t.name)) for t in whole.inputs()
        }
        outputs = {
            name: HostLayout.of(name, "whole", _holding(ranks, name, outputs=True)[:1])
            for name in whole.outputs
        }
        parallelism = "placement" if n > 1 else "one device"
    spec = cluster.device_spec
    programs = [compile_program(p, spec, options) for p in ranks]
    compiled = ClusterProgram(
        name=whole.name,
        cluster=cluster,
        whole=whole,
        ranks=ranks,
        programs=programs,
        inputs=inputs,
        outputs=outputs,
        parallelism=parallelism,
        meta=meta,
        params=params,
    )
    compiled.check_transfers()
    return compiled


def _holding(ranks: list[Program], name: str, outputs: bool = False) -> tuple[int, ...]:
    return tuple(r for r, p in enumerate(ranks) if name in (p.outputs if outputs else p.tensors))


def _fits(n: int, cluster: ClusterSpec, what: str) -> None:
    if n > cluster.devices:
        raise UsageError(
            f"{n} {what}, but cluster '{cluster.name}' has {cluster.devices} devices",
            hint="use a larger cluster, or fewer devices",
        )
