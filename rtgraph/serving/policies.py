"""Batching policies: how waiting requests become a batch.

* ``none`` — one request at a time (the baseline).
* ``static:B`` — a batch leaves when B requests wait (the last, partial one at the end of the
  arrivals); it runs to completion before the next starts.
* ``dynamic:max=B,wait=T[,preferred=P1|P2…]`` — Triton's dynamic batcher: when the device is
  free, a batch of the largest preferred size that the waiting requests fill leaves at once
  (without preferred sizes: a batch of B); else the batch leaves when its oldest request has
  waited T, with whatever waits then (up to B).
* ``continuous[:max=B]`` — iteration-level batching (Orca, vLLM), decoders only: after every
  step, finished sequences leave and waiting ones join while the KV cache has room.
* ``continuous:max=B,budget=T`` — the same with chunked prefill (Sarathi-Serve, vLLM's
  ``max_num_batched_tokens``): an iteration carries at most T tokens — one for every sequence
  that decodes, the rest chunks of the prompts being prefilled — so a prefill no longer stalls
  the running sequences for a whole prompt.

``+merge`` after a batch-level policy (``dynamic:max=8,wait=10ms+merge``) merges identical
waiting requests (see :mod:`rtgraph.serving.simulate`).
"""

from __future__ import annotations

from dataclasses import dataclass

from rtgraph.errors import UsageError
from rtgraph.serving.requests import flag_error, parse_duration

KINDS = ("none", "static", "dynamic", "continuous")
#: The largest batch continuous batching forms unless told (vLLM's max_num_seqs is 256).
CONTINUOUS_MAX = 64


@dataclass(frozen=True)
class Policy:
    kind: str
    max_batch: int = 1
    wait_s: float = 0.0
    merge: bool = False
    preferred: tuple[int, ...] = ()
    budget: int = 0  # continuous: tokens an iteration carries (0: whole prefills, no chunks)

    @property
    def name(self) -> str:
        merge = "+merge" if self.merge else ""
        if self.kind == "none":
            return f"none{merge}"
        if self.kind == "static":
            return f"static:{self.max_batch}{merge}"
        if self.kind == "dynamic":
            sizes = "|".join(map(str, self.preferred))
            preferred = f",preferred={sizes}" if sizes else ""
            return f"dynamic:max={self.max_batch},wait={_short(self.wait_s)}{preferred}{merge}"
        budget = f",budget={self.budget}" if self.budget else ""
        return f"continuous:max={self.max_batch}{budget}"


def _short(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:g}s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:g}ms"
    return f"{seconds * 1e6:g}us"


def _bad(text: str, problem: str, start: int = 0, width: int | None = None) -> UsageError:
    hint = "none, static:B, dynamic:max=B,wait=T (e.g. dynamic:max=8,wait=10ms), continuous or "
    hint += "continuous:max=B[,budget=T]"
    return flag_error("--batching", text, problem, hint, start, width)


def _batch(text: str, value: str, start: int) -> int:
    if not value.isdigit() or int(value) < 1:
        raise _bad(text, f"batch size {value!r} is not a positive integer", start, len(value))
    return int(value)


def parse_policy(text: str, merge: bool = False) -> Policy:
    """A policy from its ``--batching`` text (errors underline the wrong part); ``+merge`` at
    the end (or ``merge``) turns request merging on for a batch-level policy."""
    if text.endswith("+merge"):
        found = parse_policy(text[: -len("+merge")], True)
        if found.kind == "continuous":
            raise _bad(text, "continuous batching does not merge", len(text) - 6, 6)
        return found
    kind, _, rest = text.strip().partition(":")
    if kind not in KINDS:
        raise _bad(text, f"unknown policy {kind!r}", 0, len(kind))
    if kind == "none":
        if rest:
            raise _bad(text, "none takes no arguments", len(kind))
        return Policy("none", merge=merge)
    if kind == "static":
        return Policy("static", _batch(text, rest, len(kind) + 1), merge=merge)
    fields: dict[str, tuple[str, int]] = {}
    pos = len(kind) + 1
    for part in rest.split(",") if rest else []:
        key, eq, value = part.partition("=")
        if not eq or key not in ("max", "wait", "preferred", "budget") or key in fields:
            problem = f"{part!r}: expected max=B, wait=T, preferred=P1|P2 or budget=T, once each"
            raise _bad(text, problem, pos, len(part))
        fields[key] = (value, pos + len(key) + 1)
        pos += len(part) + 1
    if kind == "continuous":
        if "wait" in fields or "preferred" in fields:
            raise _bad(text, "continuous batching has no wait (it admits every step)")
        value, at = fields.get("max", (str(CONTINUOUS_MAX), 0))
        size = _batch(text, value, at)
        if "budget" not in fields:
            return Policy("continuous", size)
        budget = _batch(text, *fields["budget"])
        if budget <= size:  # every running sequence decodes a token; a prefill needs one more
            value, at = fields["budget"]
            problem = f"budget={budget} must be above max={size} (one token per running sequence)"
            raise _bad(text, problem, at, len(value))
        return Policy("continuous", size, budget=budget)
    if "budget" in fields:
        raise _bad(text, "budget=T is continuous batching's (chunked prefill)")
    if not {"max", "wait"} <= set(fields):
        raise _bad(text, "dynamic needs both max=B and wait=T")
    size = _batch(text, *fields["max"])
    wait = parse_duration(fields["wait"][0], "--batching", text)
    preferred: list[int] = []
    if "preferred" in fields:
        value, at = fields["preferred"]
        for part in value.split("|"):
            preferred.append(_batch(text, part, at))
            at += len(part) + 1
        if max(preferred) > size:
            value, at = fields["preferred"]
            raise _bad(text, f"a preferred size is above max={size}", at, len(value))
    return Policy("dynamic", size, wait, merge, tuple(sorted(set(preferred))))
