"""The stream program: the contract between the compiler and the emulator.

:mod:`.program` holds its types and versioned JSON form (docs/stream-program.md);
:mod:`.listing` prints it per stream (and as Graphviz); :mod:`.hazards` finds the byte ranges
two tasks both touch; :mod:`.races` proves every conflicting pair ordered by happens-before.
"""

from rtgraph.stream_program.program import (
    COMMAND_TYPES,
    HOST_ONLY,
    SCHEMA,
    VERSION,
    Alloc,
    Barrier,
    Callback,
    Command,
    Free,
    HostTensor,
    Launch,
    MemoryPlan,
    Operand,
    Record,
    Region,
    StreamInfo,
    StreamProgram,
    Sync,
    Task,
    Wait,
    from_dict,
    to_dict,
    validate,
)

__all__ = [
    "COMMAND_TYPES",
    "HOST_ONLY",
    "SCHEMA",
    "VERSION",
    "Alloc",
    "Barrier",
    "Callback",
    "Command",
    "Free",
    "HostTensor",
    "Launch",
    "MemoryPlan",
    "Operand",
    "Record",
    "Region",
    "StreamInfo",
    "StreamProgram",
    "Sync",
    "Task",
    "Wait",
    "from_dict",
    "to_dict",
    "validate",
]
