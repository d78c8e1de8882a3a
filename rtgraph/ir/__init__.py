"""The checked program — the IR — and the reference interpreter that defines what it means.

:mod:`.graph` holds the IR's types (a table of tensors and a list of nodes in program order),
:mod:`.printing` its readable listing, :mod:`.interpreter` the oracle every compiled run is
compared with, :mod:`.data` the seeded values of inputs and params and the checks of supplied
ones, and :mod:`.npz` the reading of ``.npz`` files as untrusted data.
"""

from rtgraph.dtypes import TensorType
from rtgraph.ir.graph import (
    UNITS,
    AllocHint,
    BarrierNode,
    CallbackNode,
    Node,
    OpNode,
    Program,
    RecordNode,
    SyncNode,
    Tensor,
    TensorKind,
    Unit,
    WaitNode,
)
from rtgraph.ir.interpreter import evaluate
from rtgraph.ir.printing import format_program

__all__ = [
    "UNITS",
    "AllocHint",
    "BarrierNode",
    "CallbackNode",
    "Node",
    "OpNode",
    "Program",
    "RecordNode",
    "SyncNode",
    "Tensor",
    "TensorKind",
    "TensorType",
    "Unit",
    "WaitNode",
    "evaluate",
    "format_program",
]
