"""What a run is checked against: ``--check full|sample|none`` and ``rtgraph.reference``.

``full`` compares every element with the reference interpreter; ``sample`` a grid of at most
SAMPLE_SIZE elements per output, whose reference is computed only where those elements need it
— bit-equal to the whole computation there; ``none`` checks nothing and says so. A program of
more than FULL_CHECK_FLOPS is sampled by default. References are kept per (program, seed).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import MODELS

import rtgraph
from rtgraph.cli import main
from rtgraph.dtypes import TensorType
from rtgraph.errors import UsageError
from rtgraph.ir import reference as ref_module
from rtgraph.ir.reference import SAMPLE_SIZE, check_mode, clear_cache, reference, sample_box
from rtgraph.ir.sampled import take
from rtgraph.ops import lookup, run_kernel

ATTENTION = str(MODELS / "attention.rtg")
SMALL = ["-D", "S=256", "-D", "D=128", "-D", "H=4"]  # S > ROW_BLOCK: row blocks are cut

# (model, parameters): every op family the sampled reference cuts, or runs whole.
MODELS_AT = [
    ("attention", {"S": 256, "D": 128, "H": 4}),
    ("attention_naive", {"S": 256, "D": 128, "H": 4}),
    ("transformer_block", {"S": 192, "D": 128, "H": 4, "F": 256}),
    ("bert_encoder", {"S": 128, "D": 128, "H": 4, "F": 256}),
    ("mlp", {}),
    ("resnet_bottleneck", {"C": 128, "M": 32}),
    ("unet_block", {"C": 64, "T": 128, "groups": 8}),
    ("llm_decode", {"L": 2, "D": 128, "H": 4, "T": 256, "F": 256, "V": 512}),
]


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


def overlap(wait: bool, n: int = 128) -> str:
    """models/overlap.rtg at N = n; without the wait, the bias add may read the matmul's
    output before the matmul writes it."""
    text = (MODELS / "overlap.rtg").read_text().replace("N = 512", f"N = {n}")
    return text if wait else text.replace("wait multiplied", "")


def run_checked(program, check, memory="stream-ordered"):
    result = rtgraph.run(rtgraph.compile(program, memory=memory))
    return result, rtgraph.compare(result.outputs, rtgraph.reference(program, check=check))


@pytest.mark.parametrize(("name", "params"), MODELS_AT, ids=[m for m, _ in MODELS_AT])
def test_the_sample_equals_the_full_reference_bit_for_bit(name, params):
    program = rtgraph.load(MODELS / f"{name}.rtg", params)
    full = reference(program, check="full")
    clear_cache()  # else the sample would be read from the full reference
    sample = reference(program, check="sample")
    assert sample.mode == "sample" and sample.boxes is not None
    for out in program.outputs:
        got = sample.elements(out, sample[out])
        assert 0 < got.size <= SAMPLE_SIZE
        assert np.array_equal(got, take(full[out], sample.boxes[out]), equal_nan=True), out


def test_the_sample_is_a_grid_of_the_stated_size_from_the_seed():
    box = sample_box("y", (1024, 768), 0)
    assert [len(i) for i in box] == [4, 64]  # 64 along the last axis, then what fits
    assert all(np.all(np.diff(i) > 0) for i in box)
    assert [list(i) for i in sample_box("y", (1024, 768), 0)] == [list(i) for i in box]
    assert any(
        not np.array_equal(a, b) for a, b in zip(sample_box("y", (1024, 768), 1), box, strict=True)
    )
    assert sample_box("y", (3, 5), 0) == (None, None)  # small enough: every element
    assert sample_box("s", (), 0) == ()


def test_sample_catches_a_missing_wait_and_full_agrees():
    # At N = 512, without memory reuse (whose orderings would hide it), the bias add on s_vec
    # runs before the matmul on s_mm has written m: it reads zeros.
    racy = rtgraph.parse(overlap(wait=False, n=512), "racy.rtg")
    for check in ("sample", "full"):
        result, report = run_checked(racy, check, memory="none")
        assert result.task("m + bias").end <= result.task("m").start  # precondition
        assert not report["y"]["equal"] and report["y"]["max_abs"] > 0


def test_sample_catches_a_wrong_element_it_samples_full_catches_any(monkeypatch):
    program = rtgraph.parse(overlap(wait=True), "overlap.rtg")
    result = rtgraph.run(rtgraph.compile(program))
    sample = rtgraph.reference(program, check="sample")
    rows, cols = sample.boxes["y"]
    inside = (rows[0], cols[0])
    outside = (next(r for r in range(128) if r not in rows), 0)
    for where, sample_sees in ((inside, True), (outside, False)):
        wrong = {"y": result.outputs["y"].copy()}
        wrong["y"][where] += 1
        assert rtgraph.compare(wrong, sample)["y"]["equal"] is not sample_sees
        assert (
            rtgraph.compare(wrong, rtgraph.reference(program, check="full"))["y"]["equal"] is False
        )
    assert rtgraph.compare(result.outputs, sample)["y"] == {
        "max_abs": 0.0,
        "max_rel": 0.0,
        "equal": True,
        "nonfinite": 0,
        "checked": rows.size * cols.size,
    }


def test_a_mutated_kernel_is_caught_in_every_mode_but_none(monkeypatch):
    import rtgraph.emulator.numerics as numerics

    def off_by_one(op, arrays, attrs, out, *, into=None):
        result = run_kernel(op, arrays, attrs, out, into=into)
        if op.name == "relu":
            result += 1
        return result

    monkeypatch.setattr(numerics, "run_kernel", off_by_one)
    program = rtgraph.parse(overlap(wait=True), "overlap.rtg")
    for check in ("sample", "full"):
        _, report = run_checked(program, check)
        assert report["y"]["equal"] is False and report["y"]["max_abs"] >= 1.0
    assert run_checked(program, "none")[1] == {}


def test_the_default_is_full_for_small_programs_and_sample_above_the_threshold(monkeypatch):
    program = rtgraph.load(ATTENTION, S=64, D=128, H=4)
    assert check_mode(program, None) == "full"
    monkeypatch.setattr(ref_module, "FULL_CHECK_FLOPS", 0)
    assert check_mode(program, None) == "sample"
    assert check_mode(program, "full") == "full"
    with pytest.raises(UsageError, match="unknown check mode 'most'"):
        check_mode(program, "most")


def test_references_are_kept_per_program_and_seed():
    program = rtgraph.load(ATTENTION, S=64, D=128, H=4)
    first = reference(program, seed=1)
    again = reference(program, seed=1)
    assert all(again[k] is first[k] for k in program.outputs)  # the same arrays
    assert all(not a.flags.writeable for a in first.outputs.values())
    other_seed = reference(program, seed=2)
    assert all(not np.array_equal(other_seed[k], first[k]) for k in program.outputs)
    same_text = rtgraph.load(ATTENTION, S=64, D=128, H=4)  # another program object
    assert all(reference(same_text, seed=1)[k] is not first[k] for k in program.outputs)
    sample = reference(program, check="sample", seed=1)  # answered by the full one
    assert sample.mode == "sample" and sample["y0"] is first["y0"]
    x = np.ones(program.tensors["x0"].type.shape, np.float16)
    given = reference(program, seed=1, inputs={"x0": x}, fill_missing=True)
    assert given["y0"] is not first["y0"]  # supplied values are never kept
    assert reference(program, seed=1, inputs={"x0": x}, fill_missing=True)["y0"] is not given["y0"]


def test_none_checks_nothing_and_says_so(capsys):
    assert main(["run", ATTENTION, *SMALL, "--check", "none"]) == 0
    out = capsys.readouterr().out
    assert "no check against the reference interpreter (--check none)" in out
    assert "bit-equal" not in out
    assert main(["run", ATTENTION, *SMALL, "--check", "none", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["check"] == "none" and data["reference_checked"] is False
    assert data["reference"] == {}


def test_the_cli_says_what_a_sample_covered(capsys):
    assert main(["run", ATTENTION, *SMALL, "--check", "sample"]) == 0
    out = capsys.readouterr().out
    assert "(sample: 1,024 of 131,072 elements; --check full for every one):" in out
    assert out.count("bit-equal") == 4
    assert main(["run", ATTENTION, *SMALL, "--json"]) == 0  # small: full by default
    data = json.loads(capsys.readouterr().out)
    assert data["check"] == "full" and set(data["reference_elements"].values()) == {256 * 128}
    assert main(["run", ATTENTION, *SMALL, "--check", "sample", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["check"] == "sample" and set(data["reference_elements"].values()) == {256}
    assert all(data["reference_equal"].values())


@pytest.mark.parametrize(
    ("op", "shapes", "dtype", "attrs"),
    [
        ("matmul", [(130, 40), (40, 24)], "f16", {}),  # three row blocks, the last short
        ("matmul", [(3, 70, 16), (16, 8)], "f32", {}),
        ("matmul", [(5, 16), (16,)], "f16", {}),  # a rank-1 operand: one call
        ("matmul", [(70, 16), (16, 8)], "i8", {}),  # i8 × i8: an i32 result, then stored
        ("softmax", [(6, 33)], "f16", {"axis": -1}),
        ("exp", [(4, 9)], "f16", {}),
        ("add", [(4, 9), (9,)], "bf16", {}),
        ("transpose", [(4, 9)], "f32", {"perm": [1, 0]}),
        ("cast", [(4, 9)], "i32", {"dtype": "f16"}),  # an integer result cast into f16
        ("scale", [(4, 9)], "f16", {"s": 1e6}),  # overflows to inf, silently
    ],
)
def test_a_kernel_writes_into_memory_exactly_what_it_returns(op, shapes, dtype, attrs):
    from rtgraph.dtypes import DTYPES, to_storage, to_value

    rng = np.random.default_rng(3)
    arrays = [to_value(rng.standard_normal(s) * 4, dtype) for s in shapes]
    found = lookup(op)
    out_type = found.infer([TensorType(s, dtype) for s in shapes], attrs)
    expected = to_storage(run_kernel(found, arrays, attrs, out_type), out_type.dtype)
    into = np.full(out_type.shape, 7, DTYPES[out_type.dtype].storage)
    assert run_kernel(found, arrays, attrs, out_type, into=into) is into
    assert into.tobytes() == np.ascontiguousarray(expected).tobytes()


def test_nan_on_both_sides_is_equal_with_no_error_a_nan_on_one_is_an_infinite_one():
    both = np.array([np.nan, 1.0, np.inf], np.float32)
    assert rtgraph.compare({"y": both}, {"y": both.copy()})["y"] == {
        "max_abs": 0.0,
        "max_rel": 0.0,
        "equal": True,
        "nonfinite": 2,
        "checked": 3,
    }
    one = rtgraph.compare({"y": np.array([np.nan, 1.0])}, {"y": np.array([0.0, 1.0])})["y"]
    assert one["max_rel"] == one["max_abs"] == float("inf") and not one["equal"]
