"""Pipeline parallelism: the program's ops cut into stages, one device each, and the batch into
micro-batches that flow through the stages — GPipe's and 1F1B's schedules.

A micro-batch is the program checked at 1/M of its batch (the caller checks it, as for data
parallelism), copied once per micro-batch with its values renamed ``name@j``. Stages:

* **named** — the program's ``device[i]`` blocks say which stage each op is on;
* **balanced** — otherwise the ops, in program order, are cut into P contiguous runs whose
  largest estimated time (the cost model's, on the cluster's device) is as small as it can be
  (a binary search on that largest time, each probe a greedy pass: O(n log)).

A value made on one stage and read on another is sent once per micro-batch and reading stage,
as placement does (:mod:`.place`). An op is *backward* when it reads, directly or through ops of
its own stage, a value made on a later stage — the gradient a hand-written backward pass sends
back (there is no autodiff: a program that writes no backward ops is forward only). Each stage's
ops of one micro-batch are thus two units, F and B, and the schedule orders the units on each
device (Huang et al. 2019, GPipe; Narayanan et al. 2021, Megatron-LM's non-interleaved 1F1B):

* ``gpipe`` — every F in micro-batch order, then every B in reverse;
* ``1f1b`` — stage s runs min(P − s − 1, M) F's to warm up, then alternates one F and one B,
  then drains the remaining B's: at most P − s micro-batches' activations live at once where
  GPipe keeps all M (the memory planner sees exactly those lifetimes).

A collective in a pipelined program sums over the micro-batches (as it sums over replicas under
data parallelism): ``g = allreduce(x)`` becomes ``x@0 + x@1 + …`` accumulated on x's stage in
micro-batch order, complete after the last micro-batch — so only an output may read it. Host
inputs cut by rows give micro-batch j its block j; outputs are gathered the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rtgraph.compiler.parallel.layouts import HostLayout, layout_of
from rtgraph.compiler.parallel.transfers import Tags, device_program, recv_node, send_node
from rtgraph.device.spec import DeviceSpec
from rtgraph.errors import CheckError, UsageError
from rtgraph.ir.graph import HostCopyNode, Node, OpNode, Program, Tensor
from rtgraph.ops import lookup
from rtgraph.ops.comm import COLLECTIVES
from rtgraph.timing.costmodel import arithmetic_dtype, block_dim_for, estimate_us

SCHEDULES = ("gpipe", "1f1b")
_RESIDENT = ("param", "const", "buffer")


@dataclass(frozen=True)
class Stages:
    """Which stage each op of the micro-batch program runs on, and whether it is backward."""

    of: tuple[int, ...]
    backward: tuple[bool, ...]
    named: bool
    estimated_us: tuple[float, ...]  # per stage: the cost model's sum over its ops


def pipeline_parallel(
    whole: Program,
    micro: Program,
    stages: int,
    micro_batches: int,
    schedule: str,
    spec: DeviceSpec,
    tags: Tags | None = None,
) -> tuple[list[Program], dict[str, HostLayout], dict[str, HostLayout], Stages]:
    """The per-stage programs of ``micro`` (``whole`` checked at 1/``micro_batches`` of its
    batch) over ``stages`` devices, the host tensors' layouts, and the stage assignment."""
    if schedule not in SCHEDULES:
        raise UsageError(f"unknown pipeline schedule {schedule!r}", hint="gpipe or 1f1b")
    ops = _ops_only(micro)
    cut = assign_stages(micro, ops, stages, spec)
    return (*_build(whole, micro, ops, cut, stages, micro_batches, schedule, tags or Tags()), cut)


def _ops_only(micro: Program) -> list[OpNode]:
    other = next((n for n in micro.nodes if not isinstance(n, OpNode) or n.stream), None)
    if other is not None:
        raise CheckError(
            "a pipelined program has no explicit streams, events, syncs or host copies: each "
            "stage's device chooses its own",
            getattr(other, "span", None),
            hint="drop the stream control, or compile without --pipeline",
        )
    return [n for n in micro.nodes if isinstance(n, OpNode)]


