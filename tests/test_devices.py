"""Device specs: the shipped files load, ``extends`` merges, and every malformed spec is refused
with a message that names the file, the dotted key and what was expected."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rtgraph.device import (
    RUNTIME_VERSION,
    SCHEMA,
    UNIT_KINDS,
    CompatRow,
    DeviceSpec,
    check_compatibility,
    compat_matrix,
    describe,
    devices_table,
    list_devices,
    load_device,
    parse_device,
    parse_version,
    shipped_names,
)
from rtgraph.errors import DeviceSpecError

ROOT = Path(__file__).resolve().parent.parent
TOY_TEXT = (ROOT / "rtgraph" / "device" / "specs" / "toy.toml").read_text(encoding="utf-8")


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def refused(path: Path | str) -> DeviceSpecError:
    with pytest.raises(DeviceSpecError) as info:
        load_device(path)
    return info.value


# --- the shipped specs ---------------------------------------------------------------------


def test_shipped_names_are_the_three_devices():
    assert shipped_names() == ["ascend-310p", "ascend-910b", "toy"]


@pytest.mark.parametrize("name", ["ascend-910b", "ascend-310p", "toy"])
def test_every_shipped_spec_loads_and_suits_the_current_runtime(name):
    spec = load_device(name)
    assert spec.name == name
    assert set(spec.units) >= {"cube", "vector", "dma"}
    assert spec.sources, "every shipped spec says where its figures come from"
    assert spec.source == f"rtgraph/device/specs/{name}.toml"
    check_compatibility(spec)  # raises if not
    check_compatibility(spec, RUNTIME_VERSION)


def test_910b_has_the_atlas_a2_figures():
    spec = load_device("ascend-910b")
    assert (spec.unit("cube").cores, spec.unit("vector").cores) == (24, 48)
    assert spec.memory.capacity == 64 * 2**30
    assert spec.memory.bandwidth == 1.6e12
    assert 25e9 <= spec.host.link_bandwidth <= 50e9
    assert spec.scheduler.queue_depth == 2013  # 2048 entries, 2013 usable: we model the usable
    assert (spec.scheduler.event_mode, spec.scheduler.max_events) == ("cann", 65535)
    assert 0.05 <= spec.profiling.task_trace_overhead <= 0.10
    assert 0.15 <= spec.profiling.op_trace_overhead <= 0.30
    assert (spec.memory.direct_alloc_us, spec.memory.pool_alloc_us) == (50.0, 1.0)
    assert 8 <= spec.host.batch_size <= 16
    # 24 cores × 4096 MAC × 2 flop × 1.8 GHz
    assert 24 * spec.unit("cube").peak_flops["f16"] == pytest.approx(24 * 4096 * 2 * 1.8e9)


def test_310p_is_the_small_slow_part_without_bf16():
    edge, big = load_device("ascend-310p"), load_device("ascend-910b")
    assert edge.scheduler.max_events == 1023
    assert edge.unit("cube").cores < big.unit("cube").cores
    assert edge.memory.capacity < big.memory.capacity
    assert edge.memory.bandwidth < big.memory.bandwidth
    assert edge.host.link_bandwidth < big.host.link_bandwidth
    assert "bf16" not in edge.unit("cube").peak_flops
    assert edge.unit("cube").cores * edge.unit("cube").peak_flops["f16"] == 70e12


def test_toy_has_round_numbers():
    toy = load_device("toy")
    for kind in ("cube", "vector"):
        unit = toy.unit(kind)
        assert (unit.cores, unit.launch_us) == (1, 1.0)
        assert set(unit.peak_flops.values()) == {1e9}
    assert (toy.unit("dma").cores, toy.unit("dma").bandwidth) == (1, 1e9)
    assert toy.memory.bandwidth == toy.host.link_bandwidth == 1e9
    assert (toy.host.ioctl_us, toy.host.batch_size) == (1.0, 1)


def test_list_devices_matches_the_shipped_names():
    assert [d.name for d in list_devices()] == shipped_names()


def test_loading_a_shipped_file_by_path_gives_the_same_spec(tmp_path):
    path = write(tmp_path, "mine.toml", TOY_TEXT)
    assert dataclasses.replace(load_device(path), source="") == dataclasses.replace(
        load_device("toy"), source=""
    )


# --- extends -------------------------------------------------------------------------------


def test_extends_overrides_one_field_and_keeps_the_rest(tmp_path):
    path = write(tmp_path, "npu.toml", 'extends = "ascend-910b"\n[units.cube]\ncores = 20\n')
    base, derived = load_device("ascend-910b"), load_device(path)
    assert derived.unit("cube").cores == 20
    units = dict(base.units, cube=dataclasses.replace(base.unit("cube"), cores=20))
    assert derived == dataclasses.replace(base, units=units, source=str(path))


def test_extends_merges_nested_tables_key_by_key(tmp_path):
    text = 'extends = "toy"\n[units.cube.peak_flops]\nf16 = 2e9\n[device]\nname = "toy2"\n'
    derived = load_device(write(tmp_path, "toy2.toml", text))
    assert derived.name == "toy2"
    assert derived.unit("cube").peak_flops == {
        "f32": 1e9,
        "f16": 2e9,
        "bf16": 1e9,
        "i8": 1e9,
        "i32": 1e9,
    }
    assert derived.description == load_device("toy").description


def test_extends_through_a_chain_beside_and_on_the_search_path(tmp_path, monkeypatch):
    """leaf.toml extends mid (a file beside it), which extends base (a name found on
    RTGRAPH_DEVICE_PATH), which extends toy (shipped)."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "work").mkdir()
    write(tmp_path / "lib", "base.toml", 'extends = "toy"\n[memory]\nalignment = 128\n')
    write(tmp_path / "work", "mid.toml", 'extends = "base"\n[units.cube]\ncores = 2\n')
    path = write(tmp_path / "work", "leaf.toml", 'extends = "mid.toml"\n[host]\nbatch_size = 4\n')
    monkeypatch.setenv("RTGRAPH_DEVICE_PATH", str(tmp_path / "lib"))
    spec = load_device(path)
    assert (spec.memory.alignment, spec.host.batch_size, spec.unit("cube").cores) == (128, 4, 2)


