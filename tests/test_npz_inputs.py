"""Inputs and params are untrusted data: ``.npz`` files, missing keys, lossy values, seeds.

The hostile files in ``tests/hostile/npz/`` are small and committed; the ones that need a
patched archive or a lowered limit are built here in ``tmp_path``. Each failure is checked with
its exact message, and none may decompress more than the declared data.
"""

from __future__ import annotations

import io
import os
import struct
import time
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

import rtgraph
from rtgraph.errors import InputError, UsageError
from rtgraph.ir import npz
from rtgraph.ir.interpreter import load_npz_for
from rtgraph.ir.npz import MAX_NPZ_BYTES, load_npz

HOSTILE = Path(__file__).parent / "hostile" / "npz"
SAVE_HINT = "write it with numpy.savez(path, name=array, ...), one array per input or param"
NUMERIC_HINT = "save numeric arrays only (bool, integer or float)"
DAMAGED_HINT = "the file is damaged or was not written by numpy.savez"

TINY = """\
program tiny() {
    input x : f32[2, 3]
    input n : i32[4]
    input b : i8[2]
    input h : f16[2]
    input g : bf16[2]
    param w : f32[3, 4]
    output y = x @ w
    output m = n + n
    output c = b + b
    output k = h + h
    output q = g + g
}
"""


@pytest.fixture(scope="module")
def tiny():
    return rtgraph.parse(TINY, "tiny.rtg", device="toy")


def good_inputs() -> dict[str, np.ndarray]:
    return {
        "x": np.arange(6, dtype=np.float32).reshape(2, 3),
        "n": np.arange(4, dtype=np.int32),
        "b": np.array([-1, 1], np.int8),
        "h": np.array([0.5, 2], np.float16),
        "g": np.array([1, 3], np.float32),
    }


def npy_header(descr: str, shape: tuple[int, ...]) -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        out, {"descr": descr, "fortran_order": False, "shape": shape}
    )
    return out.getvalue()


def refused(path: Path, **kwargs) -> InputError:
    """The error ``load_npz`` gives for ``path``, within a generous CPU guard against a hang."""
    start = time.process_time()
    with pytest.raises(InputError) as info:
        load_npz(path, **kwargs)
    assert time.process_time() - start < 0.5
    return info.value


# --- the hostile corpus ---------------------------------------------------------------------

CORPUS = {
    "empty.npz": ("the file is empty", SAVE_HINT),
    "renamed_npy.npz": (
        "it is a .npy file (one array), not an .npz archive",
        "save it with numpy.savez(path, name=array), naming the input or param it holds",
    ),
    "random_bytes.npz": ("it is not a zip archive (an .npz is one)", SAVE_HINT),
    "truncated.npz": ("the zip archive is truncated (it has no end record)", DAMAGED_HINT),
    "object_array.npz": (
        "array 'x' holds Python objects (pickled data), which rtgraph never loads",
        NUMERIC_HINT,
    ),
    "strings.npz": (
        "array 'x' has dtype <U2; inputs and params are bool, integer or float",
        NUMERIC_HINT,
    ),
    "huge_header.npz": (
        "array 'x' declares shape [1099511627776] of float32 (4,398,046,511,104 bytes); "
        "an .npz may hold at most 4,294,967,296 bytes",
        "supply a smaller array (lower the program parameters with -D)",
    ),
    "zip_bomb.npz": (
        "array 'x' declares shape [2, 3] of float32 (24 bytes) but its member holds "
        "8,388,608 bytes of data",
        DAMAGED_HINT,
    ),
    "not_an_array.npz": ("member 'x.txt' is not an array (.npy)", SAVE_HINT),
    "bad_header.npz": (
        "array 'x' has no valid .npy header",
        SAVE_HINT,
    ),
}


def test_the_corpus_is_complete():
    assert sorted(p.name for p in HOSTILE.glob("*.npz")) == sorted(CORPUS)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_a_hostile_file_is_an_input_error_naming_it(name):
    message, hint = CORPUS[name]
    path = HOSTILE / name
    error = refused(path)
    assert error.message == f"cannot read {path} as .npz: {message}"
    assert error.hint == hint
    if name != "object_array.npz":
        assert "pickle" not in error.render()  # only an object array is called pickled


