"""Data parallelism: N replicas of one program, each on 1/N of the batch.

A replica is the program checked at 1/N of its batch (the caller checks it: the program's batch
parameter divided by N), so every shape inside it is the replica's own. This pass compares the
whole program with the replica to say how each host tensor is laid out over the ranks: an input
whose leading dimension shrank N-fold is cut into N row blocks (rank r gets block r), one whose
shape did not change is given whole to every rank; an output likewise is joined from the ranks'
row blocks or — unchanged, as a value after an ``allreduce`` is — taken from rank 0 (every rank
holds the same bytes). Anything else (a dimension other than the first changed, or by another
factor) is refused, naming the tensor. The collectives are then expanded over the N replicas
(:mod:`.expand_collectives`).
"""

from __future__ import annotations

from dataclasses import replace

from rtgraph.compiler.parallel.expand_collectives import expand_collectives
from rtgraph.compiler.parallel.layouts import HostLayout, layout_of
from rtgraph.compiler.parallel.transfers import Tags
from rtgraph.errors import CheckError
from rtgraph.ir.graph import OpNode, Program


def data_parallel(
    whole: Program, replica: Program, replicas: int, tags: Tags | None = None
) -> tuple[list[Program], dict[str, HostLayout], dict[str, HostLayout]]:
    """The per-rank programs of ``replicas``-way data parallelism, and the layouts of the
    inputs and the outputs (see the module docstring)."""
    placed = next((n for n in replica.nodes if isinstance(n, OpNode) and n.device), None)
    if placed is not None:
        raise CheckError(
            "a data-parallel program places no ops: each replica runs all of it",
            placed.span,
            hint="drop the device[…] blocks, or compile without --data-parallel",
        )
    ranks = tuple(range(replicas))
    inputs = {
        t.name: HostLayout.of(t.name, layout_of(t, replica.tensors[t.name], replicas), ranks)
        for t in whole.inputs()
    }
    outputs = {
        name: HostLayout.of(
            name, layout_of(whole.tensors[name], replica.tensors[name], replicas), ranks
        )
        for name in whole.outputs
    }
    programs = [_renamed(replica, r) for r in ranks]
    return expand_collectives(programs, tags or Tags()), inputs, outputs


def _renamed(program: Program, rank: int) -> Program:
    return replace(program, name=f"{program.name}.d{rank}")
