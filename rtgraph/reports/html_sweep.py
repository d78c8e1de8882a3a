"""A sweep as one self-contained HTML page: ``rtgraph report SWEEP_FOLDER``.

Reads what ``rtgraph sweep`` wrote — the tidy table's rows and the ``sweep.json`` sidecar —
and shows: what was swept and how it ran; the trade-off plot of two columns (the ``--pareto``
objectives, else makespan against memory peak) with the Pareto front joined and every point's
axis values on hover; and the whole table, sortable, each row linking to its result JSON and,
where one was written, to its own run report (:mod:`rtgraph.reports.html_run`). Like the run
page, nothing is fetched.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

from rtgraph.reports.html_page import Markup, Section, escape, page, table
from rtgraph.reports.style import bytes_label

PLOT_W, PLOT_H, MARGIN = 780, 420, 96
FRONT_COLOR, POINT_COLOR, REFUSED = "#C0392B", "#4E79A7", "refused"


def number(text: object) -> float | None:
    """A table cell as a number (None: empty or not a number)."""
    try:
        value = float(str(text))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def front(rows: Sequence[Mapping[str, str]], x: str, y: str) -> set[int]:
    """Indices of the rows no other row beats on both ``x`` and ``y`` (both minimised)."""
    pts = [(number(r.get(x)), number(r.get(y)), k) for k, r in enumerate(rows)]
    pts = sorted((a, b, k) for a, b, k in pts if a is not None and b is not None)
    best, out = math.inf, set()
    for _, b, k in pts:
        if b < best:
            out.add(k)
            best = b
    return out


def shown(column: str, value: float) -> str:
    """An axis value: bytes as KiB/MiB/GiB, other numbers to four significant digits."""
    return bytes_label(value) if column.endswith("_bytes") else f"{value:,.4g}"


def _describe(row: Mapping[str, str], axes: Sequence[str]) -> str:
    return ", ".join(f"{a}={row[a]}" for a in axes if row.get(a) not in (None, ""))


def svg_tradeoff(
    rows: Sequence[Mapping[str, str]],
    x: str,
    y: str,
    axes: Sequence[str],
    links: Mapping[str, str],
    on_front: Collection[int] | None = None,
) -> str:
    """``y`` against ``x``, one dot per point (hover: its axes and both values), the front
    (``on_front``, row indices; default: both minimised) joined in red; a dot with a run
    report links to it."""
    on = set(front(rows, x, y) if on_front is None else on_front)
    pts = [(number(r.get(x)), number(r.get(y)), k) for k, r in enumerate(rows)]
    pts = [(a, b, k) for a, b, k in pts if a is not None and b is not None]
    if not pts:
        return f"<p class=muted>No point has both {escape(x)} and {escape(y)}.</p>"
    lo_x, hi_x = min(a for a, _, _ in pts), max(a for a, _, _ in pts)
    lo_y, hi_y = min(b for _, b, _ in pts), max(b for _, b, _ in pts)
    span_x, span_y = (hi_x - lo_x) or 1.0, (hi_y - lo_y) or 1.0

    def sx(v: float) -> float:
        return MARGIN + (v - lo_x) / span_x * (PLOT_W - MARGIN - 20)

    def sy(v: float) -> float:
        return PLOT_H - MARGIN + 20 - (v - lo_y) / span_y * (PLOT_H - MARGIN)

    out = [
        f'<svg id="tradeoff" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {PLOT_W} '
        f'{PLOT_H + 30}" width="{PLOT_W}" height="{PLOT_H + 30}" role="img" '
        f'aria-label="{escape(y)} against {escape(x)}">',
        f'<g class="axis"><line x1="{MARGIN}" x2="{PLOT_W - 10}" y1="{PLOT_H - 40}" '
        f'y2="{PLOT_H - 40}"/><line x1="{MARGIN}" x2="{MARGIN}" y1="10" y2="{PLOT_H - 40}"/></g>',
    ]
    for v in (lo_x, (lo_x + hi_x) / 2, hi_x):
        at = f'x="{sx(v):.1f}" y="{PLOT_H - 24}"'
        out.append(f'<text {at} text-anchor="middle">{shown(x, v)}</text>')
    for v in (lo_y, (lo_y + hi_y) / 2, hi_y):
        at = f'x="{MARGIN - 6}" y="{sy(v) + 4:.1f}"'
        out.append(f'<text {at} text-anchor="end">{shown(y, v)}</text>')
    out.append(
        f'<text x="{(MARGIN + PLOT_W) / 2}" y="{PLOT_H - 4}" text-anchor="middle">'
        f"{escape(x)} (lower is better)</text>"
    )
    out.append(
        f'<text x="14" y="{PLOT_H / 2}" transform="rotate(-90 14 {PLOT_H / 2})" '
        f'text-anchor="middle">{escape(y)} (lower is better)</text>'
    )
    line = sorted((a, b) for a, b, k in pts if k in on)
    path = " ".join(f"{sx(a):.1f},{sy(b):.1f}" for a, b in line)
    out.append(f'<polyline points="{path}" fill="none" stroke="{FRONT_COLOR}" stroke-width="1.5"/>')
    for a, b, k in pts:
        row = rows[k]
        tip = f"{_describe(row, axes)}\n{x} = {a:,.6g}\n{y} = {b:,.6g}"
        if k in on:
            tip += "\non the Pareto front"
        colour = FRONT_COLOR if k in on else POINT_COLOR
        dot = (
            f'<circle class="point{" front" if k in on else ""}" cx="{sx(a):.1f}" '
            f'cy="{sy(b):.1f}" r="{5 if k in on else 3.5}" fill="{colour}" fill-opacity="0.85" '
            f'data-tip="{escape(tip)}"/>'
        )
        link = links.get(str(row.get("point", "")))
        out.append(f'<a href="{escape(link)}">{dot}</a>' if link else dot)
    out.append("</svg>")
    return "".join(out)


def sweep_report(
    rows: Sequence[Mapping[str, str]],
    meta: Mapping[str, object],
    *,
    x: str = "makespan_us",
    y: str = "memory_peak_bytes",
    axes: Sequence[str] = (),
    run_pages: Mapping[str, str] | None = None,
    on_front: Collection[int] | None = None,
    note: str = "",
) -> str:
    """The HTML page of a sweep: ``rows`` as read from its table (strings), ``meta`` its
    sidecar, ``x``/``y`` the trade-off plot's columns, ``axes`` the columns that say what a
    point is, ``run_pages`` each point key's run report (relative link), ``on_front`` the
    rows on the sweep's own Pareto front (default: :func:`front` of ``x`` and ``y``)."""
    links = dict(run_pages or {})
    refused = sum(1 for r in rows if r.get("error"))
    facts = [
        ["sweep file", str(meta.get("sweep", "—"))],
        ["mode", f"{meta.get('mode', '—')} (seed {meta.get('seed', '—')})"],
        ["points", f"{len(rows):,} ({refused:,} refused)"],
        ["computed / from the cache", f"{meta.get('computed', '—')} / {meta.get('cached', '—')}"],
        ["engine", f"{meta.get('engine', '—')}, {meta.get('workers', '—')} workers"],
        ["wall time", f"{meta.get('wall_s', '—')} s"],
        ["numerics", str(meta.get("numerics", False))],
        ["rtgraph", str(meta.get("rtgraph", "—"))],
    ]
    summary = table(["", ""], facts, numeric=[False, False])
    if note:
        summary += f"<p class=muted>{escape(note)}</p>"
    plot = svg_tradeoff(rows, x, y, axes, links, on_front)
    head = (
        f"<p class=muted>Each dot is a point; red: the Pareto front on {escape(x)} and "
        f"{escape(y)} (no other point is lower on both). Hover for the point; click a "
        "front point for its run report.</p>"
    )
    columns = list(rows[0]) if rows else []
    shown = [c for c in columns if c != "result"]
    body = []
    for row in rows:
        cells: list[object] = []
        for c in shown:
            value = row.get(c, "")
            n = number(value)
            cells.append((value, n) if n is not None else value)
        key = str(row.get("point", ""))
        links_cell = []
        if row.get("result"):
            links_cell.append(f'<a href="{escape(row["result"])}">json</a>')
        if key in links:
            links_cell.append(f'<a href="{escape(links[key])}">run</a>')
        cells.append(Markup(" ".join(links_cell)))
        body.append(cells)
    numeric = [any(number(r.get(c)) is not None for r in rows) and c != "point" for c in shown] + [
        False
    ]
    points_table = table(
        [*shown, "files"], body, sortable=True, numeric=numeric, table_id="sweep-table"
    )
    sections = [
        Section("summary", "Summary", summary),
        Section("tradeoff", f"{y} against {x}", head + plot),
        Section("points", "Points", f'<div style="overflow-x:auto">{points_table}</div>'),
    ]
    return page(f"sweep: {meta.get('sweep', '')}", f"{len(rows):,} points", sections)
