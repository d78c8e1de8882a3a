"""Collective algorithms as data: which chunk goes from which rank to which, step by step.

A collective runs on a group of ``ranks`` devices (ranks 0 to n − 1), each holding a *working
buffer*: its input flattened (:func:`working_buffer`) and cut along the element order into
``chunks`` parts, chunk j being elements ``[j·N // chunks, (j + 1)·N // chunks)``
(:func:`chunk_bounds`; parts differ by at most one element when N does not divide). A
:class:`CollectivePlan` is the algorithm: a tuple of steps, each a tuple of :class:`Transfer`
(rank ``src`` sends its chunk ``chunk``; rank ``dst`` writes it into its chunk ``to_chunk``, or
adds it there when ``reduce``). A step's transfers run at once and each reads what the steps
before it left in ``src``'s buffer; two transfers of one step never land in the same chunk of
the same rank unless both reduce (they are then applied in the step's order). When the last step
is done, :func:`result` reads each rank's output from its buffer.

The compiler lowers each transfer into a ``send`` on the source rank and a ``recv``
(``recv_reduce``) on the destination (``rtgraph.compiler.parallel.expand_collectives``);
:func:`execute` runs a plan on NumPy arrays in their own dtype, so a test sees the algorithm's
own summation order, and :func:`reference` is the mathematics (sums in rank order).

Kinds (every output flat, in element order):

================  ===================================================================
allreduce         every rank gets the sum of all inputs
reduce_scatter    inputs of n·k elements; rank r gets chunk r of the sum (k elements)
allgather         inputs of k elements; every rank gets the n inputs concatenated, r's at r
broadcast         every rank gets rank ``root``'s input (the others' inputs are ignored)
alltoall          inputs of n·k elements; rank r's chunk j lands in rank j's output at r
================  ===================================================================

Algorithms (:data:`APPLIES` says which runs which kind; Thakur, Rabenseifner & Gropp 2005,
"Optimization of collective communication operations in MPICH"):

* ``ring`` — neighbours r → r + 1. allreduce: a reduce-scatter (n − 1 steps; chunk c is summed
  starting at rank c + 1 and ends complete on rank c) then an allgather (n − 1 steps).
  broadcast: a pipelined chain from the root in n chunks (2n − 2 steps). alltoall: pairwise
  exchange, step k sending r's chunk for rank r + k (n − 1 steps).
* ``halving_doubling`` (n a power of two) — reduce-scatter by recursive halving (partner
  r XOR n/2, n/4, …), allgather by recursive doubling (partner r XOR 1, 2, …); allreduce is
  both (Rabenseifner's), broadcast is a binomial scatter then the allgather (van de Geijn's).
* ``tree`` — binomial trees in one chunk: broadcast in ⌈log2 n⌉ steps; allreduce as a binomial
  reduce to the root, then a binomial broadcast.

:func:`analytic_us` gives each one's time with no contention (α per step, B per link direction).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from rtgraph.errors import RtgError

KINDS = ("allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall")
ALGORITHMS = ("ring", "halving_doubling", "tree")
#: The largest group a plan is made for (a cluster has at most as many devices).
MAX_RANKS = 1024


class CollectiveError(RtgError):
    """A collective that cannot be planned or run: an algorithm that does not apply to the kind
    or the group size, a root outside the group, participants that disagree on size or dtype."""


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


#: Which algorithms run which kind, and for which group sizes (a predicate and what it means).
APPLIES: dict[str, dict[str, tuple[Callable[[int], bool], str]]] = {
    "allreduce": {
        "ring": (lambda n: True, "any group size"),
        "halving_doubling": (_power_of_two, "a power-of-two group"),
        "tree": (lambda n: True, "any group size"),
    },
    "reduce_scatter": {
        "ring": (lambda n: True, "any group size"),
        "halving_doubling": (_power_of_two, "a power-of-two group"),
    },
    "allgather": {
        "ring": (lambda n: True, "any group size"),
        "halving_doubling": (_power_of_two, "a power-of-two group"),
    },
    "broadcast": {
        "ring": (lambda n: True, "any group size"),
        "halving_doubling": (_power_of_two, "a power-of-two group"),
        "tree": (lambda n: True, "any group size"),
    },
    "alltoall": {
        "ring": (lambda n: True, "any group size"),
    },
}


@dataclass(frozen=True)
class Transfer:
    """Rank ``src``'s chunk ``chunk`` goes to rank ``dst``'s chunk ``to_chunk``, added to it
    when ``reduce`` (else it overwrites it)."""

    src: int
    dst: int
    chunk: int
    to_chunk: int
    reduce: bool


@dataclass(frozen=True)
class CollectivePlan:
    """An algorithm for one kind and group size: the working buffer is cut into ``chunks``
    equal parts; the transfers of a step run at once, reading what steps before it left."""

    kind: str
    algorithm: str
    ranks: int
    root: int
    chunks: int
    steps: tuple[tuple[Transfer, ...], ...]

    @property
    def transfers(self) -> int:
        """How many transfers the plan makes (each a send and a receive)."""
        return sum(len(step) for step in self.steps)


# --- which algorithm ------------------------------------------------------------------------


def algorithms_for(kind: str, ranks: int) -> tuple[str, ...]:
    """The algorithms that run ``kind`` on a group of ``ranks``, in :data:`ALGORITHMS` order."""
    table = APPLIES[_kind(kind)]
    return tuple(a for a in ALGORITHMS if a in table and table[a][0](ranks))


def default_algorithm(kind: str, ranks: int) -> str:
    """The algorithm ``auto`` means: ``tree`` for broadcast (⌈log2 n⌉ steps), ``ring`` for the
    others (any group size; bandwidth-optimal for the large buffers collectives usually move)."""
    return "tree" if _kind(kind) == "broadcast" else "ring"


def _kind(kind: str) -> str:
    if kind not in KINDS:
        raise CollectiveError(f"unknown collective '{kind}'", hint=f"kinds: {', '.join(KINDS)}")
    return kind


def _check(kind: str, algorithm: str, ranks: int, root: int) -> None:
    _kind(kind)
    if isinstance(ranks, bool) or not isinstance(ranks, int) or not 1 <= ranks <= MAX_RANKS:
        raise CollectiveError(
            f"{kind}: a group of {ranks} ranks", hint=f"a group has 1 to {MAX_RANKS} ranks"
        )
    if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < ranks:
        raise CollectiveError(
            f"{kind}: root {root} is not a rank of the group of {ranks}",
            hint=f"ranks are 0 to {ranks - 1}",
        )
    table = APPLIES[kind]
    if algorithm not in table:
        raise CollectiveError(
            f"{kind} has no '{algorithm}' algorithm",
            hint=f"{kind} runs as {', '.join(table)}",
        )
    ok, needs = table[algorithm]
    if not ok(ranks):
        fits = ", ".join(algorithms_for(kind, ranks))
        raise CollectiveError(
            f"{kind} as {algorithm} needs {needs}, and the group has {ranks} ranks",
            hint=f"on {ranks} ranks {kind} runs as {fits}",
        )


# --- plans ----------------------------------------------------------------------------------


def plan(kind: str, algorithm: str, ranks: int, root: int = 0) -> CollectivePlan:
    """The steps of ``kind`` run as ``algorithm`` on ``ranks`` ranks (``root`` for broadcast;
    the others ignore it). A group of one has no steps."""
    _check(kind, algorithm, ranks, root)
    n = ranks
    chunks, steps = _PLANNERS[(kind, algorithm)](n, root)
    if n == 1:
        steps = []
    return CollectivePlan(kind, algorithm, n, root, chunks, tuple(tuple(s) for s in steps))


Steps = list[list[Transfer]]


def _ring_reduce_scatter(n: int) -> Steps:
    """Step k: rank r adds its chunk r − k − 1 into rank r + 1's; rank r ends with chunk r."""
    return [
        [Transfer(r, (r + 1) % n, (r - k - 1) % n, (r - k - 1) % n, True) for r in range(n)]
        for k in range(n - 1)
    ]