def test_parse_device_reads_text():
    spec = parse_device('extends = "toy"\n[scheduler]\nevent_mode = "cuda"\n', "inline")
    assert spec.scheduler.event_mode == "cuda"
    assert spec.source == "inline"


# --- malformed specs -----------------------------------------------------------------------

# (name, TOML that extends toy, the key named, what the message says was expected)
BAD_OVERRIDES = [
    ("unknown key", "[units.cube]\ncorse = 2", "units.cube.corse", "unknown key"),
    ("wrong type", '[units.cube]\ncores = "24"', "units.cube.cores", 'got "24" (a string)'),
    ("zero cores", "[units.vector]\ncores = 0", "units.vector.cores", "positive integer, got 0"),
    ("bool as int", "[units.dma]\ncores = true", "units.dma.cores", "positive integer, got true"),
    ("negative bw", "[memory]\nbandwidth = -1.0", "memory.bandwidth", "positive number, got -1.0"),
    ("alignment", "[memory]\nalignment = 48", "memory.alignment", "power of two"),
    (
        "reorder < 0",
        "[scheduler]\nreorder_window = -1",
        "scheduler.reorder_window",
        "non-negative integer, got -1",
    ),
    (
        "reorder > depth",
        "[scheduler]\nreorder_window = 5000",
        "scheduler.reorder_window",
        "[0, queue_depth = 1024]",
    ),
    ("event mode", '[scheduler]\nevent_mode = "hip"', "scheduler.event_mode", "'cann' or 'cuda'"),
    (
        "failure mode",
        '[scheduler]\nfailure_mode = "halt"',
        "scheduler.failure_mode",
        "'continue' or 'stop'",
    ),
    (
        "overhead",
        "[profiling]\nop_trace_overhead = 1.5",
        "profiling.op_trace_overhead",
        "fraction between 0 and 1",
    ),
    ("firmware", '[device]\nfirmware = "seven"', "device.firmware", "a version like"),
    ("sources", "[device]\nsources = [1]", "device.sources", "a list of strings"),
    ("unit kind", "[units.npu]\ncores = 1", "units.npu", "unknown key"),
    ("top table", "[gpu]\nx = 1", "gpu", "unknown key"),
    ("table type", "memory = 3", "memory", "expected a table, got 3"),
    (
        "block dim",
        "[units.cube]\ndefault_block_dim = 2",
        "units.cube.default_block_dim",
        "[0, cores = 1]",
    ),
    (
        "peak dtype",
        "[units.cube.peak_flops]\nf64 = 1e9",
        "units.cube.peak_flops.f64",
        "unknown key",
    ),
    (
        "peak value",
        "[units.cube.peak_flops]\nf16 = 0",
        "units.cube.peak_flops.f16",
        "positive number, got 0",
    ),
    ("nan", "[host]\nioctl_us = nan", "host.ioctl_us", "non-negative number, got nan"),
    ("extends type", "", "extends", "expected a device name or path, got 3"),
]


