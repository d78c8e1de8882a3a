"""What a schema cannot say about a stream program's JSON: that every reference resolves.

:func:`check_references` runs on JSON the schema (:mod:`.schema`) has admitted, before any
dataclass is built: task ids are ``0..n-1`` in order, every stream a command names is declared,
event ids are below ``num_events``, every task is launched exactly once, regions lie inside
``memory.total_bytes``, every operand's bytes lie inside its tensor's region (or, for a view,
inside device memory) and no view is larger than the plan, host copies name host tensors of the
right role and size, each param's ``derive`` can make it from a source that fits device memory
(one declared type per source), and each op task's output is what the op's own rule gives for its
inputs and attributes (so a kernel never computes more than the operands hold). Every error
names the field by its JSON path, as the schema check does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rtgraph.dtypes import DTYPES, TensorType
from rtgraph.errors import did_you_mean
from rtgraph.ir.weights import Derive, derive_problem
from rtgraph.ops.registry import OpError, all_ops, lookup
from rtgraph.stream_program.schema import MAX_ELEMENTS, refuse

#: Task ops that are not registry ops: the host copies.
COPY_OPS = ("h2d", "d2h")


def check_references(data: Mapping[str, Any]) -> None:
    """Refuse the first dangling or inconsistent reference in schema-valid ``data``."""
    total = data["memory"]["total_bytes"]
    streams = _streams(data["streams"])
    regions = _regions(data["memory"]["regions"], total)
    hosts = _host_tensors(data["host_tensors"], regions, total)
    _derived(data["host_tensors"], total)
    tasks = data["tasks"]
    for i, task in enumerate(tasks):
        _task(task, f"tasks[{i}]", i, len(tasks), regions, hosts, total)
    _commands(data["commands"], streams, data["num_events"], len(tasks))


def _streams(streams: Sequence[Mapping[str, Any]]) -> list[int]:
    seen: list[int] = []
    for i, s in enumerate(streams):
        if s["id"] in seen:
            raise refuse(f"streams[{i}].id", f"stream {s['id']} is declared twice")
        seen.append(s["id"])
    return seen


def _regions(regions: Sequence[Mapping[str, Any]], total: int) -> dict[str, tuple[int, int]]:
    found: dict[str, tuple[int, int]] = {}
    for i, r in enumerate(regions):
        path = f"memory.regions[{i}]"
        if r["tensor"] in found:
            raise refuse(f"{path}.tensor", f"tensor '{r['tensor']}' has a region already")
        start, end = r["offset"], r["offset"] + r["size"]
        if end > total:
            raise refuse(path, f"bytes [{start:,}, {end:,}) lie outside {_memory(total)}")
        found[r["tensor"]] = (start, end)
    return found


def _memory(total: int) -> str:
    return f"device memory of {total:,} bytes (memory.total_bytes)"


def _elements(shape: Sequence[int], path: str) -> int:
    count = math.prod(shape)
    if count > MAX_ELEMENTS:
        raise refuse(path, f"{list(shape)} has {count:,} elements; the limit is {MAX_ELEMENTS:,}")
    return count


def _host_tensors(
    hosts: Sequence[Mapping[str, Any]], regions: Mapping[str, tuple[int, int]], total: int
) -> dict[str, tuple[str, int, int]]:
    """Each host tensor's role, element count and rows (its leading axis; 1 for a scalar),
    checked to fit where it will live."""
    found: dict[str, tuple[str, int, int]] = {}
    for i, h in enumerate(hosts):
        path = f"host_tensors[{i}]"
        if h["name"] in found:
            raise refuse(f"{path}.name", f"host tensor '{h['name']}' is declared twice")
        count = _elements(h["shape"], f"{path}.shape")
        nbytes = count * DTYPES[h["dtype"]].itemsize
        region = regions.get(h["name"])
        room = region[1] - region[0] if region else (None if h["role"] == "const" else total)
        if room is not None and nbytes > room:
            where = f"its region's {room:,} bytes" if region else _memory(total)
            raise refuse(
                f"{path}.shape",
                f"{h['dtype']}{list(h['shape'])} takes {nbytes:,} bytes, more than {where}",
            )
        found[h["name"]] = (h["role"], count, h["shape"][0] if h["shape"] else 1)
    return found


def _derived(hosts: Sequence[Mapping[str, Any]], total: int) -> None:
    """Each param's ``derive`` can make it (:func:`~rtgraph.ir.weights.derive_problem`) from a
    source the device could hold, and every param the user supplies has one declared type."""
    supplied: dict[str, tuple[TensorType, str]] = {}
    for i, h in enumerate(hosts):
        path, r = f"host_tensors[{i}]", h.get("derive")
        target = TensorType(tuple(h["shape"]), h["dtype"])
        name, declared, where = h["name"], target, f"{path}.shape"
        if r is not None:
            if h["role"] != "param":
                raise refuse(
                    f"{path}.derive", f"must be null for role '{h['role']}': only params are made"
                )
            name, where = r["source"], f"{path}.derive.source_type"
            declared = TensorType(tuple(r["source_type"]["shape"]), r["source_type"]["dtype"])
            count = _elements(declared.shape, f"{where}.shape")
            if count * DTYPES[declared.dtype].itemsize > total:
                raise refuse(
                    where, f"{declared} takes {declared.nbytes:,} bytes, more than {_memory(total)}"
                )
            derive = Derive(name, declared, r["rule"], r["axis"], float(r["factor"]))
            problem = derive_problem(derive, target)
            if problem is not None:
                raise refuse(f"{path}.derive", f"cannot make {target}: {problem}")
        elif h["role"] != "param":
            continue
        known, first = supplied.setdefault(name, (declared, where))
        if known != declared:
            raise refuse(where, f"param '{name}' is supplied as {known} ({first}), not {declared}")


def _operand(
    o: Mapping[str, Any], path: str, regions: Mapping[str, tuple[int, int]], total: int
) -> int:
    """Check one operand view; return its element count."""
    shape, strides = o["shape"], o["strides"]
    if len(strides) != len(shape):
        raise refuse(
            f"{path}.strides", f"has {len(strides)} entries for a shape of rank {len(shape)}"
        )
    count = _elements(shape, f"{path}.shape")
    itemsize = DTYPES[o["dtype"]].itemsize
    if count * itemsize > total:
        raise refuse(
            f"{path}.shape",
            f"a view of {count:,} {o['dtype']} elements ({count * itemsize:,} bytes) is larger "
            f"than {_memory(total)}",
        )
    if count == 0:
        return 0
    low = o["offset"] + sum(st * (n - 1) for n, st in zip(shape, strides, strict=True) if st < 0)
    high = o["offset"] + itemsize
    high += sum(st * (n - 1) for n, st in zip(shape, strides, strict=True) if st > 0)
    region = regions.get(o["tensor"])
    start, end = region if region is not None else (0, total)
    if not start <= low <= high <= end:
        where = f"region '{o['tensor']}' [{start:,}, {end:,})" if region else _memory(total)
        raise refuse(path, f"its bytes [{low:,}, {high:,}) lie outside {where}")
    return count


def _task(
    t: Mapping[str, Any],
    path: str,
    index: int,
    count: int,
    regions: Mapping[str, tuple[int, int]],
    hosts: Mapping[str, tuple[str, int, int]],
    total: int,
) -> None:
    if t["id"] != index:
        raise refuse(f"{path}.id", f"must be {index} (task ids are 0..n-1 in order), got {t['id']}")
    sizes = [_operand(o, f"{path}.inputs[{k}]", regions, total) for k, o in enumerate(t["inputs"])]
    if t["output"] is not None:
        _operand(t["output"], f"{path}.output", regions, total)
    for name in ("reads", "writes"):
        for k, (a, b) in enumerate(t[name]):
            if not a <= b <= total:
                raise refuse(
                    f"{path}.{name}[{k}]", f"[{a:,}, {b:,}) is no byte range of {_memory(total)}"
                )
    for k, name in enumerate(t.get("regions", ())):
        if name not in regions:
            raise refuse(
                f"{path}.regions[{k}]", f"names region '{name}', which memory.regions lacks"
            )
    for k, d in enumerate(t["deps"]):
        if d >= count:
            raise refuse(f"{path}.deps[{k}]", f"names task {d}; the program has {count}")
    if t["op"] in COPY_OPS:
        _copy(t, path, hosts, sizes)
    elif lookup(t["op"]) is None:
        raise refuse(
            f"{path}.op",
            f"unknown op '{t['op']}'",
            did_you_mean(t["op"], [*all_ops(), *COPY_OPS]),
        )
    elif t["op"] != "kernel" and t["duration_us"] is None:
        _op(t, path)


def _copy(
    t: Mapping[str, Any], path: str, hosts: Mapping[str, tuple[str, int, int]], sizes: list[int]
) -> None:
    """An ``h2d`` copies an input host tensor into its output; a ``d2h`` an input operand out
    — all of it, or the rows ``attrs.rows = [a, b]`` of it (a copy in parts)."""
    role = "input" if t["op"] == "h2d" else "output"
    if t["unit"] != "dma":
        raise refuse(f"{path}.unit", f"must be 'dma' for a host copy, got '{t['unit']}'")
    found = hosts.get(t["host"]) if t["host"] is not None else None
    if found is None or found[0] != role:
        raise refuse(f"{path}.host", f"must name an {role} host tensor, got {t['host']!r}")
    operand = t["output"] if role == "input" else (t["inputs"] or [None])[0]
    if operand is None:
        side = "output" if role == "input" else "inputs"
        raise refuse(f"{path}.{side}", f"a {t['op']} copy needs its device operand")
    elements, expected = math.prod(operand["shape"]), found[1]
    rows = t["attrs"].get("rows")
    if rows is not None:
        if (
            not isinstance(rows, (list, tuple))
            or len(rows) != 2
            or not all(type(r) is int for r in rows)
            or not 0 <= rows[0] < rows[1] <= found[2]
        ):
            raise refuse(
                f"{path}.attrs.rows",
                f"must be [a, b] with 0 <= a < b <= {found[2]:,} (the rows of "
                f"'{t['host']}'), got {rows!r}",
            )
        expected = found[1] // found[2] * (rows[1] - rows[0])
    if elements != expected:
        side = "output" if role == "input" else "inputs[0]"
        raise refuse(
            f"{path}.{side}.shape",
            f"holds {elements:,} elements; host tensor '{t['host']}' has {expected:,}"
            + ("" if rows is None else f" in rows {list(rows)}"),
        )


def _op(t: Mapping[str, Any], path: str) -> None:
    """A registry op's task: its unit, and its output as the op's rule infers it."""
    op = lookup(t["op"])
    assert op is not None
    attrs = tuplify(t["attrs"])
    try:
        unit = op.unit_for(attrs)
        if t["output"] is None:
            raise refuse(f"{path}.output", f"op '{op.name}' writes an output; got null")
        if not op.min_args <= len(t["inputs"]) <= (op.max_args or len(t["inputs"])):
            raise OpError(f"takes {op.min_args}..{op.max_args} tensors, got {len(t['inputs'])}")
        inferred = op.infer([TensorType(tuple(o["shape"]), o["dtype"]) for o in t["inputs"]], attrs)
    except OpError as e:
        raise refuse(path, f"op '{op.name}' does not accept these operands: {e.message}") from None
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as e:
        raise refuse(
            f"{path}.attrs", f"op '{op.name}' cannot use them ({type(e).__name__}: {e})"
        ) from None
    if t["unit"] != unit:
        raise refuse(f"{path}.unit", f"op '{op.name}' runs on '{unit}', got '{t['unit']}'")
    out = t["output"]
    if (tuple(inferred.shape), inferred.dtype) != (tuple(out["shape"]), out["dtype"]):
        raise refuse(
            f"{path}.output",
            f"op '{op.name}' on these inputs gives {inferred.dtype}{list(inferred.shape)}, "
            f"not {out['dtype']}{list(out['shape'])}",
        )


def tuplify(v: Any) -> Any:
    """JSON lists back to the tuples the ops' rules (and the compiler) expect in attrs."""
    if isinstance(v, list):
        return tuple(tuplify(x) for x in v)
    if isinstance(v, dict):
        return {k: tuplify(x) for k, x in v.items()}
    return v


