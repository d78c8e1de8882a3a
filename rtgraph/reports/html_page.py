"""The shell of rtgraph's HTML reports: one self-contained page, its style and its script.

A report is a single file a person can open anywhere: the CSS, the JavaScript and every picture
(inline SVG) are in the page, nothing is fetched — no CDN, no font, no image file — so it opens
offline and can be attached to a ticket as is. The script does two things only: a tooltip for
any element with a ``data-tip`` attribute (every task in a timeline carries its details there),
and sorting for any ``table.sortable`` (click a header; numbers sort as numbers).

:func:`page` assembles sections; :func:`table` and :func:`escape` are the helpers the report
modules share.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata

#: The page's style: readable type, tables that scan, SVG lanes that fit the window.
STYLE = """
:root { --ink: #1d2329; --muted: #5b6670; --rule: #d7dde3; --band: #f5f7f9; --accent: #0072b2; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
       margin: 0 auto; max-width: 1320px; padding: 20px 28px 60px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 8px; padding-bottom: 4px;
     border-bottom: 1px solid var(--rule); }
p.sub, .muted { color: var(--muted); }
nav a { margin-right: 14px; color: var(--accent); text-decoration: none; }
table { border-collapse: collapse; margin: 6px 0 10px; font-variant-numeric: tabular-nums; }
th, td { padding: 3px 10px; border-bottom: 1px solid var(--rule); text-align: left; }
td.num, th.num { text-align: right; }
tbody tr:nth-child(even) { background: var(--band); }
table.sortable th { cursor: pointer; user-select: none; white-space: nowrap; }
table.sortable th[aria-sort="ascending"]::after { content: " \\25B2"; font-size: 10px; }
table.sortable th[aria-sort="descending"]::after { content: " \\25BC"; font-size: 10px; }
pre { background: var(--band); padding: 10px 12px; overflow-x: auto; font-size: 12.5px; }
svg { display: block; max-width: 100%; height: auto; }
svg text { font: 11px system-ui, sans-serif; fill: var(--ink); }
svg .axis line, svg .axis path { stroke: #8a949e; }
svg [data-tip]:hover { stroke: #000; stroke-width: 1.2; }
.legend span { display: inline-block; margin-right: 14px; font-size: 12.5px; }
.legend i { display: inline-block; width: 11px; height: 11px; margin-right: 5px;
            vertical-align: -1px; }
.ok { color: #1a7f37; font-weight: 600; } .bad { color: #c0392b; font-weight: 600; }
#tip { position: fixed; pointer-events: none; display: none; z-index: 10; max-width: 460px;
       background: #1d2329; color: #fff; padding: 6px 9px; border-radius: 4px; font-size: 12px;
       white-space: pre; box-shadow: 0 2px 8px rgba(0,0,0,.25); }
"""

#: The page's script: the tooltip and sortable tables, no library.
SCRIPT = """
(function () {
  const tip = document.getElementById("tip");
  document.addEventListener("mouseover", (e) => {
    const el = e.target.closest("[data-tip]");
    if (!el) { tip.style.display = "none"; return; }
    tip.textContent = el.getAttribute("data-tip");
    tip.style.display = "block";
  });
  document.addEventListener("mousemove", (e) => {
    if (tip.style.display !== "block") return;
    const x = Math.min(e.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
    const y = Math.min(e.clientY + 14, window.innerHeight - tip.offsetHeight - 8);
    tip.style.left = x + "px"; tip.style.top = y + "px";
  });
  document.addEventListener("mouseout", (e) => {
    if (!e.relatedTarget || !e.relatedTarget.closest || !e.relatedTarget.closest("[data-tip]")) {
      tip.style.display = "none";
    }
  });
  const key = (td) => {
    const v = td.getAttribute("data-value") ?? td.textContent.trim();
    const n = Number(v);
    return v !== "" && !Number.isNaN(n) ? n : v.toLowerCase();
  };
  for (const table of document.querySelectorAll("table.sortable")) {
    const heads = table.tHead.rows[0].cells;
    for (let c = 0; c < heads.length; c++) {
      heads[c].addEventListener("click", () => {
        const up = heads[c].getAttribute("aria-sort") !== "ascending";
        for (const h of heads) h.removeAttribute("aria-sort");
        heads[c].setAttribute("aria-sort", up ? "ascending" : "descending");
        const body = table.tBodies[0];
        const rows = Array.from(body.rows);
        rows.sort((a, b) => {
          const x = key(a.cells[c]), y = key(b.cells[c]);
          const order = typeof x === typeof y ? (x < y ? -1 : x > y ? 1 : 0)
                                              : (typeof x === "number" ? -1 : 1);
          return up ? order : -order;
        });
        for (const r of rows) body.appendChild(r);
      });
    }
  }
})();
"""


def escape(value: object) -> str:
    """``value`` as text safe inside HTML or an attribute."""
    return html.escape(str(value), quote=True)


@dataclass(frozen=True)
class Section:
    """One titled part of a report: ``body`` is HTML (already escaped where it holds text)."""

    id: str
    title: str
    body: str


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    sortable: bool = False,
    numeric: Sequence[bool] | None = None,
    table_id: str | None = None,
) -> str:
    """An HTML table; cells are escaped, numbers right-aligned (``numeric`` per column, else
    guessed from the first row). A cell given as ``(text, value)`` shows ``text`` and sorts by
    ``value``; a cell given as ``Markup`` is inserted unescaped."""
    rows = [list(r) for r in rows]
    if numeric is None:
        first = rows[0] if rows else []
        numeric = [_is_number(_sort_value(c)) for c in first] + [False] * len(headers)
    cls = ' class="sortable"' if sortable else ""
    ident = f' id="{escape(table_id)}"' if table_id else ""
    head = "".join(
        f"<th{' class=num' if numeric[k] else ''}>{escape(h)}</th>" for k, h in enumerate(headers)
    )
    body = []
    for row in rows:
        cells = []
        for k, cell in enumerate(row):
            align = " class=num" if numeric[k] else ""
            if isinstance(cell, tuple):
                text, value = cell
                cells.append(f'<td{align} data-value="{escape(value)}">{_cell(text)}</td>')
            else:
                cells.append(f"<td{align}>{_cell(cell)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (
        f"<table{cls}{ident}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


class Markup(str):
    """Text that is already HTML: :func:`table` inserts it as is."""


def _cell(value: object) -> str:
    return str(value) if isinstance(value, Markup) else escape(value)


def _sort_value(cell: object) -> object:
    return cell[1] if isinstance(cell, tuple) else cell


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _version() -> str:
    try:
        return metadata.version("rtgraph")
    except metadata.PackageNotFoundError:  # run from a source tree without installing
        return "(source tree)"


def page(title: str, subtitle: str, sections: Sequence[Section]) -> str:
    """The whole HTML document: a title, a contents line, the sections, the tooltip's box."""
    nav = "".join(f'<a href="#{escape(s.id)}">{escape(s.title)}</a>' for s in sections)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f'<meta name="generator" content="rtgraph {escape(_version())}">',
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1><p class=sub>{escape(subtitle)}</p><nav>{nav}</nav>",
    ]
    for s in sections:
        parts.append(f'<section id="{escape(s.id)}"><h2>{escape(s.title)}</h2>{s.body}</section>')
    parts.append(f'<div id="tip"></div><script>{SCRIPT}</script></body></html>')
    return "\n".join(parts) + "\n"
