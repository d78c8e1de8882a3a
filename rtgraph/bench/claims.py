"""The runtime documentation's claims, and the verdict on each against the emulated figures.

Pure functions of the bench's rows: nothing here compiles or runs, so every threshold can be
tested with made-up figures on both of its sides.

Each measured claim has a :class:`Band`, the figures that agree with it, printed in the
headline's "agrees if" column. A figure inside the band ``agrees``; one outside ``differs:
lower`` or ``differs: higher``, and the verdict lists the figures that miss (with enough decimals
to show that they do), so a verdict never hides which way the emulator misses. A claim worded
"≥" has no upper side: only ``differs: lower`` can contradict it.

The per-call allocation costs are not measured at all: the emulator charges the device spec's
``direct_alloc_us`` and ``pool_alloc_us`` for every call, so those rows say ``spec input``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from rtgraph.bench.rows import HeadlineRow, PolicyRow
from rtgraph.bench.tables import pct

#: The models the headline is about (all models when none of these ran).
HEADLINE_MODELS: tuple[str, ...] = ("attention_naive", "transformer_naive")

#: The runtime documentation's figures (utilization as a fraction).
CLAIM_ONE_STREAM = 0.40
CLAIM_BY_UNIT = 0.75
CLAIM_LIFT = CLAIM_BY_UNIT / CLAIM_ONE_STREAM  # 1.875: "from ≈40 % to ≥75 %"
CLAIM_DIRECT_US = 50.0
CLAIM_POOL_US = 1.0

AGREES = "agrees"
SPEC_INPUT = "spec input"


@dataclass(frozen=True)
class Band:
    """The figures that agree with a claim: ``low ≤ figure ≤ high``; ``None`` leaves a side open."""

    low: float | None = None
    high: float | None = None

    def side(self, figure: float) -> str | None:
        """``"lower"`` or ``"higher"`` when ``figure`` lies outside the band, else None."""
        if self.low is not None and figure < self.low:
            return "lower"
        if self.high is not None and figure > self.high:
            return "higher"
        return None

    def describe(self, show: Callable[[float], str]) -> str:
        """The band as the table prints it: ``30 % – 50 %`` or ``≥ 75 %``."""
        if self.low is not None and self.high is not None:
            return f"{show(self.low)} – {show(self.high)}"
        if self.low is not None:
            return f"≥ {show(self.low)}"
        return f"≤ {show(self.high)}" if self.high is not None else "any"


#: Each unit's utilization on one stream: "≈ 40 %", read as ± 10 points.
ONE_STREAM_BAND = Band(0.30, 0.50)
#: Each unit's utilization with a stream per unit type: "≥ 75 %".
BY_UNIT_BAND = Band(CLAIM_BY_UNIT, None)
#: Cube + Vector utilization, a stream per unit ÷ one stream: the claims' ratio ± 10 %.
LIFT_TOLERANCE = 0.10
LIFT_BAND = Band(CLAIM_LIFT * (1 - LIFT_TOLERANCE), CLAIM_LIFT * (1 + LIFT_TOLERANCE))
#: Asynchronous launch: most (≥ 50 %) of the host's submission time overlaps device work.
HOST_OVERLAP_BAND = Band(0.50, None)


def beside(figure: float, edge: float | None, *, scale: float, unit: str, digits: int) -> str:
    """``figure`` printed with the fewest decimals (``digits`` at least) that tell it from
    ``edge``: 0.2999 beside 0.30 prints as ``29.99 %``, not as an in-band ``30 %``."""
    for places in range(digits, digits + 5):
        text = f"{scale * figure:.{places}f}"
        if edge is None or text != f"{scale * edge:.{places}f}":
            break
    return text + unit


def pct_beside(figure: float, edge: float | None) -> str:
    return beside(figure, edge, scale=100.0, unit=" %", digits=0)


def ratio_beside(figure: float, edge: float | None) -> str:
    return beside(figure, edge, scale=1.0, unit="×", digits=2)


def verdict(
    figures: Sequence[float], band: Band, show: Callable[[float, float | None], str]
) -> str:
    """``agrees`` when every figure lies in ``band``, else ``differs:`` and the side(s) missed,
    each with the figures that miss it: ``differs: lower (59 %, 65 %)``."""
    missed = {"lower": band.low, "higher": band.high}
    sides = []
    for side, edge in missed.items():
        shown = [show(f, edge) for f in figures if band.side(f) == side]
        if shown:
            sides.append(f"{side} ({', '.join(shown)})")
    return "differs: " + "; ".join(sides) if sides else AGREES


def _cube_vector(rows: Mapping[str, PolicyRow]) -> list[float]:
    return [r.utilization.get(u, 0.0) for r in rows.values() for u in ("cube", "vector")]


def _per_model_units(rows: Mapping[str, PolicyRow]) -> str:
    return "; ".join(
        f"{m} {pct(r.utilization.get('cube', 0))} / {pct(r.utilization.get('vector', 0))}"
        for m, r in rows.items()
    )


def one_stream_row(single: Mapping[str, PolicyRow]) -> HeadlineRow:
    """Cube and Vector utilization on one stream, each against ≈ 40 %."""
    return HeadlineRow(
        claim="one stream: Cube / Vector utilization",
        claimed=f"≈ {pct(CLAIM_ONE_STREAM)}",
        agrees_if=f"each {ONE_STREAM_BAND.describe(pct)} (± 10 points)",
        measured=_per_model_units(single),
        verdict=verdict(_cube_vector(single), ONE_STREAM_BAND, pct_beside),
    )


def by_unit_row(by_unit: Mapping[str, PolicyRow]) -> HeadlineRow:
    """Cube and Vector utilization with a stream per unit type, each against ≥ 75 %."""
    return HeadlineRow(
        claim="a stream per unit type: Cube / Vector utilization",
        claimed=f"≥ {pct(CLAIM_BY_UNIT)}",
        agrees_if=f"each {BY_UNIT_BAND.describe(pct)}",
        measured=_per_model_units(by_unit),
        verdict=verdict(_cube_vector(by_unit), BY_UNIT_BAND, pct_beside),
    )


def lift_row(single: Mapping[str, PolicyRow], by_unit: Mapping[str, PolicyRow]) -> HeadlineRow:
    """Cube + Vector utilization, by-unit ÷ single, per model, against 75 % ÷ 40 %."""
    lifts = {m: r.compute_utilization / single[m].compute_utilization for m, r in by_unit.items()}
    return HeadlineRow(
        claim="Cube + Vector utilization, a stream per unit ÷ one stream",
        claimed=f"≈ {CLAIM_LIFT:.2f}× (75 % ÷ 40 %)",
        agrees_if=f"{LIFT_BAND.describe(lambda x: f'{x:.2f}×')} (± {pct(LIFT_TOLERANCE)})",
        measured="; ".join(f"{m} {v:.2f}×" for m, v in lifts.items()),
        verdict=verdict(list(lifts.values()), LIFT_BAND, ratio_beside),
    )


def host_row(by_unit: Mapping[str, PolicyRow]) -> HeadlineRow:
    """Per model, the share of the host's submission time that overlaps device work."""
    return HeadlineRow(
        claim="the host submits while the device computes",
        claimed="asynchronous launch",
        agrees_if=f"{HOST_OVERLAP_BAND.describe(pct)} of submission time overlaps device work",
        measured="; ".join(
            f"{m} {pct(r.host_overlap)} of {r.host_submit_us:,.0f} µs" for m, r in by_unit.items()
        ),
        verdict=verdict([r.host_overlap for r in by_unit.values()], HOST_OVERLAP_BAND, pct_beside),
    )


