"""The table of every op: made from the registry, printed by ``rtgraph ops``, and kept current
in docs/language.md by ``tools/make_op_table.py``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rtgraph.ops import language_ops, op_table
from rtgraph.ops.table import cost_summary

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "language.md"


def load_tool():
    spec = importlib.util.spec_from_file_location(
        "make_op_table", ROOT / "tools" / "make_op_table.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def table_rows(text: str) -> list[list[str]]:
    """The cells of each body row of the Markdown tables in ``text``."""
    rows = []
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def test_docs_language_md_holds_the_current_op_table():
    tool = load_tool()
    text = DOC.read_text(encoding="utf-8")
    assert text.count(tool.BEGIN) == 1 and text.count(tool.END) == 1
    assert tool.with_op_table(text) == text, "docs/language.md is stale: run tools/make_op_table.py"


def test_the_doc_table_lists_every_registered_op_once_in_registry_order():
    tool = load_tool()
    text = DOC.read_text(encoding="utf-8")
    block = text[text.index(tool.BEGIN) : text.index(tool.END)]
    names = [row[0] for row in table_rows(block) if row[1] != "attribute" and row[0] != "op"]
    overview = names[: len(language_ops())]
    assert overview == [f"`{name}`" for name in language_ops()]


def test_every_op_row_gives_unit_tensors_cost_and_doc():
    rows = {row[0]: row for row in table_rows(op_table()) if len(row) == 6 and row[0] != "op"}
    for name, op in language_ops().items():
        _, unit, tensors, _, cost, doc = rows[f"`{name}`"]
        assert unit and tensors and cost and doc == op.doc.replace("|", "\\|"), name


@pytest.mark.parametrize("name", list(language_ops()))
def test_every_cost_rule_says_what_it_counts(name):
    assert cost_summary(language_ops()[name])


def test_every_attribute_has_a_row_with_its_default():
    rows = {(row[0], row[1]): row for row in table_rows(op_table()) if len(row) == 5}
    for name, op in language_ops().items():
        for attr, spec in op.attrs.items():
            _, _, kind, default, _ = rows[(f"`{name}`", f"`{attr}`")]
            assert kind.startswith(spec.kind)
            assert (default == "required") == spec.required


def test_the_tool_refuses_a_doc_without_markers():
    with pytest.raises(ValueError, match="markers"):
        load_tool().with_op_table("# no table here\n")