def test_a_path_that_is_no_regular_file_is_refused_without_reading(tmp_path):
    assert (
        refused(tmp_path / "none.npz").message == f"cannot read {tmp_path}/none.npz: no such file"
    )
    assert refused(tmp_path).message == f"cannot read {tmp_path}: it is a directory"
    assert refused(Path("/dev/zero")).message == "cannot read /dev/zero: it is not a regular file"
    fifo = tmp_path / "fifo.npz"
    os.mkfifo(fifo)  # nobody writes to it: reading would block forever
    assert refused(fifo).message == f"cannot read {fifo}: it is not a regular file"


# --- archives built here --------------------------------------------------------------------


def _patch_sizes(path: Path, size: int) -> None:
    """Make the archive's (only) member claim ``size`` uncompressed bytes, in both headers."""
    data = bytearray(path.read_bytes())
    struct.pack_into("<L", data, 22, size)  # the local header's uncompressed size
    end = data.rfind(b"PK\x05\x06")
    (directory,) = struct.unpack_from("<L", data, end + 16)
    struct.pack_into("<L", data, directory + 24, size)  # the central directory's
    path.write_bytes(bytes(data))


def test_a_member_that_inflates_past_its_recorded_size_is_never_read_past_it(tmp_path):
    path = tmp_path / "lying.npz"
    header = npy_header("<f4", (2, 3))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("x.npy", header + bytes(64 * 2**20))
    _patch_sizes(path, len(header) + 24)  # the archive now agrees with the header: 24 bytes
    error = refused(path)
    assert error.message == (
        f"cannot read {path} as .npz: array 'x' is corrupt (Bad CRC-32 for file 'x.npy')"
    )


def test_a_corrupt_member_is_named(tmp_path):
    path = tmp_path / "flipped.npz"
    np.savez(path, x=np.arange(6, dtype=np.float32).reshape(2, 3))
    data = bytearray(path.read_bytes())
    data[data.find(b"\x93NUMPY") + 130] ^= 0xFF  # a byte of the data (stored, not deflated)
    path.write_bytes(bytes(data))
    assert refused(path).message == (
        f"cannot read {path} as .npz: array 'x' is corrupt (Bad CRC-32 for file 'x.npy')"
    )
    deflated = tmp_path / "deflated.npz"
    np.savez_compressed(deflated, x=np.random.default_rng(0).standard_normal(4096))
    data = bytearray(deflated.read_bytes())
    end = data.rfind(b"PK\x01\x02")  # the central directory: the compressed data ends before
    for i in range(end - 4000, end - 3900):
        data[i] ^= 0x5A
    deflated.write_bytes(bytes(data))
    error = refused(deflated)
    assert error.message.startswith(f"cannot read {deflated} as .npz: array 'x' is corrupt (")
    assert error.hint == DAMAGED_HINT


def test_an_unknown_key_is_refused_before_it_is_decompressed(tmp_path, tiny):
    path = tmp_path / "extra.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("x.npy", npy_header("<f4", (2, 3)) + bytes(24))
        z.writestr("xx.npy", npy_header("<f4", (2**40,)) + bytes(64 * 2**20))
    error = refused(path, known=["x", "n"], owner="tiny")
    assert (
        error.message == f"cannot read {path} as .npz: array 'xx' is not an input of program 'tiny'"
    )
    assert error.hint == "did you mean 'x'?"
    with pytest.raises(InputError) as info:
        load_npz_for(tiny, path, "param")
    assert info.value.message == (
        f"cannot read {path} as .npz: arrays 'x', 'xx' are not params of program 'tiny'"
    )
    assert info.value.hint == "its params are: w"


def test_declared_sizes_are_capped_in_total_before_any_data_is_read(tmp_path):
    path = tmp_path / "two.npz"
    np.savez(path, a=np.zeros(16, np.float32), b=np.zeros(16, np.float32))
    assert MAX_NPZ_BYTES == 4 * 2**30
    error = refused(path, max_bytes=100)
    assert error.message == (
        f"cannot read {path} as .npz: its arrays declare 128 bytes in all; "
        "an .npz may hold at most 100 bytes"
    )
    assert load_npz(path, max_bytes=128)["b"].shape == (16,)