def _ring_allgather(n: int) -> Steps:
    """Step k: rank r passes chunk r − k (complete on it) on to rank r + 1."""
    return [
        [Transfer(r, (r + 1) % n, (r - k) % n, (r - k) % n, False) for r in range(n)]
        for k in range(n - 1)
    ]


def _halving_reduce_scatter(n: int) -> Steps:
    """Recursive halving: partner r XOR d for d = n/2, n/4, …, 1; each keeps the half of its
    range that holds its own index and adds the other half into the partner's."""
    steps: Steps = []
    d = n // 2
    while d >= 1:
        step = []
        for r in range(n):
            partner = r ^ d
            start = r & ~(2 * d - 1)  # the 2d chunks r is still summing
            give = start + d if r & d == 0 else start
            step += [Transfer(r, partner, c, c, True) for c in range(give, give + d)]
        steps.append(step)
        d //= 2
    return steps


def _doubling_allgather(n: int, rel: Callable[[int], int] = lambda v: v) -> Steps:
    """Recursive doubling over relative ranks v (rank ``rel(v)``), chunk v complete on v: at
    distance d = 1, 2, …, n/2, v sends its d complete chunks to v XOR d."""
    steps: Steps = []
    d = 1
    while d < n:
        step = []
        for v in range(n):
            start = v & ~(d - 1)
            step += [Transfer(rel(v), rel(v ^ d), c, c, False) for c in range(start, start + d)]
        steps.append(step)
        d *= 2
    return steps


