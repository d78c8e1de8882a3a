"""The .rtg grammar (``rtg.lark``), installed with rtgraph as the package ``rtgraph.grammars``."""
