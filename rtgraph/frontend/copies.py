"""Host copies the program places on a stream: ``to_device(x)`` and ``to_host(y)``.

By default lowering copies each host input to the device before its first use and each output
back right after its producer, on a DMA stream of its own choosing. Inside ``on s { }`` a
program may place them itself, as a runtime program calls ``aclrtMemcpyAsync`` (CANN) or
``cudaMemcpyAsync`` (CUDA) on a stream: ``x_dev = to_device(x)`` is the H2D copy of host input
``x`` on ``s`` at that point, ``output y = to_host(t)`` the D2H copy of ``t`` there — which is
what hand-written double buffering needs. Both return the tensor they copy (the data is the
same on both sides), so ``x_dev`` and ``x`` name one device tensor and ``to_host`` is
transparent for naming: ``output y = to_host(a @ b)`` names the product ``y``. Each input and
each output is copied at most once; a ``to_host`` tensor must be an output of the program.
"""

from __future__ import annotations

from rtgraph.errors import Span
from rtgraph.frontend import ast
from rtgraph.frontend.calls import Bind
from rtgraph.frontend.streams import StreamChecker
from rtgraph.frontend.values import POISON, Value, describe
from rtgraph.ir.graph import HostCopyNode, OpNode, Tensor

#: The host-copy builtins and the IR direction each places.
HOST_COPIES = {"to_device": "h2d", "to_host": "d2h"}


class CopyChecker(StreamChecker):
    """``to_device`` / ``to_host`` calls, and the check that every copied tensor is an output."""

    outputs: list[str]

    def host_copy(self, call: ast.Call, bind: Bind | None) -> Value:
        """Check one ``to_device(x)`` / ``to_host(t)`` call and emit its copy node."""
        name = call.func.name
        for kw in call.kwargs:
            self.error(f"{name} takes no attributes", kw.span)
        if len(call.args) != 1:
            for arg in call.args:
                self.eval(arg)
            return self.error(f"{name} takes 1 tensor argument, got {len(call.args)}", call.span)
        direction = HOST_COPIES[name]
        arg = call.args[0]
        value = self.eval(arg, bind if direction == "d2h" else None)
        if value is POISON or call.kwargs:
            return POISON
        if self.stream is None and not self.abstract:
            return self.error(
                f"{name} must be inside an `on` block",
                call.span,
                hint=f"write `on s {{ ... = {name}(...) }}` to say which stream copies it",
            )
        if not isinstance(value, Tensor) or value.kind in ("token", "buffer", "const"):
            return self.error(f"{name} copies a tensor, not {describe(value)}", arg.span)
        if direction == "h2d":
            return self.copy_in(value, arg.span, call.span)
        return self.copy_out(value, arg.span, call.span)

    def copy_in(self, value: Tensor, where: Span, span: Span) -> Value:
        if value.kind != "input":
            return self.error(
                f"to_device copies a host input, not {describe(value)}",
                where,
                hint="inputs live on the host; everything else is already on the device",
            )
        first = self.copied.get(("h2d", value.name))
        if first is not None:
            return self.error(
                f"input '{value.label}' is already copied to the device at line {first.line}",
                span,
                hint="copy each input once and use its device name from then on",
            )
        used = next(
            (n for n in self.ir.nodes if isinstance(n, OpNode) and value.name in n.inputs), None
        )
        if used is not None:
            line = used.span.line if used.span is not None else "?"
            return self.error(
                f"input '{value.label}' is used at line {line}, before this copy",
                span,
                hint="a placed copy must come before every use of its input",
            )
        return self.place("h2d", value, span)

    def copy_out(self, value: Tensor, where: Span, span: Span) -> Value:
        first = self.copied.get(("d2h", value.name))
        if first is not None:
            return self.error(
                f"'{value.label}' is already copied to the host at line {first.line}", span
            )
        return self.place("d2h", value, span)

    def place(self, direction: str, value: Tensor, span: Span) -> Value:
        if not self.abstract:
            self.copied[(direction, value.name)] = span
            self.ir.emit(HostCopyNode(direction, value.name, self.stream or "", span))  # type: ignore[arg-type]
        return value

    def check_host_copies(self) -> None:
        """Every ``to_host`` copies an output (else nothing would receive the data)."""
        for (direction, name), span in self.copied.items():
            if direction == "d2h" and name not in self.outputs:
                label = self.ir.tensors[name].label if name in self.ir.tensors else name
                self.error(
                    f"to_host copies '{label}', which is not an output",
                    span,
                    hint="write it as `output y = to_host(...)`",
                )
