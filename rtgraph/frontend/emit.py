"""The IR under construction, and the errors found on the way.

:class:`IRBuilder` owns the tensor table and node list of the :class:`~rtgraph.ir.Program`
being built: it hands out unique IR names, refuses tensors no device could hold, and counts
nodes so that unrolling and inlining cannot grow a program without bound.
:class:`Diagnostics` collects every independent error once (a loop body or a function inlined
many times reports each mistake at its source position only once), and stops checking after
:data:`MAX_ERRORS` of them, as compilers do.
"""

from __future__ import annotations

import dataclasses

from rtgraph.errors import CapacityError, CheckError, RtgError, Span, raise_all
from rtgraph.frontend import limits
from rtgraph.frontend.values import format_number
from rtgraph.ir.graph import (
    CallbackNode,
    HostCopyNode,
    Node,
    OpNode,
    Tensor,
    TensorKind,
    TensorType,
)

#: Bytes no tensor or buffer may reach, device or not: 256 TiB, beyond any real part.
ADDRESS_LIMIT = 2**48

#: IR nodes (operations) one program may expand to, after inlining functions and unrolling
#: loops (``RTGRAPH_MAX_OPS`` overrides it; :mod:`~rtgraph.frontend.limits`). Sized by memory:
#: the front end holds about 0.75 KB per operation (a program of a million kernels written
#: with a loop peaks at 0.8 GB, one at the limit at 1.5 GB); a runaway program is refused
#: before the loop or call that would pass it runs.
MAX_NODES = 2_000_000

#: Distinct errors one check reports; the next one ends checking with "too many errors;
#: stopping" (a file of 20,000 mistakes would otherwise be checked, and shown, in full).
MAX_ERRORS = 100

#: Dimensions a tensor may have (NumPy, which holds every tensor's data, allows 32 to 64).
MAX_RANK = 32

#: Inputs, params (each element of a param array) and buffers one program may declare: each is
#: planned, seeded and copied, so their number is bounded before any of that work.
MAX_DECLARED = 10_000

#: The kinds of tensor a program declares (the others are made by its ops).
DECLARED_KINDS = ("input", "param", "buffer")


class ProgramTooLarge(Exception):
    """A limit of the front end was reached (:data:`MAX_NODES`, :data:`MAX_ERRORS`, ...);
    checking stops and ``error`` says which."""

    def __init__(self, error: RtgError) -> None:
        super().__init__(error.message)
        self.error = error


class Diagnostics:
    """Errors of one run, each reported once."""

    def __init__(self) -> None:
        self._errors: dict[tuple, RtgError] = {}
        #: The "too many errors" error, once :data:`MAX_ERRORS` were collected.
        self.stopped: RtgError | None = None

    def add(self, error: RtgError) -> None:
        """Collect ``error``; raises :class:`ProgramTooLarge` when there are too many."""
        if not self._keep(error):
            assert self.stopped is not None
            raise ProgramTooLarge(self.stopped)

    def last(self, error: RtgError) -> None:
        """Collect the error that stopped checking (never raises)."""
        self._keep(error)

    def _keep(self, error: RtgError) -> bool:
        if self.stopped is not None:
            return error is self.stopped
        s = error.span
        key = (s.line, s.col, error.message) if s is not None else (0, 0, error.message)
        if key in self._errors:
            return True
        if len(self._errors) < MAX_ERRORS:
            self._errors[key] = error
            return True
        self.stopped = CheckError(
            "too many errors; stopping",
            s,
            hint=f"only the first {MAX_ERRORS} errors are reported; fix them and check again",
        )
        return False

    def __len__(self) -> int:
        return len(self._errors)

    def raise_if_any(self) -> None:
        errors = list(self._errors.values())
        if self.stopped is not None:
            errors.append(self.stopped)
        raise_all(errors)


def format_bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n:,} bytes ({n / size:.1f} {unit})"
    return f"{n:,} bytes"


