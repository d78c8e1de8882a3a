"""``python -m rtgraph`` is the ``rtgraph`` command."""

from .cli import main

raise SystemExit(main())
