"""Every Python and shell snippet in README.md and docs/*.md runs, as a reader would run it;
docs/architecture.md and its picture show the layers contract that pyproject.toml declares.

A fenced block tagged ``python`` (or ``py``) runs as a script; ``sh``, ``bash`` or ``shell`` runs
in bash with ``-e`` (every command must succeed); ``console`` runs each ``$ `` line and compares
what it prints with the lines shown under it (a line ``…`` stands for any lines). Each snippet
runs in a fresh temporary folder holding a copy of ``models/`` and ``tools/`` (and an empty
``docs/``), so ``models/attention.rtg`` resolves as in the repository and nothing a snippet writes
lands in the checkout; the ``rtgraph`` console script and ``python`` are the test's own.

Output samples, grammar, ``.rtg`` code and excerpts are not meant to run: they are fenced as
``text``, ``rtg``, ``toml``, … and left alone. A snippet that fails here is a bug in the doc.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT
from PIL import Image

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, as a package
    import tomli as tomllib

DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
#: Fence languages that run, and how: as a Python script, a bash script, a console session.
LANGUAGES = {
    "python": "python",
    "py": "python",
    "sh": "sh",
    "bash": "sh",
    "shell": "sh",
    "console": "console",
}

#: Set-up commands a snippet may chain with ``&&`` that the test does not repeat: the test runs
#: inside an environment that already has rtgraph installed (tests/test_wheel.py checks the
#: install from a wheel), and running the suite from inside the suite would recurse.
NOT_RERUN = ("pip install", "python3 -m venv", ". .venv/bin/activate", "pytest")

#: A snippet that touches one of these runs a bundled model's whole pipeline at the model's own
#: (default) size, or several of them — seconds to a minute each — unless it shrinks the model
#: (:data:`SMALL_SIZE`: a size parameter set to at most 256, ``S=128`` or ``-D S=128``).
EXPENSIVE = re.compile(
    r"rtgraph (run|bench|profile|viz|advise)\b|rtgraph\.(run|evaluate)\(|\bprofile\(|"
    r"make_readme_pictures"
)
SMALL_SIZE = re.compile(r"\b[A-Z]\w*=(\d+)\b")
TIMEOUT_S = 900


@dataclass(frozen=True)
class Snippet:
    """One fenced block: where it is, its language (``python``, ``sh`` or ``console``), its text."""

    doc: Path
    line: int
    language: str
    text: str

    @property
    def name(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"

    @property
    def slow(self) -> bool:
        """Whether it runs a bundled model at its default size (see :data:`EXPENSIVE`)."""
        if not EXPENSIVE.search(self.text):
            return False
        sizes = [int(s) for s in SMALL_SIZE.findall(self.text)]
        return not sizes or min(sizes) > 256


FENCE_OPEN = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")


def fenced_blocks(markdown: str) -> list[tuple[int, str, str]]:
    """Every fenced block of a Markdown text: (line of the opening fence, language, text)."""
    blocks = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE_OPEN.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        language = (opening["info"].split() or [""])[0].lower()
        body, i = [], i + 1
        start = i
        while i < len(lines) and not (
            lines[i].strip().startswith(fence) and lines[i].strip().strip(fence[0]) == ""
        ):
            line = lines[i]
            body.append(line[min(indent, len(line) - len(line.lstrip(" "))) :])
            i += 1
        blocks.append((start, language, "\n".join(body) + "\n"))
        i += 1
    return blocks


def snippets() -> list[Snippet]:
    """The runnable blocks of README.md and docs/*.md, in document order."""
    return [
        Snippet(doc, line, LANGUAGES[language], text)
        for doc in DOCS
        for line, language, text in fenced_blocks(doc.read_text(encoding="utf-8"))
        if language in LANGUAGES
    ]


def without_setup(command: str) -> str:
    """``command`` without the ``&&``-chained parts named in :data:`NOT_RERUN`."""
    parts = [p.strip() for p in command.split("&&")]
    kept = [p for p in parts if not p.startswith(NOT_RERUN)]
    return " && ".join(kept)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A scratch folder laid out like the repository's top level, for snippets to run in."""
    for folder in ("models", "tools"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    (tmp_path / "docs").mkdir()
    return tmp_path


def environment() -> dict[str, str]:
    """This interpreter's ``bin`` first on PATH (for ``rtgraph`` and ``python``), no display."""
    env = dict(os.environ, MPLBACKEND="Agg")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def execute(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        cwd=cwd,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT_S,
    )


def run_python(snippet: Snippet, cwd: Path) -> None:
    script = cwd / "snippet.py"
    script.write_text(snippet.text, encoding="utf-8")
    done = execute([sys.executable, str(script)], cwd)
    assert done.returncode == 0, f"{snippet.name} failed:\n{done.stdout[-4000:]}"


def run_shell(snippet: Snippet, cwd: Path) -> None:
    script = "\n".join(without_setup(line) for line in snippet.text.splitlines())
    done = execute(["bash", "-e", "-o", "pipefail", "-c", script], cwd)
    assert done.returncode == 0, f"{snippet.name} failed:\n{done.stdout[-4000:]}"


def console_sessions(text: str) -> list[tuple[str, list[str]]]:
    """``$ command`` lines of a console block, each with the output lines shown under it."""
    sessions: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            sessions.append((line[2:], []))
        elif sessions:
            sessions[-1][1].append(line.rstrip())
    return sessions


def shown_in(shown: list[str], actual: list[str]) -> bool:
    """Whether ``actual`` is the output shown, a line ``…`` (or ``...``) standing for any lines."""
    if not any(line.strip() in ("…", "...") for line in shown):
        return shown == actual
    rest = iter(actual)
    return all(line.strip() in ("…", "...") or any(line == seen for seen in rest) for line in shown)


def run_console(snippet: Snippet, cwd: Path) -> None:
    for command, shown in console_sessions(snippet.text):
        done = execute(["bash", "-o", "pipefail", "-c", without_setup(command)], cwd)
        actual = [line.rstrip() for line in done.stdout.rstrip("\n").splitlines()]
        while shown and not shown[-1]:
            shown.pop()
        if shown:
            assert shown_in(shown, actual), (
                f"{snippet.name}: `{command}` printed\n{done.stdout}\nbut the doc shows\n"
                + "\n".join(shown)
            )
        else:
            assert done.returncode == 0, f"{snippet.name}: `{command}` failed:\n{done.stdout}"


RUNNERS = {"python": run_python, "sh": run_shell, "console": run_console}


def _param(snippet: Snippet) -> object:
    marks = [pytest.mark.slow] if snippet.slow else []
    return pytest.param(snippet, id=snippet.name, marks=marks)


@pytest.mark.parametrize("snippet", [_param(s) for s in snippets()])
def test_snippet_runs(snippet: Snippet, workdir: Path) -> None:
    RUNNERS[snippet.language](snippet, workdir)


def test_the_docs_have_runnable_snippets() -> None:
    """A guard against the extractor silently finding nothing (a changed fence style)."""
    found = {(s.doc.name, s.language) for s in snippets()}
    assert ("README.md", "python") in found
    assert ("README.md", "sh") in found


def test_every_fence_says_whether_it_runs() -> None:
    """A block either runs (python, sh, console) or says what it is (rtg, text, toml, …): a bare
    fence would silently escape this file's checks."""
    bare = [
        f"{doc.relative_to(ROOT)}:{line}"
        for doc in DOCS
        for line, language, _ in fenced_blocks(doc.read_text(encoding="utf-8"))
        if not language
    ]
    assert bare == []


def test_fences_are_read_as_a_reader_sees_them() -> None:
    doc = (
        "text\n```python\nprint(1)\n```\n\n* item\n\n  ```sh\n  echo hi\n  ```\n"
        "````text\n```python\nnot a block\n```\n````\n```\nplain\n```\n"
    )
    assert fenced_blocks(doc) == [
        (2, "python", "print(1)\n"),
        (8, "sh", "echo hi\n"),
        (11, "text", "```python\nnot a block\n```\n"),
        (16, "", "plain\n"),
    ]
    assert without_setup("pip install . && rtgraph run m.rtg  # go") == "rtgraph run m.rtg  # go"
    assert shown_in(["a", "…", "c"], ["a", "b", "c"]) and not shown_in(["a"], ["a", "b"])


# --- docs/architecture.md draws the layers contract ----------------------------------------


def contract_layers() -> list[list[str]]:
    """The layers of pyproject.toml's import-linter contract, top first, siblings split."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    return [[name.strip() for name in layer.split("|")] for layer in contract["layers"]]


REGENERATE = "stale: run python tools/make_architecture_diagram.py"


def test_the_architecture_doc_lists_the_contracts_layers() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split("<!-- layers:begin -->", 1)[1].split("<!-- layers:end -->", 1)[0]
    (listed,) = [body for _, language, body in fenced_blocks(block) if language == "text"]
    assert [line.split(" | ") for line in listed.splitlines()] == contract_layers(), REGENERATE


def test_the_architecture_picture_was_drawn_from_the_contract() -> None:
    with Image.open(ROOT / "docs" / "architecture.png") as picture:
        drawn = json.loads(picture.text["rtgraph-layers"])
    assert drawn == contract_layers(), REGENERATE
