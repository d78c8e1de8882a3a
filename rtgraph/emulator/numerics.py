"""Real numbers on the emulated device: one byte buffer, typed views, kernels at task boundaries.

Device memory is ONE ``np.zeros(total_bytes, np.uint8)`` array. Every operand of every task is a
typed strided view into it, built once before the run (``np.ndarray(shape, storage_dtype,
buffer, offset, strides)``; bf16 is stored as ``uint16`` and converted with
:func:`~rtgraph.dtypes.from_storage` / :func:`~rtgraph.dtypes.to_storage`).

When values move, and why: a task reads its inputs when it STARTS (its kernel is computed
then, rounding its f32/f16 result straight into a staging buffer of the output's shape, reused
from task to task — no result arrays, no fresh pages) and writes its output when it FINISHES
(one copy into device memory). Two conflicting tasks whose execution overlaps
therefore really corrupt each other, as on hardware: a reader that starts before the writer
finishes sees the old bytes. ``h2d`` reads the host array at start and writes device memory
at finish; ``d2h`` reads device memory at start and delivers the host output at finish. A
failed task (injected fault, non-finite result under ``check_finite``) writes nothing.

Where nothing could see the difference, a kernel writes straight into device memory at start
instead (``direct``; no staging copy): the run asks for it when the static race checker
(:mod:`rtgraph.stream_program.races`) proves the program race-free — every two tasks touching
the same bytes, one of them writing, are ordered, so no task touches a task's output or
writes its inputs while it runs — no fault is injected and no result is checked for
non-finite values (a failed task must write nothing); and it applies to a task whose output
bytes do not overlap its own inputs. A compiled program is race-free by construction unless
its own explicit streams leave a hazard to the program; a racy one keeps the staging.

Supplied inputs and params are checked exactly as the reference interpreter checks them
(:mod:`rtgraph.ir.data`: declared names, every one present unless ``fill_missing``, shapes,
lossless conversion); the others are generated as the interpreter generates them (seeded by
name), and a param made at load time from a source param (``HostTensor.derive``) is made by the
same function (:func:`rtgraph.ir.data.param_values`), so a race-free program reproduces the
interpreter's outputs bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rtgraph.dtypes import DTYPES, from_storage, to_storage, to_value
from rtgraph.errors import DeviceError, Span, StreamProgramError
from rtgraph.ir.data import (
    DeclaredParam,
    check_names,
    check_params,
    check_seed,
    generate,
    param_values,
    supplied_params,
    supplied_value,
)
from rtgraph.ir.graph import TensorType
from rtgraph.ops.registry import lookup, run_kernel
from rtgraph.stream_program.program import Operand, StreamProgram, Task

# Plan kinds (_DIRECT: an op whose kernel writes straight into device memory at start).
_OP, _H2D, _D2H, _SEND, _RECV, _DIRECT = 0, 1, 2, 3, 4, 5
#: The transfers between devices (:mod:`rtgraph.ops.comm`): a cluster's link layer moves them.
_TRANSFERS = ("send", "recv", "recv_reduce")


_ADD = lookup("add")


def _overlap(reads: tuple[tuple[int, int], ...], writes: tuple[tuple[int, int], ...]) -> bool:
    """Whether a byte range of ``reads`` meets one of ``writes`` (``[lo, hi)`` each)."""
    return any(a < d and c < b for a, b in reads for c, d in writes)


class DeviceMemory:
    """The device's bytes and typed views into them."""

    def __init__(self, total_bytes: int) -> None:
        self.buffer = np.zeros(total_bytes, np.uint8)
        self._views: dict[tuple[Operand, bool], np.ndarray] = {}

    def view(self, operand: Operand, *, writeable: bool = True) -> np.ndarray:
        """``operand`` as a storage-form array sharing the buffer's memory (made once)."""
        key = (operand, writeable)
        v = self._views.get(key)
        if v is None:
            v = self._views[key] = self._make_view(operand, writeable)
        return v

    def _make_view(self, operand: Operand, writeable: bool) -> np.ndarray:
        storage = DTYPES[operand.dtype].storage
        try:
            v = np.ndarray(operand.shape, storage, self.buffer, operand.offset, operand.strides)
        except (ValueError, TypeError) as e:
            raise StreamProgramError(
                f"operand view of '{operand.tensor}' (offset {operand.offset}, shape "
                f"{list(operand.shape)}, strides {list(operand.strides)}) does not fit in "
                f"{self.buffer.size} bytes of device memory: {e}"
            ) from None
        if not writeable:
            v.flags.writeable = False
        return v

    def write(self, operand: Operand, value: np.ndarray) -> None:
        """Store a value-form array through ``operand``'s view (at load time)."""
        self.view(operand)[...] = to_storage(value, operand.dtype).reshape(operand.shape)