def test_the_table_of_members_is_capped_before_it_is_parsed(tmp_path, monkeypatch):
    path = tmp_path / "many.npz"
    np.savez(path, **{f"a{i}": np.zeros(1) for i in range(5)})
    monkeypatch.setattr(npz, "MAX_NPZ_MEMBERS", 4)
    assert refused(path).message == (
        f"cannot read {path} as .npz: the archive has 5 members; an .npz may have at most 4"
    )
    monkeypatch.setattr(npz, "MAX_NPZ_MEMBERS", 5)
    monkeypatch.setattr(npz, "MAX_NPZ_DIRECTORY_BYTES", 100)
    assert refused(path).message.startswith(
        f"cannot read {path} as .npz: the archive's table of members is "
    )
    assert refused(path).message.endswith(" bytes; at most 100 are read")


def test_a_key_twice_is_refused(tmp_path):
    path = tmp_path / "twice.npz"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate name
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("x.npy", npy_header("<f4", (1,)) + bytes(4))
            z.writestr("x.npy", npy_header("<f4", (1,)) + bytes(4))
    assert refused(path).message == f"cannot read {path} as .npz: array 'x' appears twice"


def test_good_files_read_as_numpy_writes_them(tmp_path):
    arrays = {
        "x": np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)),
        "w[0]": np.arange(3, dtype=">i4"),
        "s": np.float16(1.5),
        "e": np.zeros((0, 4), np.int8),
        "f": np.array([True, False]),
    }
    for save in (np.savez, np.savez_compressed):
        path = tmp_path / f"{save.__name__}.npz"
        save(path, **arrays)
        got = load_npz(path)
        assert sorted(got) == sorted(arrays)
        for key, want in arrays.items():
            assert got[key].dtype == want.dtype and got[key].shape == want.shape
            np.testing.assert_array_equal(got[key], want)


def test_cli_path_eval_of_a_supplied_file(tmp_path, tiny):
    path = tmp_path / "in.npz"
    np.savez(path, **good_inputs())
    inputs = load_npz_for(tiny, path, "input")
    out = rtgraph.evaluate(tiny, inputs=inputs, params={"w": np.ones((3, 4), np.float32)})
    np.testing.assert_array_equal(out["y"], good_inputs()["x"] @ np.ones((3, 4), np.float32))
    np.testing.assert_array_equal(out["m"], 2 * np.arange(4))


# --- missing keys ---------------------------------------------------------------------------

MISSING = (
    "tiny.rtg:3:5: error: inputs 'n', 'b', 'h', 'g' are missing: the supplied inputs must hold "
    "every input of program 'tiny'\n"
    "        input n : i32[4]\n"
    "        ^^^^^^^^^^^^^^^^\n"
    "    hint: pass --fill-missing to generate them from --seed"
)


def test_a_missing_input_is_an_error_located_at_its_declaration(tiny):
    with pytest.raises(InputError) as info:
        rtgraph.evaluate(tiny, inputs={"x": good_inputs()["x"]})
    assert info.value.render() == MISSING
    with pytest.raises(InputError) as info:
        rtgraph.evaluate(tiny, inputs=good_inputs(), params={})
    assert info.value.render() == (
        "tiny.rtg:7:5: error: param 'w' is missing: the supplied params must hold every param "
        "of program 'tiny'\n"
        "        param w : f32[3, 4]\n"
        "        ^^^^^^^^^^^^^^^^^^^\n"
        "    hint: pass --fill-missing to generate them from --seed"
    )


def test_the_emulator_refuses_missing_keys_too(tiny):
    compiled = rtgraph.compile(tiny, device="toy")
    with pytest.raises(InputError) as info:
        rtgraph.run(compiled, device="toy", inputs={"x": good_inputs()["x"]})
    assert info.value.render() == MISSING  # at the input's copy, which is its declaration
    with pytest.raises(InputError) as info:
        rtgraph.run(compiled, device="toy", params={})
    assert info.value.render() == (
        "error: param 'w' is missing: the supplied params must hold every param of program "
        "'tiny'\n    hint: pass --fill-missing to generate them from --seed"
    )


