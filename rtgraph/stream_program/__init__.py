"""The stream program: the contract between the compiler and the emulator.

:mod:`.program` holds its types and versioned JSON form (docs/stream-program.md) and
:mod:`.commands` the host's commands; :mod:`.tables` indexes the commands per stream (built
when a program is validated, kept on it); :mod:`.listing` prints it per stream (and as
Graphviz); :mod:`.hazards` finds the byte ranges two tasks both touch; :mod:`.races` proves
every conflicting pair ordered by happens-before; :mod:`.transfers` checks a cluster's
per-rank programs' messages and cross-device waits.
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
    derived,
    from_dict,
    stream_tables,
    to_dict,
    validate,
)
from rtgraph.stream_program.tables import StreamTables

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
    "StreamTables",
    "Sync",
    "Task",
    "Wait",
    "derived",
    "from_dict",
    "stream_tables",
    "to_dict",
    "validate",
]
