"""Host copies in parts (issue 16): ``x0 = to_device(x, rows = [a, b])`` copies a row block of
an input, so work on the first rows starts while the rest cross the link; ``h0 = to_host(y0)``
of an operand of an output's ``concat(..., axis = 0)`` sends that row block back as soon as it
is computed.

The program the tests run is the example of docs/language.md ("Copies in parts"), so the
reference's example checks, computes what the whole-copy program computes, runs bit for bit
as the reference says with the first matmul started before the input is all on the device,
and ``--emit rtg`` prints it back as the same program. Every diagnostic of the two forms comes
with its exact message, hint, line and column.
"""

from __future__ import annotations

import re
from dataclasses import replace
from itertools import pairwise

import numpy as np
import pytest
from conftest import ROOT
from hypothesis import given
from hypothesis import strategies as st
from test_emit_rtg import (
    _assert_same_numbers,
    _batched_waits_in_program_order,
    _memory,
    _round_trip,
    _streams,
    _submission,
)

import rtgraph
from rtgraph.compiler.options import CompileOptions
from rtgraph.errors import RtgError, RtgErrors, Span
from rtgraph.frontend.copies import InputParts, RowPart
from rtgraph.ir.graph import HostCopyNode, OpNode
from rtgraph.ir.printing import format_node
from rtgraph.stream_program.races import check_races

DEVICE = "ascend-910b"
#: The placed copies as written (the optimizer's own parts are not what is measured here).
O0 = CompileOptions(opt_level=0)


def _doc_example() -> str:
    """The ``rtg`` block of docs/language.md that copies in parts, as a whole program."""
    text = (ROOT / "docs" / "language.md").read_text()
    blocks = re.findall(r"```rtg\n(.*?)```", text, re.S)
    (body,) = [b for b in blocks if "to_device(x, rows" in b]
    lines = "".join(f"    {line}\n" for line in body.splitlines())
    return f'device "{DEVICE}"\n\nprogram streamed() {{\n{lines}}}\n'


STREAMED = _doc_example()
#: The same computation with the copies left to the compiler (one whole copy each way).
WHOLE = f"""device "{DEVICE}"

program whole() {{
    input  x : f16[1024, 768]
    param  w : f16[768, 768]
    output y = x @ w
}}
"""
#: Parts whose output is also computed by a concatenation of its own (its parts are read by
#: another op, so they are not computed in place): the concatenation is the output statement.
JOINED_ON_A_STREAM = f"""device "{DEVICE}"

program joined() {{
    input  x : f16[256, 128]
    param  w : f16[128, 128]
    stream s_in, s_mm, s_out
    event  got[2], done[2]
    on s_in  {{ x0 = to_device(x, rows = [0, 128]); record got[0]
               x1 = to_device(x, rows = [128, 256]); record got[1] }}
    on s_mm  {{ wait got[0]; y0 = slice(x, start = 0, stop = 128) @ w; record done[0] }}
    on s_out {{ wait done[0]; h0 = to_host(y0) }}
    on s_mm  {{ wait got[1]; y1 = slice(x, start = 128, stop = 256) @ w; record done[1] }}
    on s_out {{ wait done[1]; h1 = to_host(y1) }}
    on s_mm  {{ output y = concat(y0, y1); output s = y0 + y1 }}
}}
"""


def _copies(program: rtgraph.Program) -> list[tuple]:
    return [
        (n.direction, n.tensor, n.stream, n.rows)
        for n in program.nodes
        if isinstance(n, HostCopyNode)
    ]


# --- the language ----------------------------------------------------------------------------


def test_the_parts_are_copy_nodes_with_their_rows() -> None:
    program = rtgraph.parse(STREAMED)
    assert _copies(program) == [
        ("h2d", "x", "s_in", (0, 512)),
        ("h2d", "x", "s_in", (512, 1024)),
        ("d2h", "y0", "s_out", None),  # a part of y: lowering works out its rows
        ("d2h", "y1", "s_out", None),
    ]
    # x0 and x1 name x itself (the data is the same on both sides); its rows are read by slices
    slices = [n for n in program.nodes if isinstance(n, OpNode) and n.op == "slice"]
    assert [(n.inputs, n.attrs["start"], n.attrs["stop"]) for n in slices] == [
        (("x",), 0, 512),
        (("x",), 512, 1024),
    ]
    assert program.outputs == ["y"]
    concat = program.nodes[-1]
    assert isinstance(concat, OpNode) and (concat.op, concat.inputs) == ("concat", ("y0", "y1"))


def test_the_listing_shows_a_part_with_its_rows_and_type() -> None:
    program = rtgraph.parse(STREAMED)
    first = next(n for n in program.nodes if isinstance(n, HostCopyNode))
    assert format_node(first, program) == "  to_device(x, rows=[0, 512]) : f16[512, 768] on s_in"
    chosen = replace(first, stream="")  # a copy the optimizer placed: the compiler's stream
    assert format_node(chosen, program) == "  to_device(x, rows=[0, 512]) : f16[512, 768]"


