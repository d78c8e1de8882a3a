"""The request loop: arrivals, a batching policy, steps charged at their emulated cost.

One device serves one batch at a time (the emulated step already overlaps the host's
submission with the device's work). Batch-level policies (none, static, dynamic) hand a batch
to the device and take the next when it is done; continuous batching re-forms the batch after
every step. The loop advances from decision to decision — the next arrival, a batch's end, a
dynamic batcher's deadline — so a run costs one Python iteration per batch or per step, and the
step costs come from the :class:`~rtgraph.serving.steps.StepTable` (emulated once per shape).
With a token budget, continuous batching prefills prompts in chunks that ride along with the
decode steps (Sarathi-Serve's chunked prefill, :func:`_serve_chunked`). A decoder's KV blocks
are allocated and freed through the run-time allocator (:mod:`rtgraph.serving.kvcache`).

Request merging: with ``merge``, waiting requests with one key (the same prompt and the same
parameters — for the image model the seed and step count, for a decoder the output length with
deterministic decoding) are served as one: they take one slot of the batch and all receive its
result when it ends. A request that arrives after its twin started is not merged (the work has
begun); continuous batching does not merge.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

import numpy as np

from rtgraph.serving.arrivals import Requests
from rtgraph.serving.kvcache import KVCache
from rtgraph.serving.policies import Policy
from rtgraph.serving.requests import ServingError
from rtgraph.serving.steps import MIN_TOKENS, StepTable, bucket


@dataclass(frozen=True)
class Workload:
    """What one request asks of the model: ``denoise_steps`` UNet steps (image model);
    ``merge`` identical waiting requests; the decoder's KV pool (``kv_blocks`` None: sized from
    the device's memory) in blocks of ``kv_block`` tokens, a full pool preempting by
    ``recompute`` or ``swap`` (``preempt``); ``host_prep_s`` of the host's CPU
    per request (tokenising, latents) before it can join a batch — one host thread, in arrival
    order, overlapping the device's steps (the runtime's "the host prepares the next request
    while the NPU computes")."""

    denoise_steps: int = 50
    merge: bool = False
    kv_block: int = 16
    kv_blocks: int | None = None
    host_prep_s: float = 0.0
    preempt: str = "recompute"


@dataclass
class Outcome:
    """Per request: when it started, produced its first output and finished (s); per step:
    start, end, slots and requests served; the queue, KV use and TBT gaps over the run."""

    requests: Requests
    policy: Policy
    kind: str
    start: np.ndarray
    first: np.ndarray
    finish: np.ndarray
    steps: dict[str, list] = field(default_factory=dict)
    queue: list[tuple[float, int]] = field(default_factory=list)
    kv: list[tuple[float, int]] = field(default_factory=list)
    kv_total: int = 0
    tbt: list[tuple[float, int]] = field(default_factory=list)
    preemptions: int = 0
    prefilled: np.ndarray | None = None  # chunked prefill: prompt tokens each had prefilled
    iteration_tokens: list[int] = field(default_factory=list)  # chunked: tokens an iteration
    cache: KVCache | None = None  # a decoder's KV cache: its allocator's figures at the end

    def record_step(self, phase: str, start: float, end: float, slots: int, served: int) -> None:
        for name, value in (
            ("phase", phase),
            ("start", start),
            ("end", end),
            ("slots", slots),
            ("served", served),
        ):
            self.steps.setdefault(name, []).append(value)


def simulate(
    requests: Requests, policy: Policy, table: StepTable, workload: Workload = Workload()
) -> Outcome:
    """Serve every request and return what happened to each."""
    n = len(requests)
    nan = np.full(n, np.nan)
    ready = host_ready(requests.arrival, workload.host_prep_s)
    queued = Requests(ready, requests.prompt, requests.output, requests.key)
    out = Outcome(queued, policy, table.kind, nan.copy(), nan.copy(), nan.copy())
    try:
        _serve(out, table, workload)
    finally:
        out.requests = requests  # latencies count from the arrival, not from the host's prep
    return out


def host_ready(arrival: np.ndarray, prep_s: float) -> np.ndarray:
    """When the host has prepared each request: one thread, in arrival order (Lindley)."""
    if prep_s <= 0:
        return arrival
    ready = np.empty_like(arrival)
    done = 0.0
    for i, a in enumerate(arrival.tolist()):
        done = max(a, done) + prep_s
        ready[i] = done
    return ready


