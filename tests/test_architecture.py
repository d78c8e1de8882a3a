"""The layout is a contract: layers (import-linter), no cycles, no hidden imports, small modules.

`pyproject.toml`'s ``[tool.importlinter]`` names the pipeline's layers; these tests run it and
check what it cannot: that every package is in a layer, that no module imports itself round in
a cycle, that no function hides an import of the project (the old way of dodging a layer), and
that modules and the compiler's and emulator's functions stay small enough to read.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import grimp
import networkx as nx
import pytest
import tomllib
from conftest import ROOT

PACKAGE = ROOT / "rtgraph"
CLI = PACKAGE / "cli"
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
(CONTRACT,) = [c for c in CONFIG["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 100
SHORT_FUNCTIONS_IN = ("compiler", "emulator")
#: The only modules that draw (and so the only ones that import matplotlib).
PLOTTING = ("rtgraph.reports.", "rtgraph.bench.figure")


def sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def explained(lines: list[str], lineno: int) -> bool:
    """Whether the import on line ``lineno`` (1-based) carries a comment, or heads a run of
    imports that a comment line opens."""
    at = lineno - 1
    if "#" in lines[at]:
        return True
    while at > 0 and lines[at - 1].strip().startswith(("from ", "import ")):
        at -= 1
    return at > 0 and lines[at - 1].strip().startswith("#")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("rtgraph", include_external_packages=True)


def test_the_layers_contract_holds() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(lint), "--config", str(ROOT / "pyproject.toml")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "2 kept, 0 broken" in done.stdout


def test_every_module_is_in_a_layer() -> None:
    layered = {
        name.strip() for layer in CONTRACT["layers"] for name in layer.replace(":", "|").split("|")
    }
    top = {
        module_name(p).split(".")[1]
        for p in sources()
        if module_name(p) != "rtgraph" and not p.name.startswith("__main__")
    }
    assert {f"rtgraph.{name}" for name in top} == layered


def test_no_import_cycles(graph: grimp.ImportGraph) -> None:
    edges = nx.DiGraph()
    for module in graph.modules:
        if module.startswith("rtgraph"):
            edges.add_edges_from(
                (module, imported)
                for imported in graph.find_modules_directly_imported_by(module)
                if imported.startswith("rtgraph")
            )
    cycles = [sorted(c) for c in nx.strongly_connected_components(edges) if len(c) > 1]
    assert cycles == []


def test_no_function_hides_an_import() -> None:
    """A project module is imported at the top of a module, never inside a function — except in
    the CLI, the top layer, where no layer can be dodged and the picture modules load matplotlib
    only for the commands that draw. Every lazy import says why in a comment."""
    hidden, unexplained = [], []
    for path in sources():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for fn in ast.walk(ast.parse(text)):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if not isinstance(node, ast.Import | ast.ImportFrom):
                    continue
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                module = getattr(node, "module", None) or ""
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                project = isinstance(node, ast.ImportFrom) and (
                    node.level > 0 or module.split(".")[0] == "rtgraph"
                )
                commented = explained(lines, node.lineno)
                if project or any(n.split(".")[0] == "rtgraph" for n in names):
                    if CLI not in path.parents:
                        hidden.append(where)
                    elif not commented:
                        unexplained.append(where)
                elif not commented:
                    unexplained.append(where)
    assert hidden == []
    assert unexplained == []


def test_modules_are_small() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in sources()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_compiler_and_emulator_functions_are_short() -> None:
    long = {}
    for stage in SHORT_FUNCTIONS_IN:
        for path in sorted((PACKAGE / stage).rglob("*.py")):
            for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = fn.end_lineno - fn.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        long[f"{path.relative_to(ROOT)}::{fn.name}"] = length
    assert long == {}


def test_only_plotting_code_imports_matplotlib() -> None:
    """Only the picture modules load matplotlib (a type named for annotations does not)."""
    graph = grimp.build_graph(
        "rtgraph", include_external_packages=True, exclude_type_checking_imports=True
    )
    drawing = graph.find_modules_that_directly_import("matplotlib")
    assert drawing, "the reports draw with matplotlib"
    assert sorted(m for m in drawing if not m.startswith(PLOTTING)) == []


def test_starting_the_cli_or_a_sweep_worker_does_not_load_matplotlib() -> None:
    """matplotlib costs ~0.45 s to import: every CLI command and every sweep worker would pay it
    at start-up, though only the commands that draw need it (they load it when they draw)."""
    probe = (
        "import sys, rtgraph.cli, rtgraph.sweep.evaluate; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert done.stdout.strip() == "[]"


def test_pyproject_lists_every_package() -> None:
    """setuptools installs the packages pyproject names (one of them, the grammar, lives at the
    repository's top level), so a new package must be added there."""
    found = {module_name(p) for p in sources() if p.name == "__init__.py"}
    assert set(CONFIG["tool"]["setuptools"]["packages"]) == found | {"rtgraph.grammars"}
    assert CONFIG["tool"]["setuptools"]["package-dir"] == {"rtgraph.grammars": "grammars"}


def test_the_readme_layout_names_every_module() -> None:
    """README's "How it is built" lists the layout file for file: every package and module."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## How it is built") :]
    layout = section[
        section.index("```text") : section.index("```\n", section.index("```text") + 7)
    ]
    words = set(re.split(r"[\s,;()]+", layout))
    missing = []
    for path in sources():
        name = path.stem if path.stem not in ("__init__", "__main__") else None
        if name is not None and name not in words and f"{name}.py" not in words:
            missing.append(str(path.relative_to(ROOT)))
        if path.name == "__init__.py" and path.parent != PACKAGE:
            folder = f"{path.parent.name}/"
            if folder not in words and f"{path.parent.name}/*.toml" not in layout:
                missing.append(folder)
    assert missing == []