class IRBuilder:
    """Tensors and nodes of the program being checked."""

    def __init__(self, diagnostics: Diagnostics, device_capacity: int | None = None) -> None:
        self.tensors: dict[str, Tensor] = {}
        self.nodes: list[Node] = []
        self.diagnostics = diagnostics
        self.device_capacity = device_capacity
        self._temps = 0
        self._consts = 0
        self.declared = 0
        self.max_nodes = limits.effective(limits.OPS, MAX_NODES)

    def fresh(self, candidate: str) -> str:
        """``candidate``, or ``candidate#k`` for the first ``k`` not yet taken."""
        if candidate not in self.tensors:
            return candidate
        k = 2
        while f"{candidate}#{k}" in self.tensors:
            k += 1
        return f"{candidate}#{k}"

    def temp_name(self) -> str:
        name = f"%{self._temps}"
        self._temps += 1
        return name

    def fits(self, label: str, type_: TensorType, span: Span | None) -> bool:
        """Whether a tensor of ``type_`` could exist; reports why not."""
        if len(type_.shape) > MAX_RANK:
            self.diagnostics.add(
                CheckError(
                    f"tensor '{label}' has {len(type_.shape)} dimensions, more than {MAX_RANK}",
                    span,
                    hint=f"tensors have at most {MAX_RANK} dimensions; merge some with reshape",
                )
            )
            return False
        nbytes = type_.nbytes
        if nbytes >= ADDRESS_LIMIT:
            self.diagnostics.add(
                CapacityError(
                    f"tensor '{label}' ({_short_type(type_)}) needs {nbytes:,} bytes, more than "
                    "any device can address (2**48)",
                    span,
                    hint="check the shape; program parameters can be lowered with -D NAME=value",
                )
            )
            return False
        if self.device_capacity is not None and nbytes > self.device_capacity:
            self.diagnostics.add(
                CapacityError(
                    f"tensor '{label}' ({_short_type(type_)}, {format_bytes(nbytes)}) is larger "
                    f"than the device's memory ({format_bytes(self.device_capacity)})",
                    span,
                    hint="lower the program parameters (-D NAME=value) or use a larger device",
                )
            )
            return False
        return True

    def tensor(
        self,
        name: str,
        type_: TensorType,
        kind: TensorKind,
        span: Span | None,
        display: str,
        **fields,
    ) -> Tensor:
        """Add a tensor under the unique form of ``name`` (capacity is the caller's check).

        A declared tensor (input, param, buffer) past :data:`MAX_DECLARED` stops checking.
        """
        if kind in DECLARED_KINDS:
            self.declare(span)
        unique = name if name not in self.tensors else self.fresh(name)
        tensor = Tensor(unique, type_, kind, span, display, **fields)
        self.tensors[unique] = tensor
        return tensor

    def declare(self, span: Span | None) -> None:
        """Count one declared tensor; stop checking past :data:`MAX_DECLARED`."""
        self.make_room(span, 1)
        self.declared += 1

    def make_room(self, span: Span | None, count: int) -> None:
        """Stop checking if ``count`` more declared tensors would pass :data:`MAX_DECLARED`."""
        if self.declared + count > MAX_DECLARED:
            raise ProgramTooLarge(
                CheckError(
                    f"the program declares more than {MAX_DECLARED:,} inputs, params and buffers",
                    span,
                    hint="each element of a param array counts; pass data in fewer, larger tensors",
                )
            )

    def const(self, value: int | float, dtype: str, span: Span | None) -> Tensor:
        """A scalar constant tensor (a number used with a tensor takes the tensor's dtype)."""
        name = f"%c{self._consts}"
        self._consts += 1
        return self.tensor(
            name, TensorType((), dtype), "const", span, format_number(value), value=float(value)
        )

    def made_since(self, mark: int, name: str) -> bool:
        """Whether a node emitted at or after position ``mark`` made the tensor ``name``."""
        return any(isinstance(node, OpNode) and node.output == name for node in self.nodes[mark:])

    def producer(self, mark: int, name: str) -> OpNode | None:
        """The op emitted at or after position ``mark`` that made the tensor ``name``."""
        for node in reversed(self.nodes[mark:]):
            if isinstance(node, OpNode) and node.output == name:
                return node
        return None

    def pin(self, tensor: Tensor, precision: str) -> Tensor:
        """``tensor`` with the precision its op computes in pinned (``@precision(…)``)."""
        pinned = dataclasses.replace(tensor, precision=precision)
        self.tensors[tensor.name] = pinned
        return pinned

    def rename(self, tensor: Tensor, name: str, display: str, mark: int) -> Tensor:
        """``tensor``, made by a node at or after ``mark``, under the unique form of ``name``.

        A function that returns a name it bound (a loop-carried sum, say) makes no tensor of
        its own for the caller to name; the binding ``y = f(x)`` renames the one it returns,
        so an ``output y`` is called ``y``. Only nodes from ``mark`` on can refer to it.
        """
        old = tensor.name
        renamed = dataclasses.replace(tensor, name=self.fresh(name), display=display)
        new = renamed.name
        self.tensors = {
            (new if k == old else k): (renamed if k == old else v) for k, v in self.tensors.items()
        }

        def swap(names):
            return tuple(new if n == old else n for n in names)

        for k in range(mark, len(self.nodes)):
            node = self.nodes[k]
            if isinstance(node, OpNode):
                attrs = dict(node.attrs)
                for key in ("reads", "writes"):
                    if key in attrs:
                        attrs[key] = type(attrs[key])(swap(attrs[key]))
                self.nodes[k] = dataclasses.replace(
                    node,
                    inputs=swap(node.inputs),
                    output=new if node.output == old else node.output,
                    after=swap(node.after),
                    attrs=attrs,
                )
            elif isinstance(node, CallbackNode) and node.after == old:
                self.nodes[k] = dataclasses.replace(node, after=new)
            elif isinstance(node, HostCopyNode) and node.tensor == old:
                self.nodes[k] = dataclasses.replace(node, tensor=new)
        return renamed

    def emit(self, node: Node) -> None:
        self.nodes.append(node)
        if len(self.nodes) > self.max_nodes:
            raise ProgramTooLarge(
                CheckError(
                    f"the program expands to more than {self.max_nodes:,} operations",
                    getattr(node, "span", None),
                    hint="loops are unrolled and functions inlined at compile time; "
                    "lower the loop bounds or parameters",
                )
            )


def _short_type(type_: TensorType, limit: int = 60) -> str:
    text = str(type_)
    return text if len(text) <= limit else text[: limit - 3] + "..."
