"""What a run's users saw and what the device did, as one JSON-ready summary.

Per request: queue delay (arrival → its batch starts), TTFT (arrival → first output: the image,
or a decoder's first token), TPOT (a decoder's mean gap between its later tokens), end-to-end
latency; TBT over every token gap (weighted: one value per gap). Overall: throughput in
requests and tokens per second, goodput (requests per second that met every per-request SLO
term), utilization (the device's share of busy time), batch size, queue length and KV-cache
occupancy over time, and Little's law: the time-average number of requests in the system,
integrated from the arrivals and departures, against arrival rate × mean time in the system.
Times in the summary are milliseconds; percentiles P50, P90, P99, P99.9.
"""

from __future__ import annotations

import numpy as np

from rtgraph.errors import UsageError
from rtgraph.serving.requests import flag_error, parse_duration
from rtgraph.serving.simulate import Outcome

PERCENTILES = (50.0, 90.0, 99.0, 99.9)
#: SLO terms: a metric and a percentile, e.g. ``ttft_p90``; per request, ``tbt`` is its TPOT.
SLO_METRICS = ("queue", "ttft", "tbt", "e2e")


def _r(x: float, digits: int = 4) -> float:
    return round(float(x), digits)


def percentile_table(values: np.ndarray, scale: float = 1e3) -> dict[str, float]:
    """Mean and P50/P90/P99/P99.9 (linear interpolation), in ms by default."""
    if len(values) == 0:
        return {"mean": 0.0, **{f"p{p:g}": 0.0 for p in PERCENTILES}}
    found = np.percentile(values, PERCENTILES)
    return {
        "mean": _r(np.mean(values) * scale),
        **{f"p{p:g}": _r(v * scale) for p, v in zip(PERCENTILES, found, strict=True)},
    }


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The smallest value at or above which lies a fraction ``1 - q/100`` of the weight."""
    if len(values) == 0:
        return 0.0
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cum, q / 100 * cum[-1])])


def per_request(out: Outcome) -> dict[str, np.ndarray]:
    """Queue delay, TTFT, TPOT and end-to-end latency of every request (s)."""
    req = out.requests
    later = np.maximum(req.output - 1, 1)
    return {
        "queue": out.start - req.arrival,
        "ttft": out.first - req.arrival,
        "tbt": np.where(req.output > 1, (out.finish - out.first) / later, 0.0),
        "e2e": out.finish - req.arrival,
    }


def little(arrival: np.ndarray, leave: np.ndarray) -> dict[str, float]:
    """Little's law, L = λW, over [first arrival, last departure]: L from the step function of
    the number in the system (+1 at each arrival, -1 at each departure, integrated), λ and W
    from the requests."""
    if len(arrival) == 0:
        return {"L": 0.0, "lambda_W": 0.0, "relative_error": 0.0}
    times = np.concatenate([arrival, leave])
    steps = np.concatenate([np.ones(len(arrival)), -np.ones(len(leave))])
    order = np.lexsort((-steps, times))
    times, steps = times[order], steps[order]
    inside = np.cumsum(steps)
    span = float(times[-1] - times[0])
    area = float(np.sum(inside[:-1] * np.diff(times)))
    l_avg = area / span if span > 0 else 0.0
    lam = len(arrival) / span if span > 0 else 0.0
    w = float(np.mean(leave - arrival))
    lw = lam * w
    return {
        "L": _r(l_avg, 6),
        "lambda_W": _r(lw, 6),
        "relative_error": _r(abs(l_avg - lw) / lw if lw > 0 else 0.0, 9),
    }


def _time_average(trace: list[tuple[float, int]], end: float) -> float:
    if not trace or end <= trace[0][0]:
        return 0.0
    t = np.array([p[0] for p in trace] + [end])
    v = np.array([p[1] for p in trace], dtype=np.float64)
    return float(np.sum(v * np.diff(t)) / (end - t[0]))


def parse_slo(text: str, decoder: bool = True) -> dict[str, float]:
    """``ttft_p90=2s,tbt_p99=200ms`` → {"ttft_p90": 2.0, "tbt_p99": 0.2} (seconds)."""
    from_text: dict[str, float] = {}
    for term in (t for t in text.split(",") if t):
        name, eq, value = term.partition("=")
        metric, _, pct = name.partition("_p")
        pct_ok = pct.replace(".", "", 1).isdigit() and 0 < float(pct or 0) < 100
        if not eq or metric not in SLO_METRICS or not pct_ok:
            raise _slo_error(text, term, f"{term!r} is not METRIC_pNN=TIME")
        from_text[name] = parse_duration(value, "--slo", text)
        if from_text[name] <= 0:
            raise _slo_error(text, term, f"{term!r}: the target must be above zero")
        if metric == "tbt" and not decoder:
            raise _slo_error(text, term, "tbt (time between tokens) is a decoder's metric")
    if not from_text:
        raise _slo_error(text, text, "no SLO terms")
    return from_text


def _slo_error(text: str, term: str, problem: str) -> UsageError:
    hint = (
        f"terms METRIC_pNN=TIME joined by commas, METRIC one of {', '.join(SLO_METRICS)}: "
        "e.g. ttft_p90=2s,tbt_p99=200ms"
    )
    return flag_error("--slo", text, problem, hint, max(text.find(term), 0), max(len(term), 1))


def slo_values(out: Outcome, slo: dict[str, float]) -> dict[str, float]:
    """Each SLO term's measured value (s); ``tbt`` percentiles are over every token gap."""
    found = per_request(out)
    values = {}
    for name in slo:
        metric, _, pct = name.partition("_p")
        if metric == "tbt" and out.tbt:
            gaps = np.array([g for g, _ in out.tbt])
            counts = np.array([c for _, c in out.tbt], dtype=np.float64)
            values[name] = weighted_percentile(gaps, counts, float(pct))
        else:
            found_ = found[metric]
            values[name] = float(np.percentile(found_, float(pct))) if len(found_) else 0.0
    return values