def assign_stages(micro: Program, ops: list[OpNode], stages: int, spec: DeviceSpec) -> Stages:
    """Named stages (``device[i]``) where the program places ops, else balanced ones."""
    costs = [op_cost_us(n, micro, spec) for n in ops]
    named = any(n.device is not None for n in ops)
    if named:
        for n in ops:
            if (n.device or 0) >= stages:
                raise CheckError(
                    f"device[{n.device}] names a stage past the pipeline's {stages}",
                    n.span,
                    hint=f"stages are 0 to {stages - 1}, or give --pipeline {n.device + 1}",
                )
        of = [n.device or 0 for n in ops]
    else:
        of = balanced(costs, stages, crossing_bytes(micro, ops))
    home: dict[str, int] = {}
    back_value: set[str] = set()
    backward = []
    for n, s in zip(ops, of, strict=True):
        b = any(
            (i in home and home[i] > s) or (home.get(i) == s and i in back_value) for i in n.inputs
        )
        backward.append(b)
        home[n.output] = s
        if b:
            back_value.add(n.output)
    per_stage = [0.0] * stages
    for s, c in zip(of, costs, strict=True):
        per_stage[s] += c
    return Stages(tuple(of), tuple(backward), named, tuple(per_stage))


def op_cost_us(node: OpNode, program: Program, spec: DeviceSpec) -> float:
    """The cost model's time of one op on one device (a collective's: 0 — it is a sum here)."""
    if node.op in COLLECTIVES:
        return 0.0
    if node.op == "kernel":
        return float(node.attrs["us"])
    opdef = lookup(node.op)
    assert opdef is not None, node.op
    ins = [program.tensors[i].type for i in node.inputs]
    out = program.tensors[node.output].type
    cost = opdef.cost(ins, out, node.attrs)
    unit = opdef.unit_for(node.attrs)
    moved = cost.bytes_read + cost.bytes_written
    cores = block_dim_for(unit, cost.flops, moved, spec, None)
    dtype = arithmetic_dtype(unit, [t.dtype for t in ins], out.dtype)
    return estimate_us(unit, dtype, cost.flops, moved, cores, spec)


#: How much longer than the best balance a stage may be to cut where fewer bytes cross.
BYTES_SLACK = 1.02
#: Programs up to this many ops get the byte-aware cut (a DP over cut positions); longer ones
#: the greedy one.
BYTES_DP_OPS = 3000


def crossing_bytes(program: Program, ops: list[OpNode]) -> list[int]:
    """Per position k (0 < k < n): the bytes of the values made before op k and read at or
    after it — what a stage boundary there must send (once per value; a difference array)."""
    n = len(ops)
    diff = [0] * (n + 1)
    made = {x.output: k for k, x in enumerate(ops)}
    last: dict[str, int] = {}
    for k, x in enumerate(ops):
        for i in x.inputs:
            if i in made:
                last[i] = k
    for name, k in last.items():
        a = made[name]
        if k > a:
            nbytes = program.tensors[name].type.nbytes
            diff[a + 1] += nbytes
            diff[k + 1] -= nbytes
    out, run = [], 0
    for k in range(n):
        run += diff[k]
        out.append(run)
    return out


def balanced(costs: list[float], stages: int, crossing: list[int] | None = None) -> list[int]:
    """Each op's stage: ``costs`` cut into at most ``stages`` contiguous runs, the largest run's
    sum as small as possible (binary search on it; greedy fill per probe), every stage given at
    least one op where there are enough. Given ``crossing`` (:func:`crossing_bytes`), among the
    cuts whose largest run is within :data:`BYTES_SLACK` of that best, the one sending the
    fewest bytes across its boundaries (a DP over cut positions): a cut after a residual add
    sends one tensor, one after the next layer's norm two."""
    n = len(costs)
    if n == 0:
        return []
    lo, hi = max(costs), sum(costs)
    for _ in range(60):
        if hi - lo <= 1e-9 * max(hi, 1.0):
            break
        mid = (lo + hi) / 2
        if len(_fill(costs, mid)) <= stages:
            hi = mid
        else:
            lo = mid
    runs = _fill(costs, hi)
    if crossing is not None and len(runs) == stages and n <= BYTES_DP_OPS:
        runs = _fewest_bytes(costs, stages, hi * BYTES_SLACK, crossing) or runs
    while len(runs) < min(stages, n):  # split the longest run that can be split
        k = max(
            (r for r in range(len(runs)) if runs[r][1] - runs[r][0] > 1),
            key=lambda r: runs[r][1] - runs[r][0],
        )
        a, b = runs[k]
        runs[k : k + 1] = [(a, b - 1), (b - 1, b)]
    of = [0] * n
    for s, (a, b) in enumerate(runs):
        of[a:b] = [s] * (b - a)
    return of


