"""Compile options: one object, vocabularies declared once, the CLI and the docs generated."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect

import pytest
from conftest import MODELS, ROOT

import rtgraph
from rtgraph.alloc import KINDS
from rtgraph.cli import build_parser, main
from rtgraph.compiler import pipeline
from rtgraph.compiler.optimizer.levels import LEVELS
from rtgraph.compiler.optimizer.levels import PASSES as OPT_PASSES
from rtgraph.compiler.optimizer.precision_vocabulary import PRECISIONS, SCALE_METHODS
from rtgraph.compiler.options import OPTIONS, CompileOptions, OptionError, options_markdown
from rtgraph.compiler.passes.alloc_modes import ALLOC_MODES
from rtgraph.compiler.passes.memory_plans import PLANS
from rtgraph.compiler.scheduling.policies import POLICIES, ListScheduler
from rtgraph.errors import UsageError

MLP = str(MODELS / "mlp.rtg")
VOCABULARIES = {
    "--streams": tuple(POLICIES),
    "--memory": tuple(PLANS),
    "--alloc": ALLOC_MODES,
    "-O": tuple(str(level) for level in LEVELS),
    "--passes": tuple(OPT_PASSES),
    "--precision": tuple(PRECISIONS),
    "--calibration-method": tuple(SCALE_METHODS),
}


def _make_options_doc():
    """``tools/make_options_doc.py`` as a module (the tools folder is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "make_options_doc", ROOT / "tools" / "make_options_doc.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_options_md_is_current():
    tool = _make_options_doc()
    assert tool.DOC.read_text(encoding="utf-8") == options_markdown(), (
        "docs/options.md is stale: run python tools/make_options_doc.py"
    )
    assert tool.main(["--check"]) == 0


def test_every_value_of_every_option_is_documented():
    text = options_markdown()
    for option in OPTIONS:
        assert f"## `{option.name}`" in text
        for value in option.values:
            assert f"| `{value}` |" in text


def _compile_actions(command: str) -> dict[str, object]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return {s: a for a in sub.choices[command]._actions for s in a.option_strings}


@pytest.mark.parametrize("command", ["compile", "run", "advise", "profile", "viz"])
def test_the_cli_offers_exactly_the_vocabularies(command):
    actions = _compile_actions(command)
    for flag, values in VOCABULARIES.items():
        assert actions[flag].metavar == "{" + ",".join(values) + "}", flag
        assert all(f"{value} = " in actions[flag].help for value in values), flag
    defaults = CompileOptions()
    assert actions["--memory"].default == defaults.memory
    assert actions["--alloc"].default == defaults.alloc
    assert actions["--streams"].default == defaults.streams


def test_the_vocabularies_are_declared_next_to_their_implementations():
    assert ("static", *KINDS, "mixed") == ALLOC_MODES
    assert {"single", "by-unit", "by-unit:N", "explicit", "list"} <= set(POLICIES)
    assert set(PLANS) == {"none", "greedy", "stream-ordered", "timed"}
    # The options module gathers them; it declares none of its own.
    by_flag = {o.flag: tuple(o.values) for o in OPTIONS if o.values}
    assert by_flag == VOCABULARIES


@pytest.mark.parametrize(
    ("flag", "value", "problem", "hint"),
    [
        ("--streams", "by-unitt", "unknown stream policy", "did you mean 'by-unit'?"),
        ("--memory", "gready", "unknown memory plan", "did you mean 'greedy'?"),
        ("--alloc", "pytorh", "unknown allocation mode", "did you mean 'pytorch'?"),
        ("--batch-size", "0", "must be at least 1", None),
    ],
)
def test_a_bad_value_is_a_located_hinted_usage_error(capsys, flag, value, problem, hint):
    assert main(["compile", MLP, flag, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {flag} {value}: {problem}")
    if hint:
        assert f"hint: {hint}" in err


def test_a_bad_value_from_python_names_the_option():
    with pytest.raises(OptionError, match="memory='gready': unknown memory plan") as info:
        CompileOptions(memory="gready")
    assert isinstance(info.value, UsageError) and info.value.hint == "did you mean 'greedy'?"
    with pytest.raises(UsageError, match="streams='by-unit:0'"):
        CompileOptions(streams="by-unit:0")
    with pytest.raises(UsageError, match="unknown allocation mode"):
        rtgraph.compile(rtgraph.load(MLP, device="toy"), alloc="slab")


def test_options_are_frozen_and_bind_the_device_with_its_batch_size():
    spec = rtgraph.device("toy")
    options = CompileOptions(batch_size=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.memory = "none"  # type: ignore[misc]
    bound = options.for_device(spec)
    assert bound.target.host.batch_size == 3 and spec.host.batch_size != 3
    assert CompileOptions().for_device(spec).target == spec
    with pytest.raises(UsageError, match="no device"):
        _ = CompileOptions().target


def test_the_order_search_settings_reach_the_list_scheduler():
    policy = CompileOptions(streams="list", order_seed=7, order_budget=11).stream_policy()
    assert isinstance(policy, ListScheduler)
    assert (policy.order_seed, policy.order_budget) == (7, 11)


def test_every_pass_takes_the_graph_and_the_options():
    lists = (pipeline.PASSES, pipeline.STREAM_ORDERED_PASSES, pipeline.RUNTIME_ALLOC_PASSES)
    for pass_ in {p for passes in lists for p in passes}:
        params = list(inspect.signature(pass_).parameters)
        assert params[1:] == ["options"], pass_.__name__


def test_the_options_choose_the_pass_list():
    assert pipeline.pipeline(CompileOptions(memory="greedy")) is pipeline.PASSES
    assert pipeline.pipeline(CompileOptions(memory="timed")) is pipeline.STREAM_ORDERED_PASSES
    assert pipeline.pipeline(CompileOptions(alloc="pool")) is pipeline.RUNTIME_ALLOC_PASSES


def test_compile_takes_an_options_object_or_keywords_not_both():
    program = rtgraph.load(MLP, device="toy")
    options = CompileOptions(streams="single", memory="greedy")
    by_object = rtgraph.compile(program, device="toy", options=options)
    by_keywords = rtgraph.compile(program, device="toy", streams="single", memory="greedy")
    assert by_object == by_keywords
    with pytest.raises(UsageError, match="not both"):
        rtgraph.compile(program, device="toy", streams="list", options=options)


def test_a_huge_bad_value_is_not_echoed_back(capsys):
    huge = "x" * 100_000
    assert main(["compile", str(MODELS / "mlp.rtg"), "--streams", huge]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --streams {'x' * 40}…: unknown stream policy\n")
    assert len(err) < 300
    with pytest.raises(OptionError) as info:
        CompileOptions(streams=huge)
    assert info.value.message == f"streams='{'x' * 40}…': unknown stream policy"
