"""The graph optimizer: passes from checked IR to checked IR, run before lowering.

Each pass is one module holding one function ``name(program, options) -> Program`` that returns
a new program (the one it was given is untouched) and says in its docstring what it preserves.
:data:`~rtgraph.compiler.optimizer.levels.PASSES` lists them in pipeline order;
``options.opt_level`` (``-O0``/``-O1``/``-O2``) or ``options.passes`` (``--passes a,b``) choose
which run. A program with explicit streams is the user's own schedule: the optimizer leaves it
as written.
"""
