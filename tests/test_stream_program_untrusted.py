"""A compiled stream program is untrusted input (issue 13).

Loading JSON holds every field to the published schema (docs/stream-program.schema.json) and
every reference to what it names; running it holds the plan to the device. Each tampered field
is refused with its JSON path and exit status 1 — never a traceback, never a run with NaN
durations, infinite makespans or 3 GB on a 1 GiB device. And ``run``, ``profile``, ``advise``
and ``viz`` accept a compiled ``.json`` as the documentation says.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import MODELS

import rtgraph
from rtgraph.cli import main
from rtgraph.errors import StreamProgramError
from rtgraph.stream_program import StreamProgram, from_dict, to_dict
from rtgraph.stream_program.schema import (
    KEYWORDS,
    MAX_PROGRAM_JSON_BYTES,
    SCHEMA_DOC,
    check_depth,
    check_document,
    schema_text,
)

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = Path(__file__).resolve().parent / "hostile" / "json"
MLP = str(MODELS / "mlp.rtg")


@pytest.fixture(scope="module")
def compiled() -> dict:
    """A small program compiled as written (``-O0``: the tasks the cases name) for the 1 GiB
    ``toy`` device, as JSON data."""
    program = rtgraph.load(MLP, B=4, device="toy")
    return to_dict(rtgraph.compile(program, device="toy", opt_level=0))


def _tampered(tmp_path: Path, data: dict, change: Callable[[dict], None]) -> str:
    data = copy.deepcopy(data)
    change(data)
    path = tmp_path / "tampered.json"
    path.write_text(json.dumps(data))  # NaN and Infinity written as JSON's non-standard tokens
    return str(path)


def _set(*keys: str | int, value: object) -> Callable[[dict], None]:
    def change(data: dict) -> None:
        target = data
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value

    return change


def _sync_on_stream(stream: int) -> Callable[[dict], None]:
    return lambda data: data["commands"].append({"cmd": "sync", "kind": "stream", "target": stream})


# Every case: the field changed, the command that reads it, and the exact message after "PATH: ".
TAMPERED = {
    "nan-duration": (
        _set("tasks", 3, "duration_us", value=math.nan),
        "check",
        "tasks[3].duration_us: must be finite and ≥ 0, got NaN",
    ),
    "infinite-duration": (
        _set("tasks", 3, "duration_us", value=math.inf),
        "run",
        "tasks[3].duration_us: must be finite and ≥ 0, got inf",
    ),
    "negative-duration": (
        _set("tasks", 3, "duration_us", value=-1.5),
        "run",
        "tasks[3].duration_us: must be finite and ≥ 0, got -1.5",
    ),
    "huge-duration": (
        _set("tasks", 3, "duration_us", value=1e300),
        "run",
        "tasks[3].duration_us: must be finite and ≤ 1,000,000,000,000, got 1e+300",
    ),
    "3-GB-on-a-1-GiB-device": (
        _set("memory", "total_bytes", value=3 * 10**9),
        "run",
        "memory.total_bytes: the program needs 3,000,000,000 bytes of device memory; device "
        "'toy' has 1,073,741,824",
    ),
    "event-out-of-range": (
        _set("commands", 1, "event", value=5),
        "check",
        "commands[1].event: event 5 is out of range (0..0)",
    ),
    "negative-event": (
        _set("commands", 1, "event", value=-1),
        "check",
        "commands[1].event: must be finite and ≥ 0, got -1",
    ),
    "sync-on-unknown-stream": (
        _sync_on_stream(7),
        "check",
        "commands[36].target: names stream 7, which is not declared (0, 1, 2)",
    ),
    "wait-on-unknown-stream": (
        _set("commands", 2, "stream", value=9),
        "check",
        "commands[2].stream: names stream 9, which is not declared (0, 1, 2)",
    ),
    "launch-on-unknown-stream": (
        _set("commands", 0, "stream", value=9),
        "run",
        "commands[0].stream: names stream 9, which is not declared (0, 1, 2)",
    ),
    "unknown-dtype": (
        _set("tasks", 1, "inputs", 0, "dtype", value="f64"),
        "check",
        "tasks[1].inputs[0].dtype: must be one of 'f32', 'f16', 'bf16', 'i8', 'i32', got \"f64\"",
    ),
    "huge-host-shape": (
        _set("host_tensors", 0, "shape", value=[2**30, 2**30]),
        "run",
        "host_tensors[0].shape: [1073741824, 1073741824] has 1,152,921,504,606,846,976 "
        "elements; the limit is 1,099,511,627,776",
    ),
    "huge-operand-shape": (
        _set("tasks", 1, "inputs", 0, "shape", value=[2**20, 2**20]),
        "run",
        "tasks[1].inputs[0].shape: a view of 1,099,511,627,776 f16 elements "
        "(2,199,023,255,552 bytes) is larger than device memory of 5,310,528 bytes "
        "(memory.total_bytes)",
    ),
    "operand-outside-its-region": (
        _set("tasks", 1, "inputs", 1, "offset", value=64),
        "run",
        "tasks[1].inputs[1]: its bytes [64, 1,048,640) lie outside region 'w_in' [0, 1,048,576)",
    ),
    "task-naming-an-unknown-region": (
        _set("tasks", 1, "regions", 0, value="w_inn"),
        "check",
        "tasks[1].regions[0]: names region 'w_inn', which memory.regions lacks",
    ),
    "region-outside-memory": (
        _set("memory", "regions", 0, "offset", value=5_000_000),
        "check",
        "memory.regions[0]: bytes [5,000,000, 6,048,576) lie outside device memory of "
        "5,310,528 bytes (memory.total_bytes)",
    ),
    "output-shape-the-op-does-not-give": (
        _set("tasks", 1, "output", "shape", value=[4, 512]),
        "run",
        "tasks[1].output: op 'matmul' on these inputs gives f16[4, 1024], not f16[4, 512]",
    ),
    "unknown-op": (
        _set("tasks", 1, "op", value="matmull"),
        "run",
        "tasks[1].op: unknown op 'matmull'",
    ),
    "string-for-an-integer": (
        _set("tasks", 1, "flops", value="3"),
        "run",
        'tasks[1].flops: must be an integer, got "3"',
    ),
    "unknown-key": (
        _set("tasks", 1, "duration", value=3),
        "check",
        "tasks[1]: unknown key 'duration'",
    ),
    "unknown-command": (
        _set("commands", 1, "cmd", value="recrod"),
        "check",
        "commands[1].cmd: must be one of 'launch', 'record', 'wait', 'barrier', 'callback', "
        "'sync', 'alloc', 'free', got \"recrod\"",
    ),
    "task-launched-twice": (
        _set("commands", 3, "task", value=0),
        "check",
        "commands[3].task: task 0 was launched already (commands[0])",
    ),
    "h2d-of-no-input": (
        _set("tasks", 0, "host", value="y"),
        "run",
        "tasks[0].host: must name an input host tensor, got 'y'",
    ),
    "report-missing-a-figure": (
        lambda data: data["meta"]["barriers"].pop("waits"),
        "run",
        "meta.barriers: missing key 'waits'",
    ),
    "priority-the-device-lacks": (
        _set("streams", 1, "priority", value=9),
        "run",
        "streams[1].priority: 9 is not a priority of device 'toy' (0..7)",
    ),
    "more-events-than-the-device-keeps": (
        _set("num_events", value=5000),
        "profile",
        "num_events: the program uses 5,000 events; device 'toy' keeps at most 1,024",
    ),
    "deep-nesting-in-attrs": (
        _set("tasks", 1, "attrs", "x", value=json.loads("[" * 40 + "]" * 40)),
        "check",
        "tasks[1].attrs.x" + "[0]" * 28 + ": nested more than 32 levels deep",
    ),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_a_tampered_field_is_refused_with_its_json_path(case, compiled, tmp_path, capsys):
    change, command, message = TAMPERED[case]
    path = _tampered(tmp_path, compiled, change)
    argv = [command, path] + (["-o", str(tmp_path / "profile")] if command == "profile" else [])
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[0] == f"error: {path}: {message}"
    assert "Traceback" not in err
    assert not (tmp_path / "profile").exists()


def test_the_loader_refuses_without_the_cli(compiled):
    data = copy.deepcopy(compiled)
    data["tasks"][3]["duration_us"] = math.nan
    with pytest.raises(StreamProgramError) as e:
        from_dict(data)
    assert e.value.message == "tasks[3].duration_us: must be finite and ≥ 0, got NaN"


def test_the_emulator_holds_a_program_to_its_device(compiled):
    """``rtgraph.run`` checks the plan against the device before allocating its memory."""
    data = copy.deepcopy(compiled)
    data["memory"]["total_bytes"] = 3 * 10**9
    program = from_dict(data)  # fits the program's own limits, not the 1 GiB device
    with pytest.raises(StreamProgramError) as e:
        rtgraph.run(program, device="toy")
    assert e.value.message == (
        "memory.total_bytes: the program needs 3,000,000,000 bytes of device memory; device "
        "'toy' has 1,073,741,824"
    )
    assert rtgraph.run(program, device="ascend-910b", numerics=False).makespan_us > 0


def test_a_block_dim_the_device_lacks_is_refused_before_the_run(compiled, tmp_path, capsys):
    path = _tampered(tmp_path, compiled, _set("tasks", 1, "block_dim", value=9))
    assert main(["run", path]) == 1
    err = capsys.readouterr().err
    assert (
        f"error: {path}: tasks[1].block_dim: task 1 'h @ w' (matmul) needs 9 cube cores; "
        "device 'toy' has 1"
    ) in err
    assert "hint: recompile the program for device 'toy' (rtgraph compile --device)" in err


HOSTILE_FILES = {
    "truncated.json": "not a stream program: invalid JSON (Unterminated string starting at: "
    "line 24 column 2 (char 296))",
    "deep.json": "not a stream program: JSON nested more than 32 levels deep",
    "huge-number.json": "not a stream program: a number in it has thousands of digits",
    "not-an-object.json": "not a stream program: missing schema marker",
    "empty.json": "not a stream program: invalid JSON (Expecting value: line 1 column 1 (char 0))",
    "version-2.json": "stream program version 2 is not supported",
}


@pytest.mark.parametrize("name", sorted(HOSTILE_FILES))
@pytest.mark.parametrize("command", ["check", "run"])
def test_hostile_files_are_refused(name, command, capsys):
    path = HOSTILE / name
    assert main([command, str(path)]) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[0] == f"error: {path}: {HOSTILE_FILES[name]}"


def test_a_json_over_the_size_cap_is_refused_unread(tmp_path, capsys):
    big = tmp_path / "big.json"
    with big.open("wb") as f:  # sparse: 10.5 MB that cost no disk and are never read
        f.truncate(10_500_000)
    assert main(["check", str(big)]) == 1
    assert capsys.readouterr().err.splitlines()[0] == (
        f"error: {big}: 10,500,000 bytes is over the limit of {MAX_PROGRAM_JSON_BYTES:,} bytes "
        "for a stream program's JSON"
    )


def test_a_generated_10_mb_program_text_is_refused_before_parsing(compiled):
    data = copy.deepcopy(compiled)
    data["source"]["text"] = "#" * 10_500_000
    with pytest.raises(StreamProgramError) as e:
        StreamProgram.from_json(json.dumps(data))
    assert e.value.message == (
        f"not loaded: the stream program's JSON is over {MAX_PROGRAM_JSON_BYTES:,} bytes"
    )


def test_a_folder_named_json_is_refused(tmp_path, capsys):
    folder = tmp_path / "dir.json"
    folder.mkdir()
    assert main(["check", str(folder)]) == 1
    assert capsys.readouterr().err.splitlines()[0] == f"error: {folder}: not a regular file"


# --- a compiled .json runs -------------------------------------------------------------------


@pytest.fixture
def compiled_file(tmp_path) -> Path:
    out = tmp_path / "mlp.json"
    assert main(["compile", MLP, "-D", "B=4", "--device", "toy", "-o", str(out)]) == 0
    return out


def test_run_json_gives_the_makespan_of_the_rtg_run(compiled_file, capsys):
    capsys.readouterr()
    assert main(["run", MLP, "-D", "B=4", "--device", "toy", "--json"]) == 0
    from_source = json.loads(capsys.readouterr().out)
    assert main(["run", str(compiled_file), "--json"]) == 0
    from_json = json.loads(capsys.readouterr().out)
    assert from_json["makespan_us"] == from_source["makespan_us"] > 0
    assert from_json["reference"] == {} and from_json["reference_checked"] is False
    assert from_source["reference_checked"] is True


def test_run_json_says_there_is_no_reference_check(compiled_file, capsys):
    assert main(["run", str(compiled_file)]) == 0
    out = capsys.readouterr().out
    assert "makespan" in out and "bit-equal" not in out
    assert (
        "no check against the reference interpreter: a compiled stream program carries no "
        "program to evaluate (run the .rtg for it)"
    ) in out


def test_profile_advise_and_viz_accept_a_compiled_json(compiled_file, tmp_path, capsys):
    assert main(["profile", str(compiled_file), "-o", str(tmp_path / "prof")]) == 0
    assert (tmp_path / "prof" / "op_summary.csv").is_file()
    assert main(["advise", str(compiled_file)]) == 0
    assert main(["viz", str(compiled_file), "--dag", str(tmp_path / "dag.png")]) == 0
    assert (tmp_path / "dag.png").stat().st_size > 0
    assert f"wrote {tmp_path / 'dag.png'}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["run", "FILE", "-D", "B=8"],
            "-D B=8: a compiled stream program has no parameters to set",
        ),
        (
            ["run", "FILE", "--streams", "single"],
            "--streams cannot apply to FILE: a stream program is compiled already",
        ),
        (
            ["profile", "FILE", "--memory", "greedy"],
            "--memory cannot apply to FILE: a stream program is compiled already",
        ),
        (
            ["viz", "FILE", "--dag", "x.png", "--compare", "single,by-unit"],
            "--compare recompiles the program; FILE is compiled already",
        ),
        (["eval", "FILE"], "eval needs a .rtg program; FILE is a compiled stream program"),
    ],
)
def test_options_that_cannot_apply_to_a_json_are_usage_errors(argv, message, compiled_file, capsys):
    capsys.readouterr()
    argv = [str(compiled_file) if a == "FILE" else a for a in argv]
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines()[0] == "error: " + message.replace(
        "FILE", str(compiled_file)
    )


def test_device_comes_from_the_flag_or_the_json(compiled_file, capsys):
    assert main(["run", str(compiled_file), "--device", "ascend-910b", "--json"]) == 0
    on_910b = json.loads(capsys.readouterr().out)["makespan_us"]
    assert main(["run", str(compiled_file), "--json"]) == 0
    on_toy = json.loads(capsys.readouterr().out)["makespan_us"]
    assert on_910b < on_toy


# --- the published schema -------------------------------------------------------------------


def _keywords(schema: object) -> set[str]:
    """Every keyword used anywhere in ``schema`` (names under properties/$defs are not)."""
    found: set[str] = set()
    if isinstance(schema, dict):
        for key, value in schema.items():
            found.add(key)
            if key in ("properties", "$defs"):
                for sub in value.values():
                    found |= _keywords(sub)
            else:
                found |= _keywords(value)
    elif isinstance(schema, list):
        for item in schema:
            found |= _keywords(item)
    return found - {"cmd"}  # a const value inside `properties` of a oneOf branch is walked


def test_the_published_schema_is_the_one_the_loader_enforces():
    text = (ROOT / "docs" / "stream-program.schema.json").read_text()
    assert text == schema_text(), (
        "docs/stream-program.schema.json is stale: regenerate it with\n"
        'python -c "from rtgraph.stream_program.schema import schema_text; '
        "open('docs/stream-program.schema.json', 'w').write(schema_text())\""
    )
    schema = json.loads(text)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert _keywords(schema) <= KEYWORDS
    # every definition is used, and every reference names a definition
    assert set(_walk(schema, "$ref")) == {f"#/$defs/{name}" for name in schema["$defs"]}


def _walk(schema: object, keyword: str):
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == keyword:
                yield value
            yield from _walk(value, keyword)
    elif isinstance(schema, list):
        for item in schema:
            yield from _walk(item, keyword)


@pytest.mark.parametrize("model", sorted(p.name for p in MODELS.glob("*.rtg")))
def test_the_schema_accepts_every_compiled_model(model):
    program = rtgraph.load(MODELS / model)
    data = json.loads(rtgraph.compile(program).to_json())
    check_depth(data)
    check_document(data)
    assert from_dict(data) == StreamProgram.from_json(json.dumps(data))
    try:  # the published schema in a standard validator too, where one is installed
        import jsonschema  # optional third-party package, not a dependency of rtgraph
    except ImportError:
        return
    jsonschema.Draft202012Validator.check_schema(SCHEMA_DOC)
    jsonschema.Draft202012Validator(SCHEMA_DOC).validate(data)
    data["tasks"][0]["duration_us"] = math.nan
    assert not jsonschema.Draft202012Validator(SCHEMA_DOC).is_valid(data)
