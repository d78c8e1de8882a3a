"""The reference interpreter: the checked program run sequentially in NumPy.

This is the oracle every later stage is compared with. It walks the IR in program order, calls
each op's registry kernel, and keeps every result C-contiguous — exactly the layout the emulator
writes into device memory — so that a race-free stream program reproduces these outputs bit for
bit. Layout ops stay NumPy views where NumPy can make them views, as on the device.

Inputs and params come from ``.npz`` files read as untrusted data (:mod:`rtgraph.ir.npz`) or
mappings given in Python, checked by :mod:`rtgraph.ir.data`; a mapping must hold every input
(param) unless ``fill_missing``; those not supplied are generated from the seed by name. A param
made at load time (``Tensor.derive``) is not supplied: the user supplies its source, and the
param is made from it (:func:`rtgraph.ir.data.param_values`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from rtgraph.dtypes import to_value
from rtgraph.errors import CapacityError, Span
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
from rtgraph.ir.graph import OpNode, Program, Tensor
from rtgraph.ir.npz import load_npz
from rtgraph.ops import lookup, run_kernel

#: Host memory the interpreter may use, in bytes (override with RTGRAPH_HOST_MEMORY).
DEFAULT_HOST_MEMORY = 16 * 2**30


def host_memory_limit() -> int:
    value = os.environ.get("RTGRAPH_HOST_MEMORY")
    return int(value) if value and value.isdigit() else DEFAULT_HOST_MEMORY


def declared_params(program: Program) -> list[DeclaredParam]:
    """``program``'s params, as :mod:`rtgraph.ir.data` reads them."""
    return [
        DeclaredParam(t.name, t.type, t.span, t.derive, t.nonnegative) for t in program.params_()
    ]


def declared_names(program: Program, role: str) -> dict[str, Span | None]:
    """The names of the ``role`` tensors a user supplies for ``program`` (for params: the
    sources of derived params, not the derived ones), each with where it was declared."""
    if role == "param":
        return {n: span for n, (_, span) in supplied_params(declared_params(program)).items()}
    return {t.name: t.span for t in program.tensors.values() if t.kind == role}


def load_npz_for(program: Program, path: str | os.PathLike, role: str) -> dict[str, np.ndarray]:
    """The ``.npz`` file of ``program``'s ``role`` tensors (``input`` or ``param``): an array
    the program does not declare is refused before anything is decompressed (a derived param's
    name is read, then refused by :func:`check_supplied`, which names its source)."""
    names = [t.name for t in program.tensors.values() if t.kind == role]
    known = list(dict.fromkeys([*declared_names(program, role), *names]))
    return load_npz(path, known=known, role=role, owner=program.name)


def check_array(tensor: Tensor, array: np.ndarray, origin: str) -> np.ndarray:
    """``array`` converted to ``tensor``'s value form, or a clear error (located at the
    tensor's declaration) if it does not fit: not numeric, the wrong shape, a lossy value."""
    return supplied_value(
        array,
        label=tensor.label,
        origin=origin,
        shape=tensor.type.shape,
        dtype=tensor.type.dtype,
        span=tensor.span,
    )


def check_supplied(
    program: Program,
    inputs: Mapping[str, np.ndarray] | None,
    params: Mapping[str, np.ndarray] | None,
    *,
    fill_missing: bool = False,
) -> None:
    """Refuse supplied names ``program`` does not declare and — for a mapping given, unless
    ``fill_missing`` — declared inputs (params) missing from it. ``None`` supplies nothing:
    every value is generated from the seed."""
    if inputs is not None:
        declared = declared_names(program, "input")
        check_names("input", list(inputs), declared, program.name, fill_missing=fill_missing)
    if params is not None:
        owner, fill = program.name, fill_missing
        check_params(declared_params(program), list(params), owner, fill_missing=fill)


def host_values(
    program: Program,
    inputs: Mapping[str, np.ndarray] | None,
    params: Mapping[str, np.ndarray] | None,
    seed: int,
    *,
    fill_missing: bool = False,
) -> dict[str, np.ndarray]:
    """Values of every input, param and const: supplied ones checked, the rest generated
    (derived params made from their sources')."""
    seed = check_seed(seed)
    check_supplied(program, inputs, params, fill_missing=fill_missing)
    values: dict[str, np.ndarray] = {}
    for t in program.tensors.values():
        if t.kind == "input":
            given = (inputs or {}).get(t.name)
            if given is not None:
                values[t.name] = check_array(t, given, t.kind)
            else:
                values[t.name] = generate(t.name, t.type.shape, t.type.dtype, seed, param=False)
        elif t.kind == "const":
            values[t.name] = to_value(np.asarray(t.value), t.type.dtype)
    values.update(param_values(declared_params(program), params, seed))
    return values


def check_host_capacity(program: Program) -> None:
    """Refuse, before allocating anything, a program whose tensors cannot fit in host memory."""
    total = sum(
        t.type.nbytes for t in program.tensors.values() if t.kind not in ("buffer", "token")
    )
    # the sources of derived params, while those are made (a param not derived is its own)
    plain = {t.name for t in program.params_() if t.derive is None}
    sources = {t.derive.source: t.derive.source_type for t in program.params_() if t.derive}
    total += sum(t.nbytes for name, t in sources.items() if name not in plain)
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
    *,
    fill_missing: bool = False,
) -> dict[str, np.ndarray]:
    """Outputs of ``program`` by name (value form: bf16 as bf16-exact float32).

    ``inputs`` and ``params`` map names to arrays; a mapping given must hold every input
    (param) the program declares unless ``fill_missing``, which generates the missing ones from
    ``seed`` as it generates everything when a mapping is not given at all.
    """
    check_host_capacity(program)
    values = host_values(program, inputs, params, seed, fill_missing=fill_missing)
    dead = dead_after(program)
    for k, node in enumerate(program.nodes):
        if not isinstance(node, OpNode) or node.op == "kernel":
            continue
        op = lookup(node.op)
        out = program.tensors[node.output]
        result = run_kernel(op, [values[name] for name in node.inputs], node.attrs, out.type)
        if op.unit != "layout" and not result.flags.c_contiguous:
            result = np.ascontiguousarray(result)  # (never for 0-d: it would become 1-d)
        values[node.output] = result
        for name in dead.get(k, ()):
            del values[name]
    return {name: values[name] for name in program.outputs}


def dead_after(program: Program) -> dict[int, list[str]]:
    """Per node index: the values no later op reads (outputs and inputs kept), so an
    evaluation can drop them there and reuse their memory."""
    last: dict[str, int] = {}
    for k, node in enumerate(program.nodes):
        if isinstance(node, OpNode) and node.op != "kernel":
            for name in node.inputs:
                last[name] = k
            last.setdefault(node.output, k)
    keep = set(program.outputs)
    dead: dict[int, list[str]] = {}
    for name, k in last.items():
        if name not in keep and program.tensors[name].kind not in ("input", "param", "const"):
            dead.setdefault(k, []).append(name)
    return dead