def _contiguous(name: str, offset: int, shape: tuple[int, ...], dtype: str) -> Operand:
    strides, step = [], DTYPES[dtype].itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return Operand(name, offset, tuple(shape), tuple(reversed(strides)), dtype)


def declared_params(program: StreamProgram) -> list[DeclaredParam]:
    """The stream program's params, as :mod:`rtgraph.ir.data` reads them."""
    return [
        DeclaredParam(h.name, TensorType(tuple(h.shape), h.dtype), None, h.derive, h.nonnegative)
        for h in program.host_tensors
        if h.role == "param"
    ]


def declared_names(
    program: StreamProgram, role: str, spans: Mapping[str, Span | None] | None = None
) -> dict[str, Span | None]:
    """The names of the ``role`` tensors a user supplies for ``program`` (for params: the
    sources of derived params, not the derived ones), with the spans ``spans`` gives them."""
    spans = spans or {}
    if role == "param":
        names = supplied_params(declared_params(program))
    else:
        names = {h.name: None for h in program.host_tensors if h.role == role}
    return {name: spans.get(name) for name in names}


def host_values(
    program: StreamProgram,
    inputs: Mapping[str, np.ndarray] | None,
    params: Mapping[str, np.ndarray] | None,
    seed: int,
    *,
    fill_missing: bool = False,
) -> dict[str, np.ndarray]:
    """Value-form arrays of every input, param and const: supplied ones checked (as the
    interpreter checks them), the others generated — a mapping given must hold every input
    (param) unless ``fill_missing``. An input's errors point at its ``h2d`` copy's span. A
    derived param is made from its source's value, as the interpreter makes it."""
    seed = check_seed(seed)
    spans = {t.host: t.span for t in program.tasks if t.op == "h2d" and t.host is not None}
    if inputs is not None:
        declared = declared_names(program, "input", spans)
        check_names("input", list(inputs), declared, program.name, fill_missing=fill_missing)
    if params is not None:
        owner, fill = program.name, fill_missing
        check_params(declared_params(program), list(params), owner, fill_missing=fill)
    values: dict[str, np.ndarray] = {}
    for h in program.host_tensors:
        if h.role == "input":
            given = (inputs or {}).get(h.name)
            if given is not None:
                values[h.name] = supplied_value(
                    given,
                    label=h.name,
                    origin=h.role,
                    shape=tuple(h.shape),
                    dtype=h.dtype,
                    span=spans.get(h.name),
                )
            else:
                values[h.name] = generate(h.name, h.shape, h.dtype, seed, param=False)
        elif h.role == "const":
            value = 0.0 if h.value is None else h.value
            values[h.name] = np.broadcast_to(to_value(np.asarray(value), h.dtype), h.shape)
    values.update(param_values(declared_params(program), params, seed))
    return values


