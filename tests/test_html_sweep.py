"""The sweep's HTML page: every point plotted and listed, the front linked to run pages, and a
moved sweep file said, not crashed on."""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rtgraph.reports.html_sweep import front, sweep_report
from rtgraph.sweep.run import run_sweep

MODELS = Path(__file__).resolve().parent.parent / "models"


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    sweep = root / "sweep.toml"
    sweep.write_text(
        '[sweep]\nmode = "grid"\n\n[axes]\n'
        f'model = ["{MODELS / "overlap.rtg"}", "{MODELS / "double_buffer.rtg"}"]\n'
        'streams = ["single", "by-unit"]\nmemory = ["greedy", "stream-ordered"]\n'
    )
    run_sweep(sweep, root / "out", workers=1, pareto="makespan,memory")
    return root


def _report(folder: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rtgraph", "report", str(folder), *extra],
        capture_output=True,
        text=True,
    )


def test_the_sweep_page_plots_and_lists_every_point_and_links_the_front(swept):
    out = swept / "out"
    done = _report(out)
    assert done.returncode == 0, done.stderr
    page = (out / "report.html").read_text()
    rows = list(csv.DictReader((out / "table.csv").read_text(encoding="utf-8").splitlines()))
    assert len(re.findall(r'<circle class="point', page)) == len(rows) == 8
    on = {r["point"] for r in rows if r["pareto"] == "1"}
    assert len(re.findall(r'<circle class="point front"', page)) == len(on) > 0
    body = page.split('id="sweep-table"', 1)[1].split("</table>", 1)[0]
    assert body.count("<tr>") == 1 + len(rows)
    for key in on:  # each front point has its own run page, linked from the plot and the table
        assert (out / "runs" / f"{key}.html").is_file()
        assert page.count(f'href="runs/{key}.html"') == 2
    for row in rows:
        assert f'href="{row["result"]}"' in page and (out / row["result"]).is_file()
    assert not re.search(r"""\b(src|href)\s*=\s*["']?(https?:|//)""", page)


def test_a_moved_sweep_file_leaves_the_table_and_says_why_there_are_no_run_pages(swept, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(swept / "out", copy)
    shutil.rmtree(copy / "runs", ignore_errors=True)
    moved = swept / "sweep.toml"
    kept = moved.read_text()
    moved.unlink()
    try:
        done = _report(copy, "-o", str(tmp_path / "page.html"))
    finally:
        moved.write_text(kept)
    assert done.returncode == 0, done.stderr
    assert "no run pages: the sweep file cannot be read now" in (tmp_path / "page.html").read_text()


def test_the_front_is_the_points_no_other_beats_on_both():
    rows = [{"a": "1", "b": "5"}, {"a": "2", "b": "2"}, {"a": "3", "b": "3"}, {"a": "4", "b": "1"}]
    rows.append({"a": "", "b": "0"})  # a refused point has no figures: never on the front
    assert front(rows, "a", "b") == {0, 1, 3}
    html = sweep_report(rows, {"sweep": "s.toml"}, x="a", y="b")
    assert html.count('class="point front"') == 3


@pytest.mark.slow
def test_the_sweep_page_sorts_and_hovers_in_a_browser(swept):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from test_html_report import _browser

    out = swept / "out"
    assert _report(out).returncode == 0
    browser = _browser()
    try:
        browser.get((out / "report.html").as_uri())
        assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
        headers = browser.find_elements(By.CSS_SELECTOR, "#sweep-table th")
        column = [h.text for h in headers].index("makespan_us")
        headers[column].click()
        cells = browser.find_elements(
            By.CSS_SELECTOR, f"#sweep-table tbody tr td:nth-child({column + 1})"
        )
        values = [float(c.text) for c in cells]
        assert values == sorted(values) and len(values) == 8
        dot = browser.find_elements(By.CSS_SELECTOR, "#tradeoff circle.front")[0]
        ActionChains(browser).move_to_element(dot).perform()
        tip = browser.find_element(By.ID, "tip")
        assert tip.is_displayed() and "on the Pareto front" in tip.text
    finally:
        browser.quit()