@pytest.mark.parametrize(
    ("text", "key", "expected"), [c[1:] for c in BAD_OVERRIDES], ids=[c[0] for c in BAD_OVERRIDES]
)
def test_each_bad_value_is_refused_naming_file_key_and_expectation(tmp_path, text, key, expected):
    head = 'extends = "toy"\n' if key != "extends" else "extends = 3\n"
    path = write(tmp_path, "bad.toml", head + text + "\n")
    err = refused(path)
    shown = str(err)
    assert "bad.toml" in shown
    assert f"{key}:" in shown
    assert expected in shown


def test_a_located_error_points_at_the_line_of_the_key(tmp_path):
    path = write(tmp_path, "bad.toml", 'extends = "toy"\n\n[units.cube]\ncores = 0\n')
    err = refused(path)
    assert err.span is not None and (err.span.file, err.span.line) == (str(path), 4)
    assert err.render().startswith(f"{path}:4:1: error: units.cube.cores: expected")
    assert "cores = 0" in err.render()


def test_an_inline_table_key_is_located_in_its_line(tmp_path):
    text = 'extends = "toy"\n[units.cube]\npeak_flops = { f16 = 1e9, f32 = -2.0 }\n'
    err = refused(write(tmp_path, "bad.toml", text))
    assert err.span is not None and err.span.line == 3
    assert err.span.col == text.splitlines()[2].index("f32") + 1


def test_unknown_key_hint_suggests_the_close_name(tmp_path):
    err = refused(write(tmp_path, "bad.toml", 'extends = "toy"\n[units.cube]\ncorse = 2\n'))
    assert err.hint == "did you mean 'cores'?"


def test_missing_required_key(tmp_path):
    text = TOY_TEXT.replace("ioctl_us = 1.0\n", "")
    err = refused(write(tmp_path, "bad.toml", text))
    assert "host.ioctl_us: missing required key (expected a non-negative number)" in str(err)
    assert "bad.toml" in str(err)
    assert err.hint == "add it to [host]"


def test_a_unit_needs_at_least_one_peak_rate(tmp_path):
    text = TOY_TEXT.replace(
        "peak_flops = { f16 = 1e9, bf16 = 1e9, f32 = 1e9, i8 = 1e9, i32 = 1e9 }",
        "peak_flops = {}",
        1,
    )
    err = refused(write(tmp_path, "bad.toml", text))
    assert "units.cube.peak_flops: expected a rate for at least one dtype" in str(err)


def test_missing_required_table(tmp_path):
    text = TOY_TEXT[: TOY_TEXT.index("[profiling]")]
    err = refused(write(tmp_path, "bad.toml", text))
    assert "bad.toml: profiling: missing required key (expected a table)" in str(err)


def test_missing_required_unit(tmp_path):
    start = TOY_TEXT.index("[units.dma]")
    text = TOY_TEXT[:start] + TOY_TEXT[TOY_TEXT.index("[memory]") :]
    err = refused(write(tmp_path, "bad.toml", text))
    assert "units.dma: missing required key" in str(err)


def test_bad_toml_reports_its_line(tmp_path):
    path = write(tmp_path, "broken.toml", '[device]\nname = "x"\ncores = = 3\n')
    err = refused(path)
    assert "invalid TOML" in err.message
    assert err.span is not None and err.span.line == 3
    assert str(path) in str(err) and "line 3" in str(err)


def test_extends_cycle_is_an_error(tmp_path):
    write(tmp_path, "a.toml", 'extends = "b.toml"\n')
    write(tmp_path, "b.toml", 'extends = "a.toml"\n')
    err = refused(tmp_path / "a.toml")
    assert "extends: cycle" in str(err)
    assert re.search(r"a\.toml → .*b\.toml → .*a\.toml", str(err))


def test_self_extension_is_a_cycle(tmp_path):
    path = write(tmp_path, "me.toml", 'extends = "me.toml"\n')
    err = refused(path)
    assert f"extends: cycle {path} → {path}" in str(err)


