"""``python -m rtgraph.bench models/`` — the headline benchmark on its own."""

import sys

from rtgraph.bench.run import main

sys.exit(main())
