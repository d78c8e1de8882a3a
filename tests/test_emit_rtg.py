"""``rtgraph compile --emit rtg``: the compiled program as source, which re-checks, recompiles
under ``--streams explicit`` to the same stream program and runs to the same numbers bit for
bit; and ``models/double_buffer.rtg``, hand-written double buffering.

What the round trip guarantees, for every program: the same tasks on the same streams, each
stream's commands in the same order with every wait paired with the same record, the same
memory plan, no race, the same numbers. Event *ids* are not compared: the compiler reuses its
ids, the emitted source names one event per record.

The same *submission order*, and so the same makespan, holds when the original batching
(``order_submissions``) submitted the waits on each record in program order. The recompiled
program's events are all its own, and the batching keeps all the records and waits of a
program's own event in program order — also two waits on one record, on two streams, which
for a compiler event it may swap. Where it did not swap any, the recompiled batching makes the
same choice at every step (it sees the same commands in the same order, and refuses only what
the original never took); where it did (one record waited on by several streams: an input
copy read by the Cube and the Vector stream, ``by-unit:2``…), the batches may differ. Every
model in ``models/`` is batched the same under ``by-unit`` at -O0 and -O2. (Letting the
batching reorder waits that lie between the same two records of an event — equally correct,
since a wait pairs with the latest record before it — would make it hold always.)

One part of the memory plan may differ, and the tests allow it: scalar constants. A number
written in ``.rtg`` is a constant tensor of its own at each use, and the language has no name
for one constant tensor shared by several ops — but the optimizer shares them (common
subexpressions, the tiles of one chain). The emitted source writes the number at each use, so
the recompiled program keeps one small resident region per use where the original kept one:
params, the activation pool and every task's bytes are laid out the same, the pool just starts
a few aligned slots later (resnet_bn at -O2: 128 bytes).
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

import rtgraph
from rtgraph.cli import main
from rtgraph.compiler.optimizer.pipeline import as_checked, optimized_ir
from rtgraph.compiler.options import CompileOptions
from rtgraph.reports.rtg_source import emit_rtg, per_record_events, program_order
from rtgraph.stream_program.program import Launch, Record, StreamProgram, Wait
from rtgraph.stream_program.races import check_races

MODELS = Path(__file__).parent.parent / "models"
#: Small parameters for the big models (the round trip is about the schedule, not the size).
SMALL = {
    "attention": {"S": 64, "D": 128, "H": 4},
    "attention_naive": {"S": 64, "D": 128, "H": 4},
    "transformer_naive": {"S": 64, "D": 128, "H": 4, "F": 512},
    "transformer_block": {"S": 64, "D": 128, "H": 4},
    "bert_encoder": {"S": 64, "D": 128, "H": 4, "F": 512},
    "llm_decode": {"D": 128, "H": 4},
    # --emit rtg prints replays as eager work: the eager program is the one that round-trips
    "llm_decode_loop": {
        "L": 2,
        "D": 128,
        "H": 4,
        "T": 32,
        "F": 256,
        "V": 512,
        "STEPS": 4,
        "EAGER": 1,
    },
    "mlp": {"B": 64, "D": 128, "F": 256},
    "unet_block": {"C": 32, "HW": 16},
    "resnet_bn": {"C": 32, "HW": 16},
    "resnet_bottleneck": {"C": 32, "HW": 16},
}
DEVICE = "ascend-910b"


def _models() -> list[str]:
    return sorted(p.stem for p in MODELS.glob("*.rtg"))


def _load(model: str) -> rtgraph.Program:
    program = rtgraph.load(MODELS / f"{model}.rtg", device=DEVICE)
    known = {k: v for k, v in SMALL.get(model, {}).items() if k in program.params}
    return rtgraph.load(MODELS / f"{model}.rtg", device=DEVICE, **known) if known else program


def _round_trip(
    program: rtgraph.Program, streams: str, level: int
) -> tuple[StreamProgram, str, StreamProgram]:
    """The compiled program, its emitted source, and that source recompiled as written."""
    options = CompileOptions(streams=streams, opt_level=level)
    spec = rtgraph.device(DEVICE)
    compiled = rtgraph.compile(program, device=spec, options=options)
    text = emit_rtg(optimized_ir(program, options.for_device(spec)), compiled)
    again = rtgraph.parse(text, filename=f"{program.name}.emitted.rtg", device=DEVICE)
    return compiled, text, rtgraph.compile(again, device=spec, streams="explicit")


def _submission(sp: StreamProgram) -> list[tuple]:
    """The commands in submission order, a wait named by the place of the record it pairs
    with (the latest record of its id submitted before it), a launch by its task."""
    out: list[tuple] = []
    latest: dict[int, int] = {}
    for c in sp.commands:
        if isinstance(c, Record):
            latest[c.event] = len(out)
            out.append(("record", c.stream))
        elif isinstance(c, Wait):
            out.append(("wait", c.stream, latest[c.event]))
        elif isinstance(c, Launch):
            out.append(("launch", c.stream, c.task, sp.tasks[c.task].op))
        else:
            out.append(_plain(c))
    return out


def _plain(c: object) -> tuple:
    """A sync, barrier or callback by its fields (not its place in either source)."""
    return (type(c).__name__, *(getattr(c, f.name) for f in fields(c) if f.name != "span"))


def _streams(sp: StreamProgram) -> dict[int, list[tuple]]:
    """Each stream's commands in order, a wait named by the stream and the place on it of the
    record it pairs with, a launch by its op and result: the program whatever the batching."""
    out: dict[int, list[tuple]] = {s.id: [] for s in sp.streams}
    latest: dict[int, tuple[int, int]] = {}
    for c in sp.commands:
        if isinstance(c, Record):
            latest[c.event] = (c.stream, len(out[c.stream]))
            out[c.stream].append(("record",))
        elif isinstance(c, Wait):
            out[c.stream].append(("wait", latest[c.event]))
        elif isinstance(c, Launch):
            task = sp.tasks[c.task]
            result = (task.output.shape, task.output.dtype) if task.output else task.host
            out[c.stream].append(("launch", task.op, result))
        elif hasattr(c, "stream"):
            out[c.stream].append(_plain(c))
    return out


def _memory(sp: StreamProgram) -> tuple:
    """The memory plan, its regions by what they hold (their tensors' names may differ)."""
    regions = sp.memory.regions.values()
    layout = sorted((r.kind, r.offset, r.size, r.first, r.last) for r in regions)
    return sp.memory.policy, layout, sp.memory.total_bytes


def _memory_but_constants(sp: StreamProgram) -> tuple:
    """The memory plan but for where the scalar constants end: params where they are, the
    activation pool relative to where it starts, and its size (see the module docstring)."""
    regions = sp.memory.regions.values()
    pooled = [r for r in regions if r.kind in ("input", "value")]
    start = min((r.offset for r in pooled), default=sp.memory.total_bytes)
    return (
        sorted((r.offset, r.size) for r in regions if r.kind == "param"),
        sorted((r.offset - start, r.size) for r in pooled),
        sp.memory.total_bytes - start,
    )


def _constants(sp: StreamProgram) -> list[float | None]:
    return sorted({h.value for h in sp.host_tensors if h.role == "const"}, key=repr)


def _assert_same_numbers(
    program: rtgraph.Program, recompiled: StreamProgram, level: int = 0
) -> None:
    """The recompiled program runs race-free to the original's reference outputs, bit for bit
    — the reference of the program as the passes that change arithmetic by design left it at
    ``level`` (batchnorms folded: what ``rtgraph run`` checks against), with no NaN to hide a
    difference."""
    assert check_races(recompiled).ok
    options = CompileOptions(opt_level=level).for_device(rtgraph.device(DEVICE))
    reference = rtgraph.evaluate(as_checked(program, options), seed=3)
    after = rtgraph.run(recompiled, device=DEVICE, seed=3)
    assert not after.races
    for name, want in reference.items():
        assert np.array_equal(after.outputs[name], want, equal_nan=True), (program.name, name)
        assert not np.isnan(want).any(), (program.name, name)


def _batched_waits_in_program_order(sp: StreamProgram) -> bool:
    """Whether ``sp``'s batching submitted the waits on each compiler record in program order
    (the condition for the same submission order; see the module docstring)."""
    own = int(sp.meta.get("user_events", 0))

    def waits_per_record(commands: list) -> dict[int, list[tuple[int, int]]]:
        place: dict[int, int] = dict.fromkeys(range(len(sp.streams)), 0)
        waits: dict[int, list[tuple[int, int]]] = {}
        for c in commands:
            if isinstance(c, Wait) and c.event >= own:
                waits.setdefault(c.event, []).append((c.stream, place[c.stream]))
            if hasattr(c, "stream"):
                place[c.stream] += 1
        return waits

    submitted = per_record_events(sp.commands, own)
    return waits_per_record(submitted) == waits_per_record(program_order(sp, own))


@pytest.mark.parametrize("level", [0, 2])
@pytest.mark.parametrize("model", _models())
def test_emitted_source_is_the_same_program(model: str, level: int) -> None:
    program = _load(model)
    streams = "auto" if program.has_explicit_streams else "by-unit"
    compiled, text, recompiled = _round_trip(program, streams, level)

    assert recompiled.meta["barriers"]["waits"] == 0, text  # every event is in the source
    assert _streams(recompiled) == _streams(compiled), text
    assert _memory_but_constants(recompiled) == _memory_but_constants(compiled)
    assert _constants(recompiled) == _constants(compiled)
    if len(recompiled.host_tensors) == len(compiled.host_tensors):  # no constant was shared
        assert _memory(recompiled) == _memory(compiled)
    _assert_same_numbers(program, recompiled, level)
    if _batched_waits_in_program_order(compiled):
        assert _submission(recompiled) == _submission(compiled), text
        before = rtgraph.run(compiled, device=DEVICE, seed=3, numerics=False)
        after = rtgraph.run(recompiled, device=DEVICE, seed=3, numerics=False)
        assert after.makespan_us == before.makespan_us


@pytest.mark.parametrize("level", [0, 2])
def test_every_model_is_batched_the_same_under_by_unit(level: int) -> None:
    """The condition for the same submission order holds across the corpus: should a model
    fail it, its round trip above still checks everything but the order and the makespan."""
    for model in _models():
        program = _load(model)
        streams = "auto" if program.has_explicit_streams else "by-unit"
        options = CompileOptions(streams=streams, opt_level=level)
        compiled = rtgraph.compile(program, device=DEVICE, options=options)
        assert _batched_waits_in_program_order(compiled), model


def test_waits_on_one_record_may_be_batched_in_another_order() -> None:
    """Three streams per unit: the original batching swapped two waits on one record, so the
    recompiled program is batched differently — the same program on every stream and the
    same numbers; the stream-ordered plan, which reuses bytes in submission order, is made
    anew for the new order (and stays race-free)."""
    program = _load("attention_naive")
    compiled, text, recompiled = _round_trip(program, "by-unit:3", 2)
    assert not _batched_waits_in_program_order(compiled)
    assert _submission(recompiled) != _submission(compiled)
    assert _streams(recompiled) == _streams(compiled), text
    assert check_races(recompiled).ok
    _assert_same_numbers(program, recompiled, 2)


def test_a_list_schedule_prints_in_an_order_that_keeps_every_wait_after_its_record() -> None:
    """``list`` submits tasks out of program order, so the source cannot list them by id:
    among the tasks that may come next the lowest id comes next. The stream program is then
    equivalent, not the same: tasks are numbered in the printed order and planned by it."""
    program = _load("transformer_naive")
    compiled, text, recompiled = _round_trip(program, "list", 0)
    assert _streams(recompiled) == _streams(compiled), text
    _assert_same_numbers(program, recompiled)


def test_cli_emits_rtg(tmp_path: Path) -> None:
    out = tmp_path / "mlp.emitted.rtg"
    assert main(["compile", str(MODELS / "mlp.rtg"), "--emit", "rtg", "-o", str(out)]) == 0
    text = out.read_text()
    assert "stream cube, vector, dma" in text and "x_device = to_device(x)" in text
    assert main(["check", "--races", str(out)]) == 0


def test_fused_kernels_print_as_fused_blocks() -> None:
    _, text, _ = _round_trip(_load("attention_naive"), "by-unit", 2)
    assert "= fused { " in text and "return softmax(" in text


def test_double_buffer_is_race_free_and_overlaps_copies_with_compute() -> None:
    program = rtgraph.load(MODELS / "double_buffer.rtg")
    compiled = rtgraph.compile(program)
    assert check_races(compiled).ok
    result = rtgraph.run(compiled, seed=1)
    assert not result.races
    reference = rtgraph.evaluate(program, seed=1)
    for name, want in reference.items():
        assert np.array_equal(result.outputs[name], want), name
    spans = {t.id: (t.start, t.end) for t in result.tasks}
    copies = [spans[t.id] for t in compiled.tasks if t.op == "h2d"]
    compute = [spans[t.id] for t in compiled.tasks if t.unit in ("cube", "vector")]
    assert any(a < d and c < b for a, b in copies[1:] for c, d in compute)


def _wide_sequence() -> rtgraph.Program:
    """One sequence of the naive attention at width 2,048 (16 heads) and 512 tokens: cheap to
    run with numbers, and wide enough that -O2 copies its input in row parts."""
    text = (MODELS / "attention_naive.rtg").read_text()
    text = re.sub(r"\n    input  x[123] : f16\[S, D\]", "", text)
    text = re.sub(r"\n    output y[123] = .*", "", text)
    shipped = "program attention_naive(S = 1024, D = 768, H = 12)"
    assert shipped in text
    text = text.replace(shipped, "program attention_naive(S = 512, D = 2048, H = 16)")
    return rtgraph.parse(text, "wide.rtg", device=DEVICE)


@pytest.mark.parametrize("model", ["transformer_naive", "wide_sequence"])
def test_the_optimizers_copies_in_parts_print_as_parts(model: str) -> None:
    """At these sizes -O2 copies the inputs (and outputs) in row parts, on streams it chose:
    the source says ``to_device(x, rows = [a, b])`` and ``to_host(part)``, with the output's
    ``concat`` as its ``output`` statement, and recompiles to the same program and timeline
    (the numbers are checked on the one sequence: the transformer's cost seconds)."""
    if model == "wide_sequence":
        program = _wide_sequence()
    else:
        program = rtgraph.load(MODELS / f"{model}.rtg", device=DEVICE)
    compiled, text, recompiled = _round_trip(program, "by-unit", 2)
    parts = [t for t in compiled.tasks if "rows" in t.attrs]
    assert parts, f"-O2 copies no part of {model}"
    for task in parts:
        a, b = task.attrs["rows"]
        if task.op == "h2d":
            assert f"to_device({task.host}, rows = [{a}, {b}])" in text
        else:
            assert f"output {task.host} = concat(" in text
            assert f"output {task.host} = to_host(" not in text
    assert recompiled.meta["barriers"]["waits"] == 0, text
    assert _streams(recompiled) == _streams(compiled), text
    assert _memory_but_constants(recompiled) == _memory_but_constants(compiled)
    if _batched_waits_in_program_order(compiled):
        assert _submission(recompiled) == _submission(compiled), text
        before = rtgraph.run(compiled, device=DEVICE, numerics=False)
        after = rtgraph.run(recompiled, device=DEVICE, numerics=False)
        assert after.makespan_us == before.makespan_us
    if model == "wide_sequence":
        _assert_same_numbers(program, recompiled)