class Numerics:
    """Executes the data side of tasks: ``start(task)`` reads and computes, ``finish`` writes."""

    def __init__(
        self,
        program: StreamProgram,
        inputs: Mapping[str, np.ndarray] | None = None,
        params: Mapping[str, np.ndarray] | None = None,
        seed: int = 0,
        check_finite: bool = False,
        fill_missing: bool = False,
        direct: bool = False,
    ) -> None:
        self.memory = DeviceMemory(program.memory.total_bytes)
        self.check_finite = check_finite
        self.direct = direct and not check_finite
        self.outputs: dict[str, np.ndarray] = {}
        values = host_values(program, inputs, params, seed, fill_missing=fill_missing)
        self._load_resident(program, values)
        self._host = {h.name: values[h.name] for h in program.host_tensors if h.role == "input"}
        self._shapes = {h.name: tuple(h.shape) for h in program.host_tensors}
        self._plans = [self._plan(t) for t in program.tasks]
        self._pending: list[Any] = [None] * len(program.tasks)
        self._spare: dict[tuple[tuple[int, ...], str], list[np.ndarray]] = {}  # staging buffers
        self.nonfinite: dict[int, int] = {}  # task id -> count of non-finite output elements

    # --- before the run ------------------------------------------------------------------
    def _load_resident(self, program: StreamProgram, values: Mapping[str, np.ndarray]) -> None:
        """Write params and consts into their regions, as a model load would."""
        for h in program.host_tensors:
            if h.role not in ("param", "const"):
                continue
            region = program.memory.regions.get(h.name)
            if region is None:
                continue  # not used by any task: nothing resident
            operand = _contiguous(h.name, region.offset, h.shape, h.dtype)
            self.memory.write(operand, values[h.name])

    def _plan(self, task: Task) -> tuple | None:
        """What ``start``/``finish`` do for ``task``: precomputed views, op and types."""
        memory = self.memory
        if task.duration_us is not None or task.op == "kernel":
            return None
        if task.op == "h2d":
            if task.output is None or task.host not in self._host:
                raise StreamProgramError(
                    f"h2d task {task.id} '{task.name}' copies host tensor {task.host!r}, "
                    "which is not an input of the program"
                )
            host = self._host[task.host]
            rows = task.attrs.get("rows")
            if rows is not None:  # one part of an input copied in parts
                host = host[rows[0] : rows[1]]
            storage = to_storage(host, task.output.dtype).reshape(task.output.shape)
            return (_H2D, storage, memory.view(task.output))
        if task.op == "d2h":
            if not task.inputs or task.host is None:
                raise StreamProgramError(f"d2h task {task.id} '{task.name}' has no source/host")
            src = task.inputs[0]
            rows = task.attrs.get("rows")
            part = None if rows is None else (slice(rows[0], rows[1]), self._shapes[task.host])
            return (_D2H, memory.view(src, writeable=False), src.dtype, task.host, part)
        if task.op in _TRANSFERS:
            return self._transfer_plan(task)
        op = lookup(task.op)
        if op is None or op.kernel is None:
            raise StreamProgramError(
                f"task {task.id} '{task.name}' runs op {task.op!r}, which has no kernel",
                span=task.span,
            )
        if task.output is None:
            raise StreamProgramError(f"task {task.id} '{task.name}' ({task.op}) has no output")
        views = tuple(memory.view(o, writeable=False) for o in task.inputs)
        dtypes = tuple(o.dtype for o in task.inputs)
        out = task.output
        out_type = TensorType(tuple(out.shape), out.dtype)
        kind = _DIRECT if self.direct and not _overlap(task.reads, task.writes) else _OP
        return (kind, op, views, dtypes, dict(task.attrs), memory.view(out), out_type, task)

    def _transfer_plan(self, task: Task) -> tuple:
        """A send reads its operand (the payload) at start; a recv writes the payload at finish,
        a recv_reduce the sum of the operand it read at start and the payload, rounded as the
        ``add`` kernel rounds (the payload is handed over by :meth:`deliver` before finish)."""
        memory = self.memory
        if task.op == "send":
            if len(task.inputs) != 1:
                raise StreamProgramError(f"send task {task.id} '{task.name}' needs one input")
            return (_SEND, memory.view(task.inputs[0], writeable=False))
        out = task.output
        if out is None:
            raise StreamProgramError(f"{task.op} task {task.id} '{task.name}' has no output")
        acc = None
        if task.op == "recv_reduce":
            if len(task.inputs) != 1:
                raise StreamProgramError(
                    f"recv_reduce task {task.id} '{task.name}' needs one input"
                )
            acc = (memory.view(task.inputs[0], writeable=False), task.inputs[0].dtype)
        return (_RECV, memory.view(out), out.dtype, acc, TensorType(tuple(out.shape), out.dtype))

    # --- while running -------------------------------------------------------------------
    def payload(self, task: int) -> np.ndarray:
        """What the send ``task`` read at its start (storage form)."""
        return self._pending[task]

    def deliver(self, task: int, payload: np.ndarray) -> None:
        """Hand the recv ``task`` its payload (storage form), before it finishes."""
        self._pending[task] = (self._pending[task], payload)

    def start(self, task: int) -> None:
        """Read the task's inputs now and compute what it will write at finish."""
        plan = self._plans[task]
        if plan is None:
            return
        kind = plan[0]
        if kind in (_OP, _DIRECT):
            _, op, views, dtypes, attrs, out, out_type, t = plan
            arrays = [
                from_storage(v, d) if d == "bf16" else v for v, d in zip(views, dtypes, strict=True)
            ]
            staging = out if kind == _DIRECT else self._staging(out)
            try:  # into staging: a view kernel's result is copied, frozen as it saw it now
                run_kernel(op, arrays, attrs, out_type, into=staging)
            except Exception as e:  # a kernel bug or a malformed program, never user data
                raise DeviceError(
                    f"while executing task {task} '{t.name}' ({t.op}): {type(e).__name__}: {e}",
                    span=t.span,
                ) from e
            if kind == _DIRECT:
                return  # written: nothing is left for finish
            if self.check_finite and DTYPES[out_type.dtype].is_float:
                result = from_storage(staging, out_type.dtype)
                bad = int(result.size - np.count_nonzero(np.isfinite(result)))
                if bad:
                    self.nonfinite[task] = bad
            self._pending[task] = staging
        elif kind == _H2D:
            self._pending[task] = plan[1]
        elif kind == _RECV:  # a recv_reduce reads its operand now; a recv reads nothing
            self._pending[task] = None if plan[3] is None else np.array(plan[3][0])
        else:  # d2h, send
            self._pending[task] = np.array(plan[1])  # copy: later writes must not show

    def _received(self, plan: tuple, acc: np.ndarray | None, payload: np.ndarray) -> None:
        """Write a recv's payload, or a recv_reduce's ``acc + payload`` (as ``add`` computes it)."""
        _, out, dtype, read, out_type = plan
        payload = payload.reshape(out.shape)
        if acc is None:
            out[...] = payload
            return
        arrays = [
            from_storage(a, d) if d == "bf16" else a for a, d in ((acc, read[1]), (payload, dtype))
        ]
        staging = self._staging(out)
        out[...] = run_kernel(_ADD, arrays, {}, out_type, into=staging)
        self._spare[staging.shape, staging.dtype.str].append(staging)

    def _staging(self, out: np.ndarray) -> np.ndarray:
        """A C-contiguous buffer of ``out``'s shape and storage dtype, free until released."""
        spare = self._spare.setdefault((out.shape, out.dtype.str), [])
        return spare.pop() if spare else np.empty(out.shape, out.dtype)

    def finish(self, task: int, failed: bool) -> None:
        """Write the task's result (unless it failed) and drop it."""
        plan = self._plans[task]
        if plan is None or plan[0] == _DIRECT:
            return
        pending = self._pending[task]
        self._pending[task] = None
        kind = plan[0]
        if kind == _OP:
            if not failed:
                plan[5][...] = pending
            self._spare[pending.shape, pending.dtype.str].append(pending)
            return
        if failed or kind == _SEND:
            return
        if kind == _RECV:
            self._received(plan, *pending)
            return
        if kind == _H2D:
            plan[2][...] = pending
        elif plan[4] is None:
            self.outputs[plan[3]] = from_storage(pending, plan[2])
        else:  # a part of an output: its rows of the host array
            rows, shape = plan[4]
            value = from_storage(pending, plan[2])
            out = self.outputs.get(plan[3])
            if out is None:
                out = self.outputs[plan[3]] = np.zeros(shape, value.dtype)
            out[rows] = value.reshape(out[rows].shape)