def _serve(out: Outcome, table: StepTable, workload: Workload) -> None:
    requests, policy = out.requests, out.policy
    n = len(requests)
    if table.kind == "image":
        if policy.kind == "continuous":
            raise ServingError(
                "continuous batching is iteration-level batching for decoders",
                hint="the image model takes none, static:B or dynamic:max=B,wait=T",
            )
        _serve_batches(out, table, workload, None)
        return
    cache = _kv_cache(table, workload)
    cache.serve(n)
    out.cache = cache
    cache.check_fits(int((requests.prompt + requests.output).max()) if n else 1)
    out.kv_total = cache.total_blocks
    if policy.kind == "continuous" and policy.budget:
        _serve_chunked(out, table, cache, _swap_cost(table, cache, workload.preempt))
    elif policy.kind == "continuous":
        _serve_continuous(out, table, cache, _swap_cost(table, cache, workload.preempt))
    else:
        _serve_batches(out, table, workload, cache)


def _kv_cache(table: StepTable, workload: Workload) -> KVCache:
    free = 0
    if workload.kv_blocks is None:
        largest = table.step("prefill", 1, 1024)[1]
        free = max(table.capacity_bytes() - largest, 0)
    return KVCache.for_decoder(
        table.param("L"),
        table.param("D"),
        workload.kv_block,
        workload.kv_blocks,
        free,
        table.memory_spec(),
    )


def _swap_cost(table: StepTable, cache: KVCache, preempt: str):
    """Seconds to copy n blocks over the host link (None: preempt by recompute)."""
    if preempt == "recompute":
        return None
    if preempt != "swap":
        raise ServingError(f"unknown preemption {preempt!r}", hint="recompute or swap")
    bandwidth, latency = table.host_link()
    return lambda blocks: latency + blocks * cache.bytes_per_block / bandwidth


# --- batch-level policies: none, static:B, dynamic:max=B,wait=T ---------------------------------


def _serve_batches(out: Outcome, table: StepTable, workload: Workload, cache) -> None:
    req, policy = out.requests, out.policy
    n = len(req)
    size = 1 if policy.kind == "none" else policy.max_batch
    keys = req.key if workload.merge or policy.merge else np.arange(n)
    waiting: OrderedDict[int, list[int]] = OrderedDict()  # key → its waiting requests, oldest first
    count = nxt = 0
    free = 0.0
    while nxt < n or waiting:
        while nxt < n and req.arrival[nxt] <= free:
            waiting.setdefault(int(keys[nxt]), []).append(nxt)
            nxt, count = nxt + 1, count + 1
            out.queue.append((float(req.arrival[nxt - 1]), count))
        if not waiting:
            free = float(req.arrival[nxt])
            continue
        if len(waiting) < size and policy.kind == "static" and nxt < n:
            free = float(req.arrival[nxt])  # wait for a full batch (the last one leaves part-full)
            continue
        take = size
        if policy.kind == "dynamic":
            filled = [p for p in policy.preferred if p <= len(waiting)]
            if filled:  # Triton: the largest preferred batch that can be formed goes now
                take = filled[-1]
            elif len(waiting) < size:
                oldest = req.arrival[next(iter(waiting.values()))[0]]
                deadline = float(oldest) + policy.wait_s
                if nxt < n and req.arrival[nxt] <= deadline:
                    free = max(free, float(req.arrival[nxt]))
                    continue
                free = max(free, deadline)  # the oldest has waited long enough
        slots = _take(waiting, take, req, cache)
        members = [i for group in slots for i in group]
        count -= len(members)
        out.queue.append((free, count))
        free = _run_batch(out, table, workload, cache, slots, free)


def _take(waiting: OrderedDict, size: int, req: Requests, cache) -> list[list[int]]:
    """The oldest ``size`` waiting keys (fewer if their KV reservation would not fit)."""
    slots: list[list[int]] = []
    reserved = 0
    while waiting and len(slots) < size:
        key, group = next(iter(waiting.items()))
        if cache is not None:
            need = int(cache.blocks(int(req.prompt[group[0]] + req.output[group[0]])))
            if slots and reserved + need > cache.total_blocks:
                break
            reserved += need
        slots.append(group)
        del waiting[key]
    return slots


