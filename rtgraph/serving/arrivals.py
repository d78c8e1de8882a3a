"""Requests: when they arrive and how long they are — generated from a seeded process, or read
from a trace CSV (validated row by row, each error located at its row and column).

``poisson:RATE`` (exponential gaps, RATE requests/s), ``gamma:RATE,CV`` (gamma gaps with that
coefficient of variation: CV 1 is Poisson, above 1 burstier) or ``trace:FILE.csv`` with the
columns ``arrival_s`` (sorted), ``prompt_tokens`` and ``output_tokens`` (decoders) and an
optional ``prompt_id`` (requests with one id and the same lengths are the same request: see
request merging in docs/serving.md).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rtgraph.errors import UsageError
from rtgraph.serving.requests import ServingError, flag_error, located


@dataclass(frozen=True)
class Requests:
    """Every request of a run, in arrival order (seconds from 0); ``key``: equal keys are
    identical requests (one prompt and its parameters), which merging may serve once."""

    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    key: np.ndarray

    def __len__(self) -> int:
        return len(self.arrival)


@dataclass(frozen=True)
class Lengths:
    """How long generated requests are: prompt and output tokens as ``N``, ``A-B`` (uniform) or
    ``exp:M`` (geometric, mean M, at least 1); ``prompts`` > 0 draws each request's prompt from
    a catalogue of that many (Zipf popularity, so some repeat), 0 makes every request distinct."""

    prompt: str = "128"
    output: str = "128"
    prompts: int = 0


def parse_arrivals(text: str) -> tuple[str, float, float, str]:
    """(kind, rate, cv, trace path) from ``--arrivals`` text."""
    kind, _, rest = text.partition(":")

    def bad(problem: str, start: int = 0, width: int | None = None) -> UsageError:
        hint = "poisson:RATE, gamma:RATE,CV or trace:FILE.csv (RATE in requests/s)"
        return flag_error("--arrivals", text, problem, hint, start, width)

    if kind == "trace":
        if not rest:
            raise bad("trace needs a file", len(kind))
        return "trace", 0.0, 1.0, rest
    if kind not in ("poisson", "gamma"):
        raise bad(f"unknown arrival process {kind!r}", 0, len(kind))
    parts = rest.split(",")
    want = 1 if kind == "poisson" else 2
    if len(parts) != want:
        raise bad(f"{kind} takes {'RATE' if want == 1 else 'RATE,CV'}", len(kind) + 1)
    values = []
    pos = len(kind) + 1
    for part in parts:
        try:
            value = float(part)
        except ValueError:
            value = -1.0
        if not np.isfinite(value) or value <= 0:
            raise bad(f"{part!r} is not a positive number", pos, len(part))
        values.append(value)
        pos += len(part) + 1
    return kind, values[0], values[1] if kind == "gamma" else 1.0, ""


def _gaps(rng: np.random.Generator, kind: str, rate: float, cv: float, n: int) -> np.ndarray:
    if kind == "poisson" or cv == 1.0:
        return rng.exponential(1.0 / rate, n)
    shape = 1.0 / (cv * cv)
    return rng.gamma(shape, 1.0 / (rate * shape), n)


def _lengths(rng: np.random.Generator, spec: str, n: int, flag: str) -> np.ndarray:
    try:
        if spec.startswith("exp:"):
            mean = float(spec[4:])
            if mean < 1:
                raise ValueError
            return rng.geometric(1.0 / mean, n).astype(np.int64)
        lo, _, hi = spec.partition("-")
        a, b = int(lo), int(hi or lo)
        if a < 1 or b < a:
            raise ValueError
        return rng.integers(a, b + 1, n, dtype=np.int64)
    except ValueError:
        hint = "N tokens, A-B (uniform, 1 ≤ A ≤ B) or exp:M (geometric with mean M ≥ 1)"
        raise flag_error(flag, spec, "not a length", hint) from None


def generate_requests(
    kind: str, rate: float, cv: float, duration_s: float, seed: int, lengths: Lengths
) -> Requests:
    """Arrivals in [0, duration) from a seeded process (one stream each for the gaps, the
    lengths and the prompts, so changing one does not move the others)."""
    if not (rate > 0 and cv > 0 and duration_s >= 0):
        raise ServingError(
            f"arrivals need a positive rate and CV (rate {rate:g}/s, CV {cv:g})",
            hint="e.g. --arrivals poisson:10",
        )
    gap_seed, len_seed, key_seed = np.random.SeedSequence(seed).spawn(3)
    rng = np.random.default_rng(gap_seed)
    times = np.empty(0)
    last = 0.0
    while last < duration_s:
        chunk = int(rate * (duration_s - last) * 1.1) + 64
        more = last + np.cumsum(_gaps(rng, kind, rate, cv, chunk))
        times = np.concatenate([times, more])
        last = float(more[-1])
    arrival = times[times < duration_s]
    n = len(arrival)
    lrng = np.random.default_rng(len_seed)
    distinct = lengths.prompts if lengths.prompts > 0 else n
    prompt = _lengths(lrng, lengths.prompt, distinct, "--prompt-len")
    output = _lengths(lrng, lengths.output, distinct, "--output-len")
    if lengths.prompts > 0:  # one prompt is one request: the same lengths each time
        popularity = 1.0 / np.arange(1, lengths.prompts + 1)
        krng = np.random.default_rng(key_seed)
        key = krng.choice(lengths.prompts, n, p=popularity / popularity.sum()).astype(np.int64)
        return Requests(arrival, prompt[key], output[key], key)
    return Requests(arrival, prompt, output, np.arange(n, dtype=np.int64))


REQUIRED = ("arrival_s",)
DECODER_REQUIRED = ("prompt_tokens", "output_tokens")


def read_trace(path: str, decoder: bool) -> Requests:
    """A trace CSV, checked: the columns present, every value a number of the right sign,
    arrival times sorted; a missing length (image workloads) is 1."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ServingError(f"cannot read trace {path}: {e}") from None
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or not any(c.strip() for c in rows[0]):
        raise ServingError(
            f"{path}: the trace is empty",
            located(path, text),
            hint="a header line arrival_s,prompt_tokens,output_tokens[,prompt_id], then a row "
            "per request",
        )
    header = [c.strip() for c in rows[0]]
    need = REQUIRED + (DECODER_REQUIRED if decoder else ())
    missing = [c for c in need if c not in header]
    if missing:
        raise ServingError(
            f"the trace lacks the column{'s' if len(missing) > 1 else ''} {', '.join(missing)}",
            located(path, text, 1, 1, len(text.split("\n", 1)[0])),
            hint=f"the header names {', '.join(need)} (and optionally prompt_id)",
        )
    columns = {name: header.index(name) for name in header}
    values: dict[str, list[float]] = {c: [] for c in (*REQUIRED, *DECODER_REQUIRED, "prompt_id")}
    previous = 0.0
    for lineno, row in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in row):
            continue
        for name in values:
            if name not in columns:
                continue
            index = columns[name]
            col = sum(len(c) + 1 for c in row[:index]) + 1
            width = len(row[index]) if index < len(row) else 0

            def bad(problem: str, hint: str, at=(lineno, col, width)) -> ServingError:
                return ServingError(problem, located(path, text, *at), hint)

            if index >= len(row):
                raise bad(f"row {lineno - 1} has no {name}", "every row has every column")
            try:
                value = float(row[index])
            except ValueError:
                value = float("nan")
            if not np.isfinite(value):
                raise bad(f"{name} {row[index]!r} is not a number", "a finite number")
            if value < 0 or (name in DECODER_REQUIRED and value < 1):
                least = "not negative" if name not in DECODER_REQUIRED else "at least 1"
                raise bad(f"{name} {row[index]} is out of range", f"{name} is {least}")
            if name == "arrival_s":
                if value < previous:
                    raise bad(
                        f"arrival_s {row[index]} is earlier than the row before ({previous:g})",
                        "sort the trace by arrival time",
                    )
                previous = value
            values[name].append(value)
    n = len(values["arrival_s"])
    if n == 0:
        raise ServingError(f"{path}: the trace has no requests", located(path, text, 1, 1))
    arrival = np.asarray(values["arrival_s"], dtype=np.float64)
    ones = [1] * n  # an image trace's lengths: unused
    prompt = np.asarray(values["prompt_tokens"] or ones, dtype=np.int64)
    output = np.asarray(values["output_tokens"] or ones, dtype=np.int64)
    if values["prompt_id"]:
        key = np.asarray(values["prompt_id"], dtype=np.int64)
    else:
        key = np.arange(n, dtype=np.int64)
    return Requests(arrival, prompt, output, key)
