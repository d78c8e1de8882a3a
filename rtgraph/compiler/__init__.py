"""The compiler: IR → task DAG → passes → stream program.

:mod:`.taskgraph` is the DAG the passes share; :mod:`.passes` holds one module per pass;
:mod:`.scheduling` chooses streams and submission order (stream policies, the list scheduler
and its order search); :mod:`.memplan` packs tensors into one device pool; :mod:`.bounds`
gives makespan lower bounds. :mod:`.options` holds the one :class:`CompileOptions` every pass
takes; :mod:`.pipeline` runs the passes in order.
"""

from rtgraph.compiler.options import CompileOptions
from rtgraph.compiler.pipeline import compile_program

__all__ = ["CompileOptions", "compile_program"]