def test_unknown_device_name_lists_shipped_names_and_suggests(tmp_path):
    err = refused("ascend-910")
    assert "unknown device 'ascend-910'" in str(err)
    assert "ascend-310p, ascend-910b, toy" in str(err)
    assert err.hint == "did you mean 'ascend-910b'?"


def test_extends_an_unknown_name(tmp_path):
    err = refused(write(tmp_path, "x.toml", 'extends = "toi"\n'))
    assert "x.toml" in str(err) and "unknown device 'toi'" in str(err)
    assert err.hint == "did you mean 'toy'?"


def test_missing_file(tmp_path):
    err = refused(tmp_path / "nowhere.toml")
    assert "no device spec file" in str(err) and "nowhere.toml" in str(err)


def test_a_bad_value_in_a_base_file_is_blamed_on_that_file(tmp_path):
    write(tmp_path, "base.toml", 'extends = "toy"\n[memory]\ngranularity = 3\n')
    err = refused(write(tmp_path, "leaf.toml", 'extends = "base.toml"\n'))
    assert err.span is not None and err.span.file.endswith("base.toml")
    assert "memory.granularity: expected a power of two" in str(err)


def test_an_override_fixes_a_bad_base_value(tmp_path):
    write(tmp_path, "base.toml", 'extends = "toy"\n[memory]\ngranularity = 3\n')
    leaf = write(tmp_path, "leaf.toml", 'extends = "base.toml"\n[memory]\ngranularity = 4\n')
    assert load_device(leaf).memory.granularity == 4


NUMERIC_KEYS = [
    (f"{table}.{key}", rule.expected)
    for table, rules in SCHEMA.items()
    if table not in ("units", "device")
    for key, rule in rules.items()
    if "number" in rule.expected or "integer" in rule.expected or "power" in rule.expected
] + [(f"units.{kind}.cores", "a positive integer") for kind in ("cube", "vector", "dma")]


@given(
    case=st.sampled_from(NUMERIC_KEYS),
    value=st.sampled_from(["-3", "-0.5", '"fast"', "true", "[1, 2]", "{ a = 1 }"]),
)
def test_any_numeric_key_with_a_bad_value_is_refused_by_name(case, value):
    dotted, expected = case
    table, key = dotted.rsplit(".", 1)
    with pytest.raises(DeviceSpecError) as info:
        parse_device(f'extends = "toy"\n[{table}]\n{key} = {value}\n', "prop.toml")
    assert f"{dotted}: expected {expected}, got" in str(info.value)
    assert "prop.toml" in str(info.value)


# --- firmware compatibility ----------------------------------------------------------------


def test_old_firmware_names_both_versions_and_the_upgrade(tmp_path):
    path = write(tmp_path, "old.toml", 'extends = "toy"\n[device]\nfirmware = "6.4.0.5.220"\n')
    spec = load_device(path)
    with pytest.raises(DeviceSpecError) as info:
        check_compatibility(spec, "8.0.0")
    message = str(info.value)
    assert "firmware 6.4.0.5.220 is not supported by runtime 8.0.0" in message
    assert "upgrade the firmware to ≥ 7.5.0 or use runtime ≤ 7.0.0" in message
    assert str(path) in message


def test_an_older_runtime_accepts_the_older_firmware():
    spec = dataclasses.replace(
        load_device("toy"), firmware="7.3.0.1.231", compatible_runtimes=("8",)
    )
    check_compatibility(spec, "8.0.RC2")
    with pytest.raises(
        DeviceSpecError, match=re.escape("upgrade the firmware to ≥ 7.5.0 or use runtime ≤ 8.0.RC2")
    ):
        check_compatibility(spec, "8.0.RC3")


def test_an_unlisted_runtime_follows_the_newest_row_before_it():
    spec = dataclasses.replace(load_device("toy"), firmware="7.1.0")
    check_compatibility(dataclasses.replace(spec, firmware="7.5.0"), "8.0.1")
    with pytest.raises(DeviceSpecError, match=re.escape("runtime 8.0.1")):
        check_compatibility(spec, "8.0.1")


def test_firmware_too_new_for_an_old_runtime_suggests_a_downgrade():
    matrix = [CompatRow("6.0.0", "5.0.0", "6.9.99"), CompatRow("7.0.0", "6.0.0")]
    spec = dataclasses.replace(load_device("toy"), compatible_runtimes=("6", "7"))
    with pytest.raises(DeviceSpecError) as info:
        check_compatibility(spec, "6.0.0", matrix=matrix)
    assert "downgrade the firmware to ≤ 6.9.99 or use runtime ≥ 7.0.0" in str(info.value)
    check_compatibility(spec, "7.0.0", matrix=matrix)


