"""The command line reads well: help without reStructuredText markup, examples, help on every
flag, shell completion generated from the parser, and ``bench -D``."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rtgraph.cli.completion import bash_script
from rtgraph.cli.parser import build_parser

MODELS = Path(__file__).resolve().parent.parent / "models"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no subcommands")


def test_the_top_help_has_a_description_examples_and_no_rst_markup():
    text = build_parser().format_help()
    assert "``" not in text and ":func:" not in text and ":data:" not in text
    assert "examples:" in text and "rtgraph run models/attention.rtg" in text
    assert "Exit status" in text


@pytest.mark.parametrize("name", sorted(_subparsers(build_parser())))
def test_every_flag_of_every_command_says_what_it_does(name):
    sub = _subparsers(build_parser())[name]
    text = sub.format_help()
    assert "``" not in text and ":class:" not in text
    for action in sub._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help, f"rtgraph {name}: {action.option_strings or action.dest} has no help"


def _complete(script: str, *words: str) -> list[str]:
    line = " ".join(f'"{w}"' for w in words)
    done = subprocess.run(
        [
            "bash",
            "-c",
            f"{script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; "
            '_rtgraph_complete; printf "%s\\n" "${COMPREPLY[@]}"',
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return [w for w in done.stdout.splitlines() if w]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash to load the script into")
def test_bash_completion_offers_commands_flags_and_choices():
    script = bash_script(build_parser())
    assert set(_complete(script, "rtgraph", "r")) >= {"run", "report"}
    assert "--streams" in _complete(script, "rtgraph", "run", "--str")
    assert _complete(script, "rtgraph", "run", "x.rtg", "--check", "") == ["full", "sample", "none"]
    assert "by-unit" in _complete(script, "rtgraph", "compile", "x.rtg", "--streams", "b")
    # a flag added to the parser completes without editing any script
    parser = build_parser()
    _subparsers(parser)["ops"].add_argument("--brand-new-flag", help="new")
    assert "--brand-new-flag" in _complete(bash_script(parser), "rtgraph", "ops", "--brand")


def _rtgraph(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rtgraph", *args], capture_output=True, text=True)


def test_the_completion_command_prints_each_shells_script():
    bash = _rtgraph("completion", "bash")
    assert (
        bash.returncode == 0 and "complete -o filenames -F _rtgraph_complete rtgraph" in bash.stdout
    )
    zsh = _rtgraph("completion", "zsh")
    assert zsh.returncode == 0 and "bashcompinit" in zsh.stdout
    assert _rtgraph("completion", "fish").returncode == 2


def test_bench_takes_defines_for_every_model_or_one():
    few = ["--streams", "by-unit", "--memory", "none", "--alloc", "direct", "--json", "-q"]
    mlp = str(MODELS / "mlp.rtg")
    every = _rtgraph("bench", mlp, "-D", "B=8", *few)
    assert every.returncode == 0, every.stderr
    assert json.loads(every.stdout)["params"]["mlp"]["B"] == 8
    one = _rtgraph("bench", mlp, "-D", "mlp.B=16", *few)
    assert json.loads(one.stdout)["params"]["mlp"]["B"] == 16
    nobody = _rtgraph("bench", mlp, "-D", "NOPE=1", *few)
    assert nobody.returncode == 2 and "no model benchmarked declares" in nobody.stderr
