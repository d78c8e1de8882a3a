"""``python -m rtgraph`` is the ``rtgraph`` command."""

from rtgraph.cli import main

raise SystemExit(main())