def _binomial_reduce(n: int, root: int) -> Steps:
    """One chunk summed up a binomial tree into ``root``: at distance d = 1, 2, …, relative rank
    v with v mod 2d = d adds its buffer into v − d."""
    steps: Steps = []
    d = 1
    while d < n:
        steps.append(
            [Transfer((v + root) % n, (v - d + root) % n, 0, 0, True) for v in range(d, n, 2 * d)]
        )
        d *= 2
    return steps


def _binomial_broadcast(n: int, root: int) -> Steps:
    """One chunk down a binomial tree from ``root``: at distance d = 2^(⌈log2 n⌉−1), …, 1,
    relative rank v with v mod 2d = 0 sends to v + d."""
    steps: Steps = []
    d = 1 << max(0, (n - 1).bit_length() - 1)
    while d >= 1:
        step = [
            Transfer((v + root) % n, (v + d + root) % n, 0, 0, False)
            for v in range(0, n, 2 * d)
            if v + d < n
        ]
        if step:
            steps.append(step)
        d //= 2
    return steps


def _chain_broadcast(n: int, root: int) -> Steps:
    """A pipelined chain root → root + 1 → …: n chunks, the i-th hop carrying chunk t − i at
    step t, 2n − 2 steps."""
    return [
        [
            Transfer((i + root) % n, (i + 1 + root) % n, t - i, t - i, False)
            for i in range(n - 1)
            if 0 <= t - i < n
        ]
        for t in range(2 * n - 2)
    ]


def _scatter_allgather_broadcast(n: int, root: int) -> Steps:
    """van de Geijn: a binomial scatter by recursive halving (relative rank v ends with chunk
    v), then recursive doubling puts every chunk everywhere."""
    rank = lambda v: (v + root) % n  # noqa: E731 - the one mapping both phases share
    steps: Steps = []
    d = n // 2
    while d >= 1:
        steps.append(
            [
                Transfer(rank(v), rank(v + d), c, c, False)
                for v in range(0, n, 2 * d)
                for c in range(v + d, v + 2 * d)
            ]
        )
        d //= 2
    return steps + _doubling_allgather(n, rank)


def _pairwise_alltoall(n: int) -> Steps:
    """Step k = 1 … n − 1: rank r sends chunk j = r + k of its input half to rank j, landing
    at chunk n + r of j's output half (rank r's own part is copied by :func:`working_buffer`)."""
    return [
        [Transfer(r, (r + k) % n, (r + k) % n, n + r, False) for r in range(n)] for k in range(1, n)
    ]


