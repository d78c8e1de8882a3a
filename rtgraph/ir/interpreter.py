"""The reference interpreter: the checked program run sequentially in NumPy.

This is the oracle every later stage is compared with. It walks the IR in program order, calls
each op's registry kernel, and keeps every result C-contiguous — exactly the layout the emulator
writes into device memory — so that a race-free stream program reproduces these outputs bit for
bit. Layout ops stay NumPy views where NumPy can make them views, as on the device.

Inputs and params not supplied come from :func:`rtgraph.ir.data.generate` (seeded by name), or
from ``.npz`` files loaded without unpickling.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from rtgraph.dtypes import to_value
from rtgraph.errors import CapacityError, InputError
from rtgraph.ir.data import generate
from rtgraph.ir.graph import OpNode, Program, Tensor
from rtgraph.ops import lookup, run_kernel

#: Host memory the interpreter may use, in bytes (override with RTGRAPH_HOST_MEMORY).
DEFAULT_HOST_MEMORY = 16 * 2**30


def host_memory_limit() -> int:
    value = os.environ.get("RTGRAPH_HOST_MEMORY")
    return int(value) if value and value.isdigit() else DEFAULT_HOST_MEMORY


def load_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Arrays from an ``.npz`` file, never unpickling objects."""
    try:
        with np.load(Path(path), allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except FileNotFoundError:
        raise InputError(f"cannot read {path}: no such file") from None
    except (OSError, ValueError) as e:
        raise InputError(
            f"cannot read {path} as .npz: {e}",
            hint="write it with numpy.savez(path, name=array, ...); object arrays are refused",
        ) from None


def check_array(tensor: Tensor, array: np.ndarray, origin: str) -> np.ndarray:
    """``array`` converted to ``tensor``'s value form, or a clear error if it does not fit."""
    array = np.asarray(array)
    if array.dtype.kind not in "fiub":
        raise InputError(
            f"{origin} '{tensor.label}' has dtype {array.dtype}, not numeric",
            span=tensor.span,
        )
    if tuple(array.shape) != tensor.type.shape:
        raise InputError(
            f"{origin} '{tensor.label}' has shape {list(array.shape)}, "
            f"the program declares {list(tensor.type.shape)}",
            span=tensor.span,
            hint=f"supply an array of shape {list(tensor.type.shape)} ({tensor.type.dtype})",
        )
    value = to_value(array, tensor.type.dtype)
    return value if value.flags.c_contiguous else np.ascontiguousarray(value)


def host_values(
    program: Program,
    inputs: Mapping[str, np.ndarray] | None,
    params: Mapping[str, np.ndarray] | None,
    seed: int,
) -> dict[str, np.ndarray]:
    """Values of every input, param and const: supplied ones checked, the rest generated."""
    supplied = {"input": dict(inputs or {}), "param": dict(params or {})}
    known = {
        kind: {t.name for t in program.tensors.values() if t.kind == kind} for kind in supplied
    }
    for kind, given in supplied.items():
        extra = sorted(set(given) - known[kind])
        if extra:
            raise InputError(
                f"{kind} '{extra[0]}' supplied but program '{program.name}' declares no such "
                f"{kind}",
                hint=f"its {kind}s are: {', '.join(sorted(known[kind])) or '(none)'}",
            )
    values: dict[str, np.ndarray] = {}
    for t in program.tensors.values():
        if t.kind in ("input", "param"):
            given = supplied[t.kind].get(t.name)
            if given is not None:
                values[t.name] = check_array(t, given, t.kind)
            else:
                values[t.name] = generate(
                    t.name, t.type.shape, t.type.dtype, seed, param=t.kind == "param"
                )
        elif t.kind == "const":
            values[t.name] = to_value(np.asarray(t.value), t.type.dtype)
    return values


def check_host_capacity(program: Program) -> None:
    """Refuse, before allocating anything, a program whose tensors cannot fit in host memory."""
    total = sum(
        t.type.nbytes for t in program.tensors.values() if t.kind not in ("buffer", "token")
    )
    limit = host_memory_limit()
    if total > limit:
        raise CapacityError(
            f"program '{program.name}' needs {total:,} bytes of host memory for the reference "
            f"interpreter; {limit:,} are available",
            hint="lower the program parameters (-D) or raise RTGRAPH_HOST_MEMORY",
        )


def evaluate(
    program: Program,
    inputs: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    params: Mapping[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Outputs of ``program`` by name (value form: bf16 as bf16-exact float32)."""
    check_host_capacity(program)
    values = host_values(program, inputs, params, seed)
    for node in program.nodes:
        if not isinstance(node, OpNode) or node.op == "kernel":
            continue
        op = lookup(node.op)
        out = program.tensors[node.output]
        result = run_kernel(op, [values[name] for name in node.inputs], node.attrs, out.type)
        if op.unit != "layout" and not result.flags.c_contiguous:
            result = np.ascontiguousarray(result)  # (never for 0-d: it would become 1-d)
        values[node.output] = result
    return {name: values[name] for name in program.outputs}
