"""The HTML run report: self-contained, every task hoverable, sortable, honest about its cuts —
checked on the page's text, and in a real headless browser (Chromium driven by Selenium)."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rtgraph
from rtgraph.reports.advisor import advise
from rtgraph.reports.html_page import table
from rtgraph.reports.html_run import run_report
from rtgraph.reports.html_timeline import svg_timeline

MODELS = Path(__file__).resolve().parent.parent / "models"

SOURCE = """
device "toy"
program chain(N = 16) {
    input x : f32[N, N]
    param w : f32[N, N]
    h = matmul(x, w)
    y = relu(h)
    z = add(y, x)
    output z
}
"""


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "chain.rtg"
    path.write_text(SOURCE)
    program = rtgraph.load(path)
    spec = rtgraph.device("toy")
    compiled = rtgraph.compile(program, device=spec, streams="by-unit")
    result = rtgraph.run(compiled, device=spec, seed=3)
    check = rtgraph.compare(result.outputs, rtgraph.reference(program, seed=3))
    return program, compiled, spec, result, check


def _page(ran, **kw) -> str:
    _, compiled, spec, result, check = ran
    kw.setdefault("check", check)
    kw.setdefault("check_mode", "full")
    return run_report(result, compiled, spec, advice=advise(result, compiled, spec), **kw)


def test_the_page_is_self_contained(ran):
    page = _page(ran)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    # nothing fetched: no external script, stylesheet, image, font or frame
    assert not re.search(r"""\b(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert "<link" not in page and "@import" not in page and "url(" not in page
    for section in ("summary", "timeline", "memory", "advice", "check", "compiler", "tasks"):
        assert f'<section id="{section}">' in page


def test_every_task_that_ran_is_one_hoverable_rect_on_its_stream_with_its_details(ran):
    _, _, _, result, _ = ran
    svg, note = svg_timeline(result)
    assert note == ""
    tips = re.findall(r'<rect class="task"[^>]*data-tip="([^"]*)"', svg)
    ran_tasks = [t for t in result.tasks if t.start is not None]
    assert len(tips) == len(ran_tasks)
    for t, tip in zip(sorted(ran_tasks, key=lambda t: t.id), tips, strict=True):
        assert tip.startswith(f"task {t.id} · {t.name}")
        assert f"{t.op} on {t.unit}" in tip and f"{t.start:,.3f} µs" in tip


def test_a_capped_timeline_says_what_it_left_out(ran):
    _, _, _, result, _ = ran
    svg, note = svg_timeline(result, limit=2)
    drawn = len(re.findall(r'<rect class="task"', svg))
    assert 0 < drawn <= 2
    assert f"of {len(result.tasks):,} tasks" in note and "--trace" in note


def test_the_check_section_says_bit_equal_differs_or_not_checked(ran):
    page = _page(ran)
    assert "bit-equal" in page and "DIFFERS" not in page
    _, _, _, _, check = ran
    wrong = {k: {**v, "equal": False, "max_abs": 0.5} for k, v in check.items()}
    assert "DIFFERS" in _page(ran, check=wrong)
    assert "Not checked" in _page(ran, check=None, check_mode="none")


def test_text_is_escaped():
    html = table(["name"], [["<script>alert(1)</script> & co"]])
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; co" in html


def test_the_task_table_lists_every_task_sortably(ran):
    _, _, _, result, _ = ran
    page = _page(ran)
    body = page.split('id="task-table"', 1)[1].split("</table>", 1)[0]
    assert 'class="sortable"' in page.split('id="task-table"', 1)[0][-40:]
    assert body.count("<tr>") == 1 + len(result.tasks)  # the header row and one per task


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rtgraph", *args], cwd=cwd, capture_output=True, text=True
    )


def test_rtgraph_report_writes_the_page_and_refuses_to_overwrite_its_input(tmp_path):
    src = tmp_path / "chain.rtg"
    src.write_text(SOURCE)
    done = _cli("report", str(src), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "chain.html").read_text()
    assert "chain on toy" in page and "bit-equal" in page
    refused = _cli("report", str(src), "-o", str(src), cwd=tmp_path)
    assert refused.returncode == 2 and "would overwrite" in refused.stderr
    assert src.read_text() == SOURCE
    timing = _cli("run", str(src), "--timing-only", "--html", "t.html", cwd=tmp_path)
    assert timing.returncode == 0, timing.stderr
    assert "Not checked" in (tmp_path / "t.html").read_text()


# --- in a real browser --------------------------------------------------------------------


def _browser():
    """A headless Chromium under Selenium, or a skip saying what is missing."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    chrome = next(
        (p for p in ("chromium", "chromium-browser", "google-chrome") if shutil.which(p)), None
    )
    driver = shutil.which("chromedriver")
    if chrome is None or driver is None:
        pytest.skip(
            "no Chromium and chromedriver on PATH (Debian: apt install chromium "
            "chromium-driver; .ci/run installs them)"
        )
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(arg)
    options.binary_location = shutil.which(chrome)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    from selenium.webdriver.chrome.service import Service

    return webdriver.Chrome(service=Service(driver), options=options)


@pytest.mark.slow
def test_the_page_works_in_a_browser(tmp_path):
    from matplotlib.image import imread
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    out = tmp_path / "attention.html"
    done = _cli(
        "report", str(MODELS / "attention.rtg"), "-D", "S=128", "-o", str(out), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    browser = _browser()
    try:
        browser.get(out.as_uri())
        assert browser.title.startswith("attention on")
        severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert severe == []
        # hover: the tooltip shows the task's details
        rect = browser.find_elements(By.CSS_SELECTOR, "#timeline rect.task")[5]
        ActionChains(browser).move_to_element(rect).perform()
        tip = browser.find_element(By.ID, "tip")
        assert tip.is_displayed() and tip.text == rect.get_attribute("data-tip")
        assert tip.text.startswith("task ")
        # sort: durations descending after two clicks on the header
        header = browser.find_elements(By.CSS_SELECTOR, "#task-table th")[-1]
        header.click()
        header.click()
        assert header.get_attribute("aria-sort") == "descending"
        cells = browser.find_elements(By.CSS_SELECTOR, "#task-table tbody tr td:last-child")
        values = [float(c.text) for c in cells]
        assert values == sorted(values, reverse=True) and values[0] > values[-1]
        # the picture is not blank
        shot = imread(io.BytesIO(browser.get_screenshot_as_png()))
        assert shot.shape[0] > 500 and float(np.std(shot)) > 0.05
    finally:
        browser.quit()
