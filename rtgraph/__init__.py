"""rtgraph: compile and run operator programs on an emulated NPU.

Source → AST → IR (:mod:`rtgraph.ir`) → task DAG (:mod:`rtgraph.compiler.taskgraph`) → passes
(:mod:`rtgraph.compiler`) → stream program (:mod:`rtgraph.stream_program`) → emulator →
results → reports. The functions below run one stage each; see :mod:`rtgraph.api`.
"""

from rtgraph.api import (
    as_checked,
    bind_gear,
    check_ranges,
    choose_gear,
    compare,
    compile,
    compile_gears,
    device,
    load,
    parse,
    reference,
    run,
)
from rtgraph.errors import RtgError, RtgErrors
from rtgraph.ir import Program, evaluate, format_program
from rtgraph.stream_program import StreamProgram

__version__ = "0.1.0"

__all__ = [
    "Program",
    "RtgError",
    "RtgErrors",
    "StreamProgram",
    "__version__",
    "as_checked",
    "bind_gear",
    "check_ranges",
    "choose_gear",
    "compare",
    "compile",
    "compile_gears",
    "device",
    "evaluate",
    "format_program",
    "load",
    "parse",
    "reference",
    "run",
]