def test_parts_may_come_in_any_order_and_from_a_loop() -> None:
    """A slice written with negative indices reads rows counted from the end."""
    program = rtgraph.parse(
        _PROGRAM.format(
            "on s1 { a = to_device(x, rows = [4, 8]); y = slice(x, start = -4); "
            "b = to_device(x, rows = [0, 4]) }"
        )
    )
    assert [c[3] for c in _copies(program)] == [(4, 8), (0, 4)]
    looped = rtgraph.parse(
        _PROGRAM.format("for k in 0..4 { on s1 { p = to_device(x, rows = [2 * k, 2 * k + 2]) } }")
    )
    assert [c[3] for c in _copies(looped)] == [(0, 2), (2, 4), (4, 6), (6, 8)]


def test_the_reference_interpreter_computes_what_the_whole_copy_program_computes() -> None:
    streamed = rtgraph.evaluate(rtgraph.parse(STREAMED), seed=5)
    whole = rtgraph.evaluate(rtgraph.parse(WHOLE), seed=5)
    assert streamed.keys() == whole.keys() == {"y"}
    assert np.array_equal(streamed["y"], whole["y"])


_PROGRAM = """program p() {{
    input x : f32[8, 4]
    input c : f32
    param w : f32[4, 4]
    stream s1, s2
    {}
}}"""
_ONLY_SLICES = (
    "until its last part is copied, 'x' may be read only as slice(x, start = a, stop = b, "
    "axis = 0) of rows copied before"
)
_WHOLE_OR_PARTS = "copy an input whole or in parts, not both"
_ROWS = "rows = [a, b] copies rows a to b - 1"
_TWO = "y0 = relu(x); y1 = exp(x); "