def summarize(out: Outcome, slo: dict[str, float] | None = None) -> dict:
    """The run as a dict of plain numbers (sorted keys, rounded: the same seed, the same JSON)."""
    req = out.requests
    found = per_request(out)
    horizon = float(out.finish.max()) if len(req) else 0.0
    steps = out.steps
    busy = float(np.sum(np.array(steps.get("end", [])) - np.array(steps.get("start", []))))
    tokens = int(req.output.sum()) if out.kind == "decoder" else 0
    summary = {
        "policy": out.policy.name,
        "workload": out.kind,
        "requests": len(req),
        "horizon_s": _r(horizon, 6),
        "offered_rps": _r(len(req) / req.arrival[-1] if len(req) > 1 else 0.0),
        "throughput_rps": _r(len(req) / horizon if horizon > 0 else 0.0),
        "utilization": _r(busy / horizon if horizon > 0 else 0.0),
        "steps": len(steps.get("end", [])),
        "mean_batch": _r(np.mean(steps["slots"]) if steps.get("slots") else 0.0),
        "mean_served_per_step": _r(np.mean(steps["served"]) if steps.get("served") else 0.0),
        "queue_mean": _r(_time_average(out.queue, horizon)),
        "queue_max": max((q for _, q in out.queue), default=0),
        "latency_ms": {k: percentile_table(v) for k, v in found.items() if k != "tbt"},
        "little": little(req.arrival, out.finish),
    }
    if out.kind == "decoder":
        gaps = np.array([g for g, _ in out.tbt])
        counts = np.array([c for _, c in out.tbt], dtype=np.float64)
        summary["tokens_per_s"] = _r(tokens / horizon if horizon > 0 else 0.0)
        summary["latency_ms"]["tpot"] = percentile_table(found["tbt"][req.output > 1])
        summary["latency_ms"]["tbt"] = {
            f"p{p:g}": _r(weighted_percentile(gaps, counts, p) * 1e3) for p in PERCENTILES
        }
        summary["kv"] = {
            "blocks": out.kv_total,
            "peak_fraction": _r(max((u for _, u in out.kv), default=0) / max(out.kv_total, 1)),
            "mean_fraction": _r(_time_average(out.kv, horizon) / max(out.kv_total, 1)),
            "preemptions": out.preemptions,
        }
        if out.cache is not None:  # the run-time allocator's figures for the KV blocks
            summary["kv"]["allocator"] = out.cache.memory()
    if slo:
        values = slo_values(out, slo)
        good = np.ones(len(req), dtype=bool)
        for name, target in slo.items():
            good &= found[name.partition("_p")[0]] <= target
        summary["slo"] = {
            name: {
                "target_ms": _r(target * 1e3),
                "measured_ms": _r(values[name] * 1e3),
                "met": bool(values[name] <= target),
            }
            for name, target in slo.items()
        }
        summary["goodput_rps"] = _r(int(good.sum()) / horizon if horizon > 0 else 0.0)
    return summary