def _commands(
    commands: Sequence[Mapping[str, Any]],
    streams: Sequence[int],
    num_events: int,
    num_tasks: int,
) -> None:
    launched: dict[int, int] = {}
    declared = ", ".join(map(str, streams)) or "none"
    events = f"0..{num_events - 1}" if num_events else "none: num_events is 0"
    for i, c in enumerate(commands):
        path = f"commands[{i}]"
        if "stream" in c and c["stream"] not in streams:
            raise refuse(
                f"{path}.stream", f"names stream {c['stream']}, which is not declared ({declared})"
            )
        kind = c["cmd"]
        if kind in ("record", "wait") and c["event"] >= num_events:
            raise refuse(f"{path}.event", f"event {c['event']} is out of range ({events})")
        if kind == "sync":
            _sync(c, path, streams, declared, num_events, events)
        elif kind == "launch":
            task = c["task"]
            if task >= num_tasks:
                raise refuse(f"{path}.task", f"names task {task}; the program has {num_tasks}")
            if task in launched:
                raise refuse(
                    f"{path}.task", f"task {task} was launched already (commands[{launched[task]}])"
                )
            launched[task] = i
    for task in range(num_tasks):
        if task not in launched:
            raise refuse(f"tasks[{task}]", "is never launched (no launch command names it)")


def _sync(
    c: Mapping[str, Any],
    path: str,
    streams: Sequence[int],
    declared: str,
    num_events: int,
    events: str,
) -> None:
    target = c.get("target")
    if c["kind"] == "device":
        if target is not None:
            raise refuse(f"{path}.target", f"a device sync has no target, got {target}")
        return
    if target is None:
        raise refuse(f"{path}.target", f"a {c['kind']} sync needs the {c['kind']} it waits for")
    if c["kind"] == "stream" and target not in streams:
        raise refuse(f"{path}.target", f"names stream {target}, which is not declared ({declared})")
    if c["kind"] == "event" and target >= num_events:
        raise refuse(f"{path}.target", f"event {target} is out of range ({events})")