@pytest.mark.parametrize(
    ("statement", "errors"),
    [
        (
            "on s1 { a = to_device(x, rows = [0, 4]); b = to_device(x, rows = [2, 8]) }",
            [
                (
                    70,
                    "rows [2, 8) of 'x' overlap rows [0, 4) copied at line 6",
                    "the parts of an input are disjoint: each row is copied once",
                )
            ],
        ),
        (
            "on s1 { a = to_device(x); b = to_device(x, rows = [0, 4]) }",
            [(35, "input 'x' is already copied to the device at line 6", _WHOLE_OR_PARTS)],
        ),
        (
            "on s1 { a = to_device(x, rows = [0, 4]); b = to_device(x) }",
            [
                (
                    50,
                    "input 'x' is already copied to the device in parts (rows [0, 4) at line 6)",
                    _WHOLE_OR_PARTS,
                )
            ],
        ),
        (  # read whole between the parts
            "on s1 { a = to_device(x, rows = [0, 4]); y = relu(x); "
            "b = to_device(x, rows = [4, 8]) }",
            [(63, "input 'x' is used at line 6 before rows [4, 8) are copied", _ONLY_SLICES)],
        ),
        (  # a slice of rows not all copied yet
            "on s1 { a = to_device(x, rows = [0, 4]); y = slice(x, start = 2, stop = 6); "
            "b = to_device(x, rows = [4, 8]) }",
            [(85, "input 'x' is used at line 6 before rows [4, 8) are copied", _ONLY_SLICES)],
        ),
        (  # a slice along another axis reads every row
            "on s1 { a = to_device(x, rows = [0, 4]); y = slice(x, stop = 2, axis = 1); "
            "b = to_device(x, rows = [4, 8]) }",
            [(84, "input 'x' is used at line 6 before rows [4, 8) are copied", _ONLY_SLICES)],
        ),
        (  # a use before the first part, reported once (at that part)
            "y = slice(x, stop = 4); on s1 { a = to_device(x, rows = [0, 4]); "
            "b = to_device(x, rows = [4, 8]) }",
            [(41, "input 'x' is used at line 6 before rows [0, 4) are copied", _ONLY_SLICES)],
        ),
        (
            "on s1 { a = to_device(x, rows = [2, 4]); b = to_device(x, rows = [6, 7]) }",
            [
                (
                    50,
                    f"rows [{lo}, {hi}) of input 'x' are never copied",
                    f"copy them too: to_device(x, rows = [{lo}, {hi}]); the parts of an input "
                    "together cover every row",
                )
                for lo, hi in ((0, 2), (4, 6), (7, 8))
            ],
        ),
        (
            "on s1 { a = to_device(x, row = [0, 8]) }",
            [(30, "unknown attribute 'row' for to_device", "did you mean 'rows'?")],
        ),
        (
            "on s1 { a = to_device(x, pinned = 1) }",
            [
                (
                    30,
                    "unknown attribute 'pinned' for to_device",
                    "to_device takes one attribute, rows = [a, b]",
                )
            ],
        ),
        (
            "on s1 { a = to_device(x, rows = [0, 4], rows = [4, 8]) }",
            [(45, "to_device: attribute 'rows' given twice", None)],
        ),
        (
            "on s1 { a = to_device(x, rows = 4) }",
            [
                (
                    37,
                    "to_device: attribute 'rows' must be a list of two integers [a, b], got "
                    "the number 4",
                    f"{_ROWS} of the input",
                )
            ],
        ),
        (
            "on s1 { a = to_device(x, rows = [0, 4, 8]) }",
            [
                (
                    37,
                    "to_device: attribute 'rows' must be a list of two integers [a, b], got "
                    "a list of 3",
                    f"{_ROWS} of the input",
                )
            ],
        ),
        (
            "on s1 { a = to_device(x, rows = [0, 2.5]) }",
            [(41, "to_device: attribute 'rows' needs integers, got the number 2.5", None)],
        ),
        (
            "on s1 { a = to_device(x, rows = [4, 16]) }",
            [
                (
                    37,
                    "rows [4, 16) are not rows of input 'x', which has 8",
                    f"{_ROWS}, for 0 <= a < b <= 8",
                )
            ],
        ),
        (  # a part refused for its rows: no "never copied" for the rows it named
            "on s1 { a = to_device(x, rows = [0, 4]); b = to_device(x, rows = [4, 16]) }",
            [
                (
                    70,
                    "rows [4, 16) are not rows of input 'x', which has 8",
                    f"{_ROWS}, for 0 <= a < b <= 8",
                )
            ],
        ),
        (
            "on s1 { a = to_device(x, rows = [4, 4]) }",
            [
                (
                    37,
                    "rows [4, 4) are not rows of input 'x', which has 8",
                    f"{_ROWS}, for 0 <= a < b <= 8",
                )
            ],
        ),
        (
            "on s1 { a = to_device(c, rows = [0, 1]) }",
            [(27, "input 'c' is a scalar; it has no rows to copy", "copy it whole: to_device(c)")],
        ),
        (
            "on s1 { a = to_device(w, rows = [0, 4]) }",
            [
                (
                    27,
                    "to_device copies a host input, not the param 'w' (f32[4, 4])",
                    "inputs live on the host; everything else is already on the device",
                )
            ],
        ),
        (
            "a = to_device(x, rows = [0, 8])",
            [
                (
                    9,
                    "to_device must be inside an `on` block",
                    "write `on s { ... = to_device(...) }` to say which stream copies it",
                )
            ],
        ),
        (
            "y = relu(x); on s1 { h = to_host(y, rows = [0, 4]) }",
            [(41, "to_host takes no attributes", None)],
        ),
        (  # a part that is not a part: the concat is along axis 1
            _TWO + "on s2 { h0 = to_host(y0) }; output y = concat(y0, y1, axis = 1)",
            [
                (
                    45,
                    "to_host copies 'y0', which is not an output",
                    "write it as `output y = to_host(...)`",
                )
            ],
        ),
        (
            _TWO + "on s2 { h0 = to_host(y0) }; output y = concat(y0, y1, axis = 0)",
            [
                (
                    71,
                    "part 'y1' of output 'y' is never copied to the host",
                    "part 'y0' is copied at line 6; copy each part of 'y' once it is computed, "
                    "or none and 'y' whole",
                )
            ],
        ),
        (
            _TWO + "on s2 { h0 = to_host(y0) }; output y1; output y = concat(y0, y1)",
            [
                (
                    82,
                    "part 'y1' of output 'y' is never copied to the host",
                    "part 'y0' is copied at line 6; copy each part of 'y' once it is computed, "
                    "or none and 'y' whole; 'y1' is an output, so its to_host copies it whole",
                )
            ],
        ),
        (
            _TWO + "y = concat(y0, y1); on s2 { h0 = to_host(y0); output y = to_host(y) }",
            [
                (
                    89,
                    "output 'y' is copied to the host whole and in parts (part 'y0' at line 6)",
                    "copy an output whole or part by part, not both",
                )
            ],
        ),
        (
            "y0 = relu(x); on s2 { h0 = to_host(y0) }; output y = concat(y0, y0)",
            [
                (
                    32,
                    "to_host copies 'y0', which is more than one part of 'y'",
                    "a part's copy fills the rows of one operand of one output; copy the output "
                    "whole instead",
                )
            ],
        ),
    ],
)
def test_each_mistake_with_parts_is_reported_where_it_is_written(
    statement: str, errors: list[tuple[int, str, str | None]]
) -> None:
    """Line 6 is the statement; nothing else is reported."""
    with pytest.raises(RtgError) as info:
        rtgraph.parse(_PROGRAM.format(statement))
    found = info.value.errors if isinstance(info.value, RtgErrors) else [info.value]
    reported = [(e.span.line, e.span.col, e.message, e.hint) for e in found]
    assert reported == [(6, *error) for error in errors]