def test_no_runtime_supports_the_firmware():
    spec = dataclasses.replace(load_device("toy"), firmware="1.0.0")
    with pytest.raises(
        DeviceSpecError, match=re.escape("no runtime in the matrix supports firmware 1.0.0")
    ):
        check_compatibility(spec)


def test_the_spec_must_list_the_runtime_series():
    spec = dataclasses.replace(load_device("toy"), compatible_runtimes=("7.0",))
    with pytest.raises(
        DeviceSpecError, match=re.escape("lists compatible runtimes 7.0, which do not")
    ):
        check_compatibility(spec, "8.0.0")


def test_runtime_older_than_the_matrix_and_malformed_runtime():
    toy = load_device("toy")
    with pytest.raises(DeviceSpecError, match="older than every runtime"):
        check_compatibility(toy, "1.0.0")
    with pytest.raises(DeviceSpecError, match="not a version"):
        check_compatibility(toy, "eight")


def test_compat_matrix_is_sorted_and_covers_the_current_runtime():
    rows = compat_matrix()
    keys = [parse_version(r.runtime) for r in rows]
    assert keys == sorted(keys)
    assert RUNTIME_VERSION in [r.runtime for r in rows]


def test_release_candidates_sort_before_the_release():
    order = ["7.0.0", "8.0.RC1", "8.0.RC2", "8.0.RC3", "8.0.0", "8.0.1", "8.1.RC1"]
    assert sorted(order, key=parse_version) == order
    assert parse_version("7.5") < parse_version("7.5.0.1.129") < parse_version("7.5.1")


@given(
    st.lists(st.integers(0, 300), min_size=1, max_size=5),
    st.lists(st.integers(0, 300), min_size=1, max_size=5),
)
def test_numeric_versions_sort_like_integer_tuples(a, b):
    va, vb = ".".join(map(str, a)), ".".join(map(str, b))
    assert (parse_version(va) < parse_version(vb)) == (tuple(a) < tuple(b))


# --- describing devices --------------------------------------------------------------------


def test_describe_one_device_shows_every_group_and_source():
    text = describe(load_device("ascend-910b"))
    for needle in (
        "cube      24 ×",
        "vector    48 ×",
        "64 GiB at 1.6 TB/s",
        "queue depth 2013",
        "events cann (max 65535)",
        "firmware 7.5.0.1.129",
        "source: Cores",
    ):
        assert needle in text


def test_the_devices_table_has_a_row_per_device_with_key_figures():
    table = devices_table(list_devices())
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["device", "cube", "f16"]
    assert [line.split()[0] for line in lines[2:]] == shipped_names()
    row = next(line for line in lines if line.startswith("ascend-910b"))
    assert row.split()[1:5] == ["24", "353.9", "48", "64"]
    assert describe(list_devices()) == table


# --- the docs document the schema ----------------------------------------------------------


def test_every_key_of_the_schema_is_documented():
    docs = (ROOT / "docs" / "devices.md").read_text(encoding="utf-8")
    keys = {key for table, rules in SCHEMA.items() if table != "units" for key in rules}
    keys |= {key for rules in UNIT_KINDS.values() for key in rules} | {"extends"}
    missing = sorted(key for key in keys if f"`{key}`" not in docs)
    assert not missing, f"docs/devices.md does not document: {missing}"


def test_dataclass_fields_all_have_a_toml_key():
    """Every DeviceSpec field a TOML file can set has a schema key (so none is silently fixed)."""
    groups = {
        "memory": "memory",
        "host": "host",
        "scheduler": "scheduler",
        "profiling": "profiling",
    }
    spec = load_device("toy")
    for attr, table in groups.items():
        fields = {f.name for f in dataclasses.fields(getattr(spec, attr))}
        assert fields == set(SCHEMA[table]), table
    unit_fields = {f.name for f in dataclasses.fields(spec.unit("cube"))} - {"kind"}
    assert unit_fields == set(UNIT_KINDS["cube"]) | {"bandwidth"}
    assert isinstance(spec, DeviceSpec)


def test_malformed_versions():
    with pytest.raises(ValueError, match="not a version"):
        parse_version("8.x")
    spec = dataclasses.replace(load_device("toy"), firmware="latest")
    with pytest.raises(DeviceSpecError, match="firmware 'latest' is not a version"):
        check_compatibility(spec)