def _fewest_bytes(
    costs: list[float], stages: int, cap: float, crossing: list[int]
) -> list[tuple[int, int]] | None:
    """``stages`` runs, each summing to at most ``cap``, whose boundaries send the fewest
    bytes: best[s][j] = min over i of best[s − 1][i] + crossing[i] for runs i..j within the cap
    (two pointers bound each window); None when no such cut exists."""
    n = len(costs)
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    inf = float("inf")
    best = [inf] * (n + 1)
    best[0] = 0.0
    choice: list[list[int]] = []
    for _ in range(stages):
        new = [inf] * (n + 1)
        back = [-1] * (n + 1)
        for j in range(1, n + 1):
            i = j - 1
            while i >= 0 and prefix[j] - prefix[i] <= cap * (1 + 1e-12):
                if best[i] < inf:
                    cost = best[i] + (crossing[i] if i > 0 else 0)
                    if cost < new[j]:
                        new[j], back[j] = cost, i
                i -= 1
        best = new
        choice.append(back)
    if best[n] == inf:
        return None
    runs, j = [], n
    for s in reversed(range(stages)):
        i = choice[s][j]
        runs.append((i, j))
        j = i
    return list(reversed(runs))


def _fill(costs: list[float], cap: float) -> list[tuple[int, int]]:
    runs, start, total = [], 0, 0.0
    for k, c in enumerate(costs):
        if total + c > cap and k > start:
            runs.append((start, k))
            start, total = k, 0.0
        total += c
    runs.append((start, len(costs)))
    return runs


def _build(
    whole: Program,
    micro: Program,
    ops: list[OpNode],
    cut: Stages,
    stages: int,
    m: int,
    schedule: str,
    tags: Tags,
) -> tuple[list[Program], dict[str, HostLayout], dict[str, HostLayout]]:
    tensors = micro.tensors
    rows = {t.name: layout_of(t, tensors[t.name], m) for t in whole.inputs()}
    out_layout = {name: layout_of(whole.tensors[name], tensors[name], m) for name in whole.outputs}
    home = {n.output: s for n, s in zip(ops, cut.of, strict=True)}
    producer = {n.output: k for k, n in enumerate(ops)}
    summed = _summed(ops, micro)
    units: dict[tuple[int, int, bool], list[Node]] = {}
    made: list[dict[str, Tensor]] = [{} for _ in range(stages)]
    in_parts: dict[str, list[tuple[int, str, int]]] = {name: [] for name in rows}
    have: list[set[str]] = [set() for _ in range(stages)]

    def local(name: str, j: int) -> str:
        t = tensors[name]
        if t.kind in _RESIDENT or (t.kind == "input" and rows[name] == "whole"):
            return name
        return f"{name}@{j}"

    def declare(s: int, name: str, j: int, unit: list) -> str:
        """``name``'s tensor on stage s for micro-batch j; a host input's first use there is
        where its copy goes (the micro-batch's rows arrive when its forward starts, not all
        at the program's start: a copied-in input lives from its copy to its last use)."""
        there = local(name, j)
        if there not in made[s]:
            made[s][there] = replace(tensors[name], name=there)
            if tensors[name].kind == "input":
                block = j if rows[name] == "rows" else 0
                in_parts[name].append((s, there, block))
                unit.append(HostCopyNode("h2d", there, "", tensors[name].span))
        return there

    for j in range(m):
        for n, s, back in zip(ops, cut.of, cut.backward, strict=True):
            unit = units.setdefault((s, j, back), [])
            inputs = []
            for i in n.inputs:
                src = home.get(i)
                if src is not None and src != s and (f"{i}@{j}") not in have[s]:
                    tag = tags.next()
                    src_back = cut.backward[producer[i]]
                    send, token = send_node(f"{i}@{j}", s, tag, src, n.span)
                    units[(src, j, src_back)].append(send)
                    made[src][token.name] = token
                    recv, value = recv_node(replace(tensors[i], name=f"{i}@{j}"), src, tag, s)
                    unit.append(recv)
                    made[s][value.name] = value
                    have[s].add(value.name)
                inputs.append(f"{i}@{j}" if src is not None else declare(s, i, j, unit))
            if n.op in COLLECTIVES:
                unit.append(_Term(n, inputs[0]))  # summed in the order the schedule runs them
                continue
            out = f"{n.output}@{j}"
            made[s][out] = replace(tensors[n.output], name=out)
            have[s].add(out)
            unit.append(replace(n, inputs=tuple(inputs), output=out, device=s))
    outputs: dict[str, HostLayout] = {}
    rank_outputs: list[list[str]] = [[] for _ in range(stages)]
    for name in whole.outputs:
        s = home.get(name, 0)
        if name in summed:
            parts = ((s, name, 0),)
        elif out_layout[name] == "rows":
            parts = tuple((s, f"{name}@{j}", j) for j in range(m))
        else:
            parts = ((s, local(name, 0) if name not in home else f"{name}@0", 0),)
            if name not in home:
                declare(s, name, 0, units.setdefault((s, 0, False), []))
        outputs[name] = HostLayout(out_layout[name], m if out_layout[name] == "rows" else 1, parts)
        rank_outputs[s].extend(p[1] for p in parts)
    inputs = {
        name: HostLayout(rows[name], m if rows[name] == "rows" else 1, tuple(parts))
        for name, parts in in_parts.items()
    }
    programs = []
    for s in range(stages):
        order = _order(s, stages, m, schedule)
        nodes = _summed_in_order(
            [x for key in order for x in units.get(key, [])], m, s, made, tensors
        )
        programs.append(device_program(micro, s, nodes, made[s], rank_outputs[s]))
    return programs, inputs, outputs


