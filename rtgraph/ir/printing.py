"""A readable listing of a checked program, for people and golden tests.

Declared tensors come first (inputs, params, consts, buffers), then streams and events, then one
line per node in program order, then the outputs::

    program mlp(S=128, D=256)  device "ascend-910b"
      input  x : f16[128, 256]
      param  w : f16[256, 256] @direct
      %0 = matmul(x, w) : f16[128, 256]        # x @ w
      h = relu(%0) : f16[128, 256]
      output h

A param made at load time (the precision pass's converted and quantized weights) says from
what, by which rule: ``param w : i8[256, 256]  # = quantize(w: f16[256, 256], axis=1)``.
"""

from __future__ import annotations

from typing import Any

from rtgraph.ir.graph import (
    BarrierNode,
    CallbackNode,
    HostCopyNode,
    Node,
    OpNode,
    Program,
    RecordNode,
    SyncNode,
    Tensor,
    TensorType,
    WaitNode,
)
from rtgraph.ir.weights import describe
from rtgraph.ops.fused import describe_body

_DECLARED = ("input", "param", "const", "buffer")


def format_value(value: Any) -> str:
    """An attribute value as it would be written in .rtg."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if value is None:
        return "none"
    return str(value)


def _declaration(t: Tensor) -> str:
    line = f"  {t.kind:<6} {t.name} : {t.type}"
    if t.kind == "input" and not t.pinned:
        line += " @pageable"
    if t.kind == "param" and t.alloc != "auto":
        line += f" @{t.alloc}"
    if t.kind == "const":
        line += f" = {t.value!r}"
    if t.kind == "buffer" and t.address is not None:
        line += f" at {t.address:#x}"
    if t.derive is not None:
        line += f"  # = {describe(t.derive)}"
    return line


def _op_line(node: OpNode, program: Program) -> str:
    args = [*node.inputs, *(f"{k}={format_value(v)}" for k, v in node.attrs.items())]
    out = program.tensors.get(node.output)
    line = f"  {node.output} = {node.op}({', '.join(args)})"
    if node.op == "fused":  # the optimizer's kernel: its steps, not its raw body attribute
        fast = ", fast_math" if node.attrs.get("fast_math") else ""
        body = describe_body(node.attrs["body"], node.inputs)
        line = f"  {node.output} = fused[{body}]({', '.join(node.inputs)}{fast})"
    if out is not None and out.kind != "token":
        line += f" : {out.type}"
    if out is not None and out.precision is not None:
        line += f" @precision({out.precision})"
    if node.stream is not None:
        line += f" on {node.stream}"
    if node.device is not None:
        line += f" on device[{node.device}]"
    if node.after:
        line += f" after [{', '.join(node.after)}]"
    if out is not None and node.output.startswith("%") and out.display:
        line = f"{line:<48}  # {out.display}"
    return line


def _copy_line(node: HostCopyNode, program: Program) -> str:
    """A host copy: the copy moves the tensor (or its rows), whose name stays the same; no
    stream when the compiler chooses it (copies the optimizer placed)."""
    call = "to_device" if node.direction == "h2d" else "to_host"
    t = program.tensors.get(node.tensor)
    args = node.tensor
    typed = f" : {t.type}" if t is not None else ""
    if node.rows is not None:
        args += f", rows={format_value(node.rows)}"
        if t is not None:
            shape = (node.rows[1] - node.rows[0], *t.type.shape[1:])
            typed = f" : {TensorType(shape, t.type.dtype)}"
    line = f"  {call}({args}){typed}"
    return f"{line} on {node.stream}" if node.stream else line


def format_node(node: Node, program: Program) -> str:
    """One node as a line of the listing."""
    if isinstance(node, OpNode):
        return _op_line(node, program)
    if isinstance(node, RecordNode):
        return f"  record {node.event} on {node.stream}"
    if isinstance(node, WaitNode):
        return f"  wait {node.event} on {node.stream}"
    if isinstance(node, BarrierNode):
        return f"  barrier on {node.stream}"
    if isinstance(node, SyncNode):
        return "  sync" if node.target is None else f"  sync {node.kind} {node.target}"
    if isinstance(node, HostCopyNode):
        return _copy_line(node, program)
    if isinstance(node, CallbackNode):
        return f'  callback "{node.name}" after {node.after}' + (
            " blocking" if node.blocking else ""
        )
    return f"  {node!r}"


def format_program(program: Program) -> str:
    """The whole program as text (see the module docstring)."""
    params = ", ".join(f"{k}={v}" for k, v in program.params.items())
    head = f"program {program.name}({params})"
    if program.device:
        head += f'  device "{program.device}"'
    lines = [head]
    lines += [_declaration(t) for t in program.tensors.values() if t.kind in _DECLARED]
    if program.streams:
        streams = [
            f"{s}(priority={program.stream_priorities[s]})" if s in program.stream_priorities else s
            for s in program.streams
        ]
        lines.append(f"  stream {', '.join(streams)}")
    if program.events:
        lines.append(f"  event  {', '.join(program.events)}")
    lines += [format_node(n, program) for n in program.nodes]
    lines += [f"  output {name}" for name in program.outputs]
    return "\n".join(lines)