#: (allocation mode, claim, claimed µs a call); the emulator charges the spec's
#: ``<mode>_alloc_us`` for each call.
ALLOCATION_CLAIMS: tuple[tuple[str, str, float], ...] = (
    ("direct", "direct device allocation (aclrtMalloc), per call", CLAIM_DIRECT_US),
    ("pool", "caching-pool allocation, per call", CLAIM_POOL_US),
)


def spec_input_row(mode: str, claim: str, claimed_us: float, calls: Sequence[float]) -> HeadlineRow:
    """A per-call allocation cost: the emulator charges the spec's ``<mode>_alloc_us`` for a
    call (a pool miss also the driver's), so the typical figure is the spec's own, not a
    measurement, and the verdict says so."""
    median, mean = statistics.median(calls), statistics.fmean(calls)
    return HeadlineRow(
        claim=claim,
        claimed=f"≈ {claimed_us:g} µs",
        agrees_if=f"— (the emulator charges the spec's `{mode}_alloc_us`)",
        measured=(
            f"{SPEC_INPUT}: {median:.1f} µs a call (median of {len(calls)} calls; "
            f"mean {mean:.1f} µs)"
        ),
        verdict=SPEC_INPUT,
    )


def headline_rows(
    single: Mapping[str, PolicyRow],
    by_unit: Mapping[str, PolicyRow],
    alloc_calls: Mapping[str, Sequence[float]],
) -> list[HeadlineRow]:
    """Every claim the figures can speak to, in the headline's order.

    ``single`` and ``by_unit`` map each headline model to its row under that stream policy
    (``by_unit`` may miss models or be empty); ``alloc_calls`` maps an allocation mode to the
    host time of every allocation call it made, over all models.
    """
    rows = []
    if single:
        rows.append(one_stream_row(single))
    if single and by_unit:
        rows += [by_unit_row(by_unit), lift_row(single, by_unit), host_row(by_unit)]
    for mode, claim, claimed_us in ALLOCATION_CLAIMS:
        if alloc_calls.get(mode):
            rows.append(spec_input_row(mode, claim, claimed_us, alloc_calls[mode]))
    return rows


def headline_caption(models: Sequence[str], memory: str) -> str:
    """What the headline table is over, and how to read its verdicts."""
    return (
        f"Models: {', '.join(models)}; streams compared under the `{memory}` memory plan; "
        "allocation over every model, static plan vs run-time allocators under by-unit. "
        f"A verdict is *{AGREES}* only when every figure lies in the row's *agrees if* band, "
        "else *differs: lower* or *differs: higher* with the figures that miss; "
        f"*{SPEC_INPUT}* marks a figure the device spec sets and the emulator charges as given, "
        "so it measures nothing."
    )
