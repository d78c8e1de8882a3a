"""rtgraph: compile and run operator programs on an emulated NPU.

Source → AST → IR (:mod:`rtgraph.ir`) → task DAG → passes → stream program
(:mod:`rtgraph.stream_program`) → emulator → results → reports.
"""

from .errors import RtgError

__version__ = "0.1.0"

__all__ = ["RtgError", "__version__"]