def test_fill_missing_generates_the_rest_from_the_seed(tiny):
    given = {"x": good_inputs()["x"]}
    filled = rtgraph.evaluate(tiny, inputs=given, seed=4, fill_missing=True)
    everything = rtgraph.evaluate(tiny, seed=4)  # nothing supplied: all from the seed
    np.testing.assert_array_equal(filled["m"], everything["m"])  # n: generated alike
    assert not np.array_equal(filled["y"], everything["y"])  # x: the supplied one
    compiled = rtgraph.compile(tiny, device="toy")
    result = rtgraph.run(compiled, device="toy", inputs=given, seed=4, fill_missing=True)
    for name, value in filled.items():
        np.testing.assert_array_equal(result.outputs[name], value)


def test_an_unknown_key_given_in_python_is_still_refused(tiny):
    with pytest.raises(InputError) as info:
        rtgraph.evaluate(tiny, inputs={**good_inputs(), "xx": np.zeros(1)})
    assert info.value.message == "input 'xx' supplied but program 'tiny' declares no such input"
    assert info.value.hint == "did you mean 'x'?"


# --- lossy conversions ----------------------------------------------------------------------

LOSSY = [
    (
        "n",
        np.array([1, 2, np.nan, 4]),
        "input 'n' holds nan at index (2,): i32 holds only finite whole numbers",
        "replace NaN and infinity before supplying it, or declare a float type",
    ),
    (
        "n",
        np.array([1, 2.5, 3, 4]),
        "input 'n' holds 2.5 at index (1,): i32 holds only whole numbers",
        "round the data yourself (numpy.rint) if that is what you mean",
    ),
    (
        "n",
        np.array([1, 2, 3, 2**63 + 5], np.uint64),
        "input 'n' holds 9223372036854775813 at index (3,): outside the range of i32 "
        "(-2147483648 to 2147483647)",
        "supply values in range, or declare a wider type",
    ),
    (
        "n",
        np.array([0, -(2**31) - 1, 0, 0]),
        "input 'n' holds -2147483649 at index (1,): outside the range of i32 "
        "(-2147483648 to 2147483647)",
        "supply values in range, or declare a wider type",
    ),
    (
        "b",
        np.array([1, 200], np.uint8),
        "input 'b' holds 200 at index (1,): outside the range of i8 (-128 to 127)",
        "supply values in range, or declare a wider type",
    ),
    (
        "b",
        np.array([np.inf, 1.0]),
        "input 'b' holds inf at index (0,): i8 holds only finite whole numbers",
        "replace NaN and infinity before supplying it, or declare a float type",
    ),
    (
        "h",
        np.array([1, 7e4], np.float32),
        "input 'h' holds 70000.0 at index (1,): beyond the largest finite f16 (65504), it "
        "would become inf",
        "scale the data into range, or declare the tensor with a wider float type",
    ),
    (
        "g",
        np.array([1, 1e39]),
        "input 'g' holds 1e+39 at index (1,): beyond the largest finite bf16 (3.38953e+38), "
        "it would become inf",
        "scale the data into range, or declare the tensor with a wider float type",
    ),
    (
        "x",
        np.full((2, 3), 1e300),
        "input 'x' holds 1e+300 at index (0, 0): beyond the largest finite f32 "
        "(3.40282e+38), it would become inf",
        "scale the data into range, or declare the tensor with a wider float type",
    ),
]


@pytest.mark.parametrize(("key", "bad", "message", "hint"), LOSSY)
def test_a_lossy_conversion_names_the_key_and_the_first_bad_index(tiny, key, bad, message, hint):
    inputs = {**good_inputs(), key: bad}
    with pytest.raises(InputError) as info:
        rtgraph.evaluate(tiny, inputs=inputs, fill_missing=True)
    assert info.value.message == message
    assert info.value.hint == hint
    assert info.value.span == tiny.tensors[key].span  # at the input declaration
    compiled = rtgraph.compile(tiny, device="toy")
    with pytest.raises(InputError) as info:
        rtgraph.run(compiled, device="toy", inputs=inputs, fill_missing=True)
    assert info.value.message == message


