"""One module per compiler pass; :mod:`rtgraph.compiler.pipeline` runs them in order."""