_PLANNERS: dict[tuple[str, str], Callable[[int, int], tuple[int, Steps]]] = {
    ("allreduce", "ring"): lambda n, root: (n, _ring_reduce_scatter(n) + _ring_allgather(n)),
    ("allreduce", "halving_doubling"): lambda n, root: (
        n,
        _halving_reduce_scatter(n) + _doubling_allgather(n),
    ),
    ("allreduce", "tree"): lambda n, root: (
        1,
        _binomial_reduce(n, 0) + _binomial_broadcast(n, 0),
    ),
    ("reduce_scatter", "ring"): lambda n, root: (n, _ring_reduce_scatter(n)),
    ("reduce_scatter", "halving_doubling"): lambda n, root: (n, _halving_reduce_scatter(n)),
    ("allgather", "ring"): lambda n, root: (n, _ring_allgather(n)),
    ("allgather", "halving_doubling"): lambda n, root: (n, _doubling_allgather(n)),
    ("broadcast", "ring"): lambda n, root: (n, _chain_broadcast(n, root)),
    ("broadcast", "halving_doubling"): lambda n, root: (n, _scatter_allgather_broadcast(n, root)),
    ("broadcast", "tree"): lambda n, root: (1, _binomial_broadcast(n, root)),
    ("alltoall", "ring"): lambda n, root: (2 * n, _pairwise_alltoall(n)),
}


# --- buffers --------------------------------------------------------------------------------