def _run_batch(out, table, workload, cache, slots, start: float) -> float:
    req = out.requests
    heads = np.array([group[0] for group in slots])
    members = np.array([i for group in slots for i in group])
    slot_of = np.repeat(np.arange(len(slots)), [len(g) for g in slots])
    out.start[members] = start
    b = len(slots)
    if out.kind == "image":
        end = start + workload.denoise_steps * table.latency_s("denoise", b)
        out.record_step("denoise", start, end, b, len(members))
        out.first[members] = out.finish[members] = end
        return end
    # Static decoding (FasterTransformer): one prefill, then decode steps for the whole batch
    # until its longest output is done; every slot's KV blocks are reserved for the batch.
    prompts, outputs = req.prompt[heads], req.output[heads]
    cache.hold(heads, prompts + outputs)
    out.kv.append((start, cache.used))
    t = start + table.latency_s("prefill", b, int(prompts.max()))
    out.record_step("prefill", start, t, b, len(members))
    first = t
    longest = int(outputs.max())
    ctx = int(prompts.max()) + np.arange(1, longest)
    costs = np.array([table.latency_s("decode", b, 0, int(c)) for c in ctx])
    ends = t + np.cumsum(costs)
    if len(costs):
        still = (outputs[:, None] - 1 > np.arange(longest - 1)[None, :]).sum(axis=0)
        shared = np.array([len(g) for g in slots])
        weights = (shared[:, None] * (outputs[:, None] - 1 > np.arange(longest - 1))).sum(0)
        out.tbt.extend(zip(costs.tolist(), weights.tolist(), strict=True))
        out.steps.setdefault("phase", []).extend(["decode"] * len(costs))
        out.steps.setdefault("start", []).extend(np.concatenate([[t], ends[:-1]]).tolist())
        out.steps.setdefault("end", []).extend(ends.tolist())
        out.steps.setdefault("slots", []).extend([b] * len(costs))
        out.steps.setdefault("served", []).extend(still.tolist())
    done = np.where(outputs > 1, ends[np.maximum(outputs - 2, 0)] if len(costs) else first, first)
    out.first[members] = first
    out.finish[members] = done[slot_of]
    end = float(ends[-1]) if len(costs) else first
    cache.release(heads)
    out.kv.append((end, cache.used))
    return end


# --- continuous batching (Orca, vLLM) -----------------------------------------------------------