def _summed(ops: list[OpNode], micro: Program) -> set[str]:
    """The collectives' results (sums over micro-batches); refused where an op reads one."""
    summed = {n.output for n in ops if n.op in COLLECTIVES}
    for n in ops:
        if n.op in COLLECTIVES and n.op != "allreduce":
            raise CheckError(
                f"{n.op} has no meaning across the micro-batches of a pipeline",
                n.span,
                hint="a pipelined program sums micro-batches with allreduce",
            )
        read = summed.intersection(n.inputs)
        if read:
            raise CheckError(
                f"'{sorted(read)[0]}' is a sum over every micro-batch, complete only after the "
                "last one: no op of a micro-batch can read it",
                n.span,
                hint="make the sum an output (apply it in the next step)",
            )
    return summed


@dataclass(frozen=True)
class _Term:
    """Micro-batch ``term`` of the sum ``node`` (an ``allreduce``) makes."""

    node: OpNode
    term: str


def _summed_in_order(
    nodes: list[Node | _Term],
    m: int,
    s: int,
    made: list[dict[str, Tensor]],
    tensors: dict[str, Tensor],
) -> list[Node]:
    """``nodes`` with each sum's terms accumulated where they come: the first a ``copy``, each
    next one an ``add`` to the running sum, the last under the sum's own name. Each is pinned
    where it is (``after=`` its term: the optimizer moves no such op), so a micro-batch's term
    dies as soon as it is added — fused into one n-ary sum at the end, every term would live
    until the last micro-batch."""
    seen: dict[str, int] = {}
    out: list[Node] = []
    for x in nodes:
        if not isinstance(x, _Term):
            out.append(x)
            continue
        n, k = x.node, seen.get(x.node.output, 0)
        seen[n.output] = k + 1
        name = n.output if k == m - 1 else f"{n.output}@acc{k}"
        made[s][name] = replace(tensors[n.output], name=name)
        if k == 0:
            out.append(OpNode("copy", (x.term,), name, {}, n.span, after=(x.term,), device=s))
        else:
            running = f"{n.output}@acc{k - 1}"
            out.append(
                OpNode("add", (running, x.term), name, {}, n.span, after=(x.term,), device=s)
            )
    return out


def _order(s: int, p: int, m: int, schedule: str) -> list[tuple[int, int, bool]]:
    """Stage s's units in the order the schedule runs them: (stage, micro-batch, backward)."""
    fwd = [(s, j, False) for j in range(m)]
    if schedule == "gpipe":
        return fwd + [(s, j, True) for j in reversed(range(m))]
    warm = min(p - s - 1, m)
    order = fwd[:warm]
    for j in range(m - warm):
        order += [(s, warm + j, False), (s, j, True)]
    order += [(s, j, True) for j in range(m - warm, m)]
    return order