def chunk_bounds(numel: int, chunks: int) -> list[tuple[int, int]]:
    """Chunk j of a buffer of ``numel`` elements: ``[j·numel // chunks, (j+1)·numel // chunks)``."""
    return [(j * numel // chunks, (j + 1) * numel // chunks) for j in range(chunks)]


def _divides(kind: str, ranks: int, size: int) -> None:
    if size % ranks:
        raise CollectiveError(
            f"{kind} on {ranks} ranks: an input of {size} elements does not cut into "
            f"{ranks} equal parts",
            hint=f"{kind} needs an input whose size is a multiple of the group's",
        )


def working_buffer(kind: str, ranks: int, rank: int, inp: np.ndarray) -> np.ndarray:
    """Rank ``rank``'s working buffer for ``kind``, made from its input (a new flat array):

    allreduce, reduce_scatter, broadcast — the input; allgather — n inputs' room, the rank's own
    at chunk ``rank`` (zeros elsewhere); alltoall — 2n chunks, the input in the first n and the
    output in the last n, the rank's own part already in place.
    """
    flat = np.asarray(inp).reshape(-1)
    if _kind(kind) in ("allreduce", "broadcast"):
        return flat.copy()
    if kind == "reduce_scatter":
        _divides(kind, ranks, flat.size)
        return flat.copy()
    if kind == "allgather":
        work = np.zeros(ranks * flat.size, flat.dtype)
        work[rank * flat.size : (rank + 1) * flat.size] = flat
        return work
    _divides(kind, ranks, flat.size)
    k = flat.size // ranks
    work = np.zeros(2 * flat.size, flat.dtype)
    work[: flat.size] = flat
    work[flat.size + rank * k : flat.size + (rank + 1) * k] = flat[rank * k : (rank + 1) * k]
    return work


def result(kind: str, ranks: int, rank: int, work: np.ndarray) -> np.ndarray:
    """Rank ``rank``'s output, read from its working buffer after the last step."""
    if _kind(kind) == "reduce_scatter":
        lo, hi = chunk_bounds(work.size, ranks)[rank]
        return work[lo:hi].copy()
    if kind == "alltoall":
        return work[work.size // 2 :].copy()
    return work.copy()


def execute(p: CollectivePlan, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run ``p`` on one input per rank, in the inputs' dtype and the plan's order: each step's
    payloads are read first, then written (added, for a reduce) in the step's order."""
    if len(inputs) != p.ranks:
        raise CollectiveError(
            f"{p.kind} on {p.ranks} ranks was given {len(inputs)} inputs",
            hint="give one input per rank",
        )
    arrays = [np.asarray(x) for x in inputs]
    for r, x in enumerate(arrays):
        if x.size != arrays[0].size or x.dtype != arrays[0].dtype:
            raise CollectiveError(
                f"{p.kind}: participants disagree: rank 0 has {arrays[0].size} × "
                f"{arrays[0].dtype}, rank {r} has {x.size} × {x.dtype}",
                hint="every rank of a collective passes the same size and dtype",
            )
    bufs = [working_buffer(p.kind, p.ranks, r, x) for r, x in enumerate(arrays)]
    bounds = chunk_bounds(bufs[0].size, p.chunks)
    for step in p.steps:
        payloads = [bufs[t.src][slice(*bounds[t.chunk])].copy() for t in step]
        for t, data in zip(step, payloads, strict=True):
            into = bufs[t.dst][slice(*bounds[t.to_chunk])]
            if t.reduce:
                into += data
            else:
                into[...] = data
    return [result(p.kind, p.ranks, r, b) for r, b in enumerate(bufs)]


def reference(kind: str, inputs: Sequence[np.ndarray], root: int = 0) -> list[np.ndarray]:
    """The mathematics of ``kind`` (flat outputs, one per rank), sums in rank order in the
    inputs' dtype."""
    flats = [np.asarray(x).reshape(-1) for x in inputs]
    n = len(flats)
    if _kind(kind) in ("allreduce", "reduce_scatter"):
        total = flats[0].copy()
        for x in flats[1:]:
            total = total + x
        if kind == "allreduce":
            return [total.copy() for _ in range(n)]
        _divides(kind, n, total.size)
        return [total[lo:hi].copy() for lo, hi in chunk_bounds(total.size, n)]
    if kind == "allgather":
        return [np.concatenate(flats) for _ in range(n)]
    if kind == "broadcast":
        return [flats[root].copy() for _ in range(n)]
    parts = []
    for x in flats:
        _divides(kind, n, x.size)
        parts.append(np.split(x, n))
    return [np.concatenate([parts[r][j] for r in range(n)]) for j in range(n)]


# --- time -----------------------------------------------------------------------------------


def analytic_us(
    kind: str, algorithm: str, ranks: int, nbytes: float, alpha_us: float, bandwidth: float
) -> float:
    """The time of ``kind`` as ``algorithm`` with no contention, in µs: every step costs α plus
    its largest per-link payload at ``bandwidth`` B/s (Thakur, Rabenseifner & Gropp 2005).

    ``nbytes`` S is the working buffer's size: the vector (allreduce, broadcast), the whole
    input (reduce_scatter, alltoall's per-rank input) or the whole output (allgather). With
    β = S / B in µs and p = log2 n:

    * ring allreduce 2(n−1)(α + β/n); reduce_scatter, allgather, alltoall (n−1)(α + β/n);
      broadcast (pipelined chain, n chunks) 2(n−1)(α + β/n)
    * halving_doubling allreduce and broadcast 2pα + 2(n−1)/n·β; reduce_scatter, allgather
      pα + (n−1)/n·β
    * tree broadcast ⌈log2 n⌉(α + β); allreduce 2⌈log2 n⌉(α + β)
    """
    _check(kind, algorithm, ranks, 0)
    n = ranks
    if n == 1:
        return 0.0
    beta = nbytes * 1e6 / bandwidth
    a = alpha_us
    log_n = math.ceil(math.log2(n))
    if algorithm == "tree":
        return (2 if kind == "allreduce" else 1) * log_n * (a + beta)
    if algorithm == "halving_doubling":
        one = log_n * a + (n - 1) / n * beta
        return 2 * one if kind in ("allreduce", "broadcast") else one
    per_step = a + beta / n
    return (2 if kind in ("allreduce", "broadcast") else 1) * (n - 1) * per_step