def test_an_axis_counted_from_the_end_joins_rows_too() -> None:
    program = rtgraph.parse(
        _PROGRAM.format(
            _TWO + "on s2 { h0 = to_host(y0); h1 = to_host(y1) }; "
            "output y = concat(y0, y1, axis = -2)"
        )
    )
    assert _copies(program) == [("d2h", "y0", "s2", None), ("d2h", "y1", "s2", None)]


@st.composite
def _parts(draw) -> tuple[int, list[tuple[int, int]]]:
    """Rows ``0 … n-1`` cut into runs, some of them kept, in some order."""
    n = draw(st.integers(1, 24))
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=n - 1))) if n > 1 else []
    bounds = [0, *cuts, n]
    runs = list(pairwise(bounds))
    kept = [r for r in runs if draw(st.booleans())]
    return n, draw(st.permutations(kept))


@given(_parts(), st.integers(0, 24), st.integers(1, 24))
def test_the_parts_say_which_rows_are_copied_as_a_set_of_rows_would(
    parts: tuple[int, list[tuple[int, int]]], a: int, length: int
) -> None:
    """The binary searches of :class:`InputParts` answer as the plain set of copied rows."""
    n, placed = parts
    book, copied = InputParts(), set()
    span = Span(None, 1, 1, 1, 2)
    for rows in placed:
        book.add(RowPart(rows, span, 0))
        copied |= set(range(*rows))
        for start in range(n + 1):
            for stop in range(start, n + 1):
                assert book.covers(start, stop) == (set(range(start, stop)) <= copied)
        gaps = {row for lo, hi in book.gaps(n) for row in range(lo, hi)}
        assert gaps == set(range(n)) - copied
        new = (a, a + length)
        hit = book.overlapping(new)
        assert (hit is not None) == bool(copied & set(range(*new)))
        assert hit is None or set(range(*hit.rows)) & set(range(*new))


# --- compiled and run ------------------------------------------------------------------------


def test_a_streamed_program_runs_bit_for_bit_and_starts_before_its_input_is_all_there() -> None:
    program = rtgraph.parse(STREAMED)
    compiled = rtgraph.compile(program, device=DEVICE, options=O0)
    assert check_races(compiled).ok
    parts = [(t.op, t.host, tuple(t.attrs["rows"])) for t in compiled.tasks if "rows" in t.attrs]
    assert parts == [
        ("h2d", "x", (0, 512)),
        ("h2d", "x", (512, 1024)),
        ("d2h", "y", (0, 512)),
        ("d2h", "y", (512, 1024)),
    ]
    result = rtgraph.run(compiled, device=DEVICE, seed=5)
    assert not result.races
    reference = rtgraph.evaluate(program, seed=5)
    assert np.array_equal(result.outputs["y"], reference["y"])

    span = {t.id: (t.start, t.end) for t in result.tasks}
    copied_in = max(span[t.id][1] for t in compiled.tasks if t.op == "h2d")
    first_cube = min(span[t.id][0] for t in compiled.tasks if t.unit == "cube")
    assert first_cube < copied_in
    naive = rtgraph.compile(rtgraph.parse(WHOLE), device=DEVICE, options=O0)
    whole = rtgraph.run(naive, device=DEVICE, numerics=False)
    assert result.makespan_us < whole.makespan_us  # 97.4 against 118.7 µs


@pytest.mark.parametrize("level", [0, 2])
@pytest.mark.parametrize("source", [STREAMED, JOINED_ON_A_STREAM], ids=["in_place", "on_stream"])
def test_emit_rtg_prints_the_parts_back_as_the_same_program(source: str, level: int) -> None:
    program = rtgraph.parse(source, device=DEVICE)
    compiled, text, recompiled = _round_trip(program, "auto", level)
    assert "x_device_0_128 = to_device(x, rows = [0, 128])" in text or (
        "x_device_0_512 = to_device(x, rows = [0, 512])" in text
    )
    assert "y0_host = to_host(y0)" in text and "y1_host = to_host(y1)" in text
    assert "output y = concat(y0, y1)" in text and "to_host(y)" not in text
    assert _streams(recompiled) == _streams(compiled), text
    assert _memory(recompiled) == _memory(compiled)
    assert _batched_waits_in_program_order(compiled)
    assert _submission(recompiled) == _submission(compiled), text
    before = rtgraph.run(compiled, device=DEVICE, numerics=False)
    after = rtgraph.run(recompiled, device=DEVICE, numerics=False)
    assert after.makespan_us == before.makespan_us
    _assert_same_numbers(program, recompiled)