def test_exact_and_rounding_conversions_are_allowed(tiny):
    inputs = {
        "x": np.full((2, 3), 1 / 3),  # f64 → f32 rounds
        "n": np.array([1.0, -2.0, 3.0, 2**31 - 1]),  # whole floats, in range
        "b": np.array([True, False]),
        "h": np.array([np.nan, 65519.0]),  # NaN stays NaN; 65519 rounds to 65504, not inf
        "g": np.array([np.inf, 1 / 3], np.float32),  # inf is exact
    }
    out = rtgraph.evaluate(tiny, inputs=inputs, fill_missing=True)
    assert out["m"].tolist() == [2, -4, 6, -2]  # the i32 add wraps as on the device
    assert np.isnan(out["k"][0]) and out["k"][1] == np.inf  # 65504 + 65504 overflows in f16
    assert out["c"].tolist() == [2, 0]


def test_a_shape_error_points_at_the_declaration(tiny):
    with pytest.raises(InputError) as info:
        rtgraph.evaluate(tiny, inputs={"x": np.zeros((3, 2))}, fill_missing=True)
    assert info.value.render() == (
        "tiny.rtg:2:5: error: input 'x' has shape [3, 2], the program declares [2, 3]\n"
        "        input x : f32[2, 3]\n"
        "        ^^^^^^^^^^^^^^^^^^^\n"
        "    hint: supply an array of shape [2, 3] (f32)"
    )


# --- seeds ----------------------------------------------------------------------------------

SEED_HINT = "a seed is an integer from 0 to 9223372036854775807"


@pytest.mark.parametrize(
    ("seed", "message"),
    [
        (-1, "seed -1 is out of range"),
        (2**63, "seed 9223372036854775808 is out of range"),
        (1.5, "seed 1.5 is not an integer"),
        (True, "seed True is not an integer"),
    ],
)
def test_a_seed_outside_0_to_2_63_is_a_usage_error(tiny, seed, message):
    compiled = rtgraph.compile(tiny, device="toy")
    for call in (
        lambda: rtgraph.evaluate(tiny, seed=seed),
        lambda: rtgraph.run(compiled, device="toy", seed=seed),
        lambda: rtgraph.run(compiled, device="toy", seed=seed, numerics=False),
    ):
        with pytest.raises(UsageError) as info:
            call()
        assert (info.value.message, info.value.hint) == (message, SEED_HINT)


def test_the_largest_seed_works(tiny):
    a = rtgraph.evaluate(tiny, seed=2**63 - 1)
    b = rtgraph.evaluate(tiny, seed=np.int64(2**63 - 1))
    assert all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)


def test_names_from_the_archive_are_shown_escaped_and_short(tmp_path):
    path = tmp_path / "names.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("\x1b[31mred.txt", b"")
    assert refused(path).message == (
        f"cannot read {path} as .npz: member '\\x1b[31mred.txt' is not an array (.npy)"
    )
    many = tmp_path / "many.npz"
    np.savez(many, **{f"k{i}": np.zeros(1) for i in range(7)}, **{"y" * 100: np.zeros(1)})
    assert refused(many, known=["x"], owner="tiny").message == (
        f"cannot read {many} as .npz: arrays 'k0', 'k1', 'k2', 'k3', 'k4' and 3 more are not "
        "inputs of program 'tiny'"
    )
    assert refused(many, known=[f"k{i}" for i in range(7)]).message == (
        f"cannot read {many} as .npz: array '{'y' * 60}…' is not an input of the program"
    )


def test_damaged_archives_give_input_errors_only(tmp_path):
    """A few hundred random damages of a good file: each is read or refused, never a crash."""
    good = io.BytesIO()
    np.savez_compressed(good, x=np.arange(600, dtype=np.float32).reshape(20, 30), w=np.ones(7))
    rng = np.random.default_rng(13)
    path = tmp_path / "damaged.npz"
    for _ in range(300):
        data = bytearray(good.getvalue())
        for at in rng.integers(0, len(data), size=rng.integers(1, 6)):
            data[at] = int(rng.integers(0, 256))
        path.write_bytes(bytes(data[: int(rng.integers(len(data) // 2, len(data) + 1))]))
        try:
            arrays = load_npz(path)
        except InputError as e:
            assert e.message.startswith(f"cannot read {path}")
        else:
            assert all(isinstance(a, np.ndarray) for a in arrays.values())