def _serve_continuous(out: Outcome, table: StepTable, cache: KVCache, swap) -> None:
    """vLLM's loop: after each step, admit waiting sequences (a prefill step; a swapped-out
    one is copied back instead) while the batch and the KV cache have room, else run one
    decode step for every running sequence."""
    req = out.requests
    n = len(req)
    size = out.policy.max_batch
    made = np.zeros(n, dtype=np.int64)  # tokens made so far
    last = np.zeros(n)  # when each made its last token
    swapped = np.zeros(n, dtype=bool)  # its KV blocks wait in host memory
    waiting: deque[int] = deque()
    running = np.zeros(0, dtype=np.int64)
    nxt = 0
    t = 0.0
    while nxt < n or waiting or len(running):
        while nxt < n and req.arrival[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        if not waiting and not len(running):
            t = float(req.arrival[nxt])
            continue
        admitted = []
        while waiting and len(running) + len(admitted) < size:
            i = waiting[0]
            tokens = int(req.prompt[i] + max(made[i], 1))  # after the step
            if int(cache.blocks(tokens)) > cache.free:
                break
            cache.hold_one(i, tokens)
            admitted.append(waiting.popleft())
        if admitted:
            new = np.array(admitted)
            back, again = new[swapped[new]], new[~swapped[new]]
            if len(back):  # swap in: copy the blocks back, no prefill
                end = t + swap(int(np.sum(cache.blocks(req.prompt[back] + made[back]))))
                out.record_step("swap-in", t, end, len(back), len(back))
                t = end
                swapped[back] = False
            if len(again):
                fresh = again[made[again] == 0]
                out.start[fresh] = t
                longest = int((req.prompt[again] + made[again]).max())
                end = t + table.latency_s("prefill", len(again), longest)
                out.record_step("prefill", t, end, len(again), len(again))
                t = end
                out.first[fresh] = t
                last[fresh] = t
                made[fresh] = 1
            running = np.concatenate([running, new])
        else:
            upcoming = float(req.arrival[nxt]) if nxt < n and not waiting else np.inf
            running, t = _decode(
                out, table, cache, (running, made, last, swapped), waiting, t, upcoming, swap
            )
        running = _retire(out, cache, req, running, made, t)
        out.queue.append((t, len(waiting)))


def _retire(out, cache, req, running: np.ndarray, made: np.ndarray, t: float) -> np.ndarray:
    """The running sequences that made their last token by ``t`` finish and free their KV
    blocks; the rest keep running. Records the cache's occupancy at ``t``."""
    done = running[made[running] >= req.output[running]]
    if len(done):
        out.finish[done] = t
        cache.release(done)
        running = running[made[running] < req.output[running]]
    out.kv.append((t, cache.used))
    return running


def _decode(out, table, cache, state, waiting, t: float, upcoming: float, swap):
    """Decode steps for every running sequence: one, or as many as run alike — until the
    next arrival (if it could join), a sequence's end or a cost bucket's edge, while the KV
    cache has the blocks — charged at once (the same steps, one Python iteration). A sequence
    that needs a block when none is free preempts the newest (recompute or swap)."""
    running, made, last, swapped = state
    req = out.requests
    ctx = req.prompt[running] + made[running]
    grow = int(np.count_nonzero(ctx % cache.block_tokens == 0))
    while grow > cache.free and len(running) > 1:
        victim = int(running[-1])
        blocks = cache.release(running[-1:])
        running = running[:-1]
        if swap is not None:  # copy its blocks to the host; it resumes without a prefill
            end = t + swap(blocks)
            out.record_step("swap-out", t, end, 1, 1)
            t = end
            swapped[victim] = True
        waiting.appendleft(victim)
        out.preemptions += 1
        ctx = req.prompt[running] + made[running]
        grow = int(np.count_nonzero(ctx % cache.block_tokens == 0))
    longest = int(ctx.max())
    cost = table.latency_s("decode", len(running), 0, longest)
    k = int(
        min(
            (req.output[running] - made[running]).min(),
            bucket(longest, MIN_TOKENS) - longest + 1,
            np.ceil((upcoming - t) / cost) if np.isfinite(upcoming) else np.inf,
        )
    )
    k = max(k, 1)
    growth = int(np.sum(cache.blocks(ctx + k) - cache.blocks(ctx)))
    if growth > cache.free:
        k = 1
    cache.hold(running, ctx + k)
    ends = t + cost * np.arange(1, k + 1)
    b = len(running)
    out.steps.setdefault("phase", []).extend(["decode"] * k)
    out.steps.setdefault("start", []).extend([t, *ends[:-1].tolist()])
    out.steps.setdefault("end", []).extend(ends.tolist())
    out.steps.setdefault("slots", []).extend([b] * k)
    out.steps.setdefault("served", []).extend([b] * k)
    previous = last[running]
    if previous.min() == previous.max():  # the usual case: every sequence stepped last time
        out.tbt.append((float(ends[0] - previous[0]), b))
    else:
        gaps, counts = np.unique(ends[0] - previous, return_counts=True)
        out.tbt.extend(zip(gaps.tolist(), counts.tolist(), strict=True))
    if k > 1:
        out.tbt.append((cost, b * (k - 1)))
    t = float(ends[-1])
    made[running] += k
    last[running] = t
    return running, t


# --- continuous batching with chunked prefill (Sarathi-Serve, vLLM) -----------------------------


def _serve_chunked(out: Outcome, table: StepTable, cache: KVCache, swap) -> None:
    """Sarathi-Serve's loop: every iteration carries at most ``budget`` tokens — one for each
    running sequence whose prompt is in the cache (it decodes), the rest chunks of the prompts
    being prefilled, oldest first. A waiting sequence is admitted while the batch, the KV cache
    and the iteration's spare tokens have room. When no prompt is being prefilled the
    iterations are plain decode steps (run alike as :func:`_decode` runs them)."""
    req = out.requests
    n = len(req)
    size, budget = out.policy.max_batch, out.policy.budget
    made = np.zeros(n, dtype=np.int64)
    last = np.zeros(n)
    swapped = np.zeros(n, dtype=bool)
    done_tokens = np.zeros(n, dtype=np.int64)  # tokens of this (re)admission's prefill done
    target = np.zeros(n, dtype=np.int64)  # tokens this (re)admission's prefill computes
    out.prefilled = np.zeros(n, dtype=np.int64)
    waiting: deque[int] = deque()
    running = np.zeros(0, dtype=np.int64)
    nxt = 0
    t = 0.0
    while nxt < n or waiting or len(running):
        while nxt < n and req.arrival[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        if not waiting and not len(running):
            t = float(req.arrival[nxt])
            continue
        pending = target[running] - done_tokens[running]
        spare = budget - int(np.count_nonzero(pending == 0)) - int(pending.sum())
        admitted = []
        while waiting and len(running) + len(admitted) < size and spare > 0:
            i = waiting[0]
            tokens = int(req.prompt[i] + max(made[i], 1))
            if int(cache.blocks(tokens)) > cache.free:
                break
            cache.hold_one(i, tokens)
            admitted.append(waiting.popleft())
            if not swapped[i]:
                target[i] = req.prompt[i] + made[i]
                done_tokens[i] = 0
                spare -= int(target[i])
            else:
                spare -= 1
        if admitted:
            new = np.array(admitted)
            back = new[swapped[new]]
            if len(back):  # swap in: copy the blocks back, no prefill
                end = t + swap(int(np.sum(cache.blocks(req.prompt[back] + made[back]))))
                out.record_step("swap-in", t, end, len(back), len(back))
                t = end
                swapped[back] = False
            fresh = new[(made[new] == 0) & ~swapped[new]]
            out.start[fresh] = t
            running = np.concatenate([running, new])
        if np.any(done_tokens[running] < target[running]):
            state = (running, made, last, done_tokens, target)
            running, t = _mixed(out, table, cache, state, waiting, t)
        else:
            upcoming = float(req.arrival[nxt]) if nxt < n and not waiting else np.inf
            running, t = _decode(
                out, table, cache, (running, made, last, swapped), waiting, t, upcoming, swap
            )
        running = _retire(out, cache, req, running, made, t)
        out.queue.append((t, len(waiting)))


def _mixed(out, table, cache, state, waiting, t: float):
    """One chunked-prefill iteration: every decoding sequence makes a token while the budget's
    rest prefills the oldest prompts' next chunks; charged at :meth:`StepTable.mixed_s`. A
    decoding sequence that needs a block when none is free preempts the newest by recompute."""
    running, made, last, done_tokens, target = state
    req = out.requests
    decoding = done_tokens[running] >= target[running]
    ctx = req.prompt[running] + made[running]
    while (
        len(running) > 1
        and np.count_nonzero(decoding & (ctx % cache.block_tokens == 0)) > cache.free
    ):
        victim = int(running[-1])  # the newest: its blocks back, its prefill again later
        cache.release(running[-1:])
        running, decoding, ctx = running[:-1], decoding[:-1], ctx[:-1]
        waiting.appendleft(victim)
        out.preemptions += 1
    decoders = running[decoding]
    cache.hold(decoders, ctx[decoding] + 1)
    left = out.policy.budget - len(decoders)
    chunked, sizes = [], []
    for i in running[~decoding].tolist():
        if left == 0:
            break
        piece = min(int(target[i] - done_tokens[i]), left)
        chunked.append(i)
        sizes.append(piece)
        left -= piece
    chunked_ = np.array(chunked, dtype=np.int64)
    tokens = int(sum(sizes))
    seen = int(done_tokens[chunked_].max()) if chunked else 0
    longest = int(ctx[decoding].max()) if len(decoders) else 0
    end = t + table.mixed_s(len(decoders), longest, tokens, seen)
    phase = "mixed" if len(decoders) else "prefill"
    out.record_step(phase, t, end, len(decoders) + len(chunked), len(decoders) + len(chunked))
    out.iteration_tokens.append(len(decoders) + tokens)
    if len(decoders):
        gaps, counts = np.unique(end - last[decoders], return_counts=True)
        out.tbt.extend(zip(gaps.tolist(), counts.tolist(), strict=True))
        made[decoders] += 1
        last[decoders] = end
    done_tokens[chunked_] += np.array(sizes, dtype=np.int64)
    out.prefilled[chunked_] += np.array(sizes, dtype=np.int64)
    complete = chunked_[done_tokens[chunked_] >= target[chunked_]]
    fresh = complete[made[complete] == 0]
    out.first[fresh] = end
    last[fresh] = end
    made[fresh] = 1
    return running, end
