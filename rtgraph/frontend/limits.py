"""How large a program the front end takes, and how a user changes that.

Each limit is a module constant where it is checked (``MAX_SOURCE_BYTES`` in
:mod:`rtgraph.frontend`, ``MAX_TOKENS`` in :mod:`~rtgraph.frontend.lexer`, ``MAX_STEPS`` in
:mod:`~rtgraph.frontend.checker`, ``MAX_NODES`` in :mod:`~rtgraph.frontend.emit`), sized so that
a program at every limit parses and checks in well under the machine's memory (docs/language.md,
"Limits", has the measurements). An environment variable overrides a constant; it is read each
time a program is parsed, so it applies to the library and to the command line alike:

==============================  ==================  =============================================
variable                        constant            what it bounds
==============================  ==================  =============================================
``RTGRAPH_MAX_SOURCE_BYTES``    MAX_SOURCE_BYTES    bytes of a file, characters of a string
``RTGRAPH_MAX_TOKENS``          MAX_TOKENS          tokens of the text
``RTGRAPH_MAX_STEPS``           MAX_STEPS           statements, loop iterations and calls run
``RTGRAPH_MAX_OPS``             MAX_NODES           operations after unrolling and inlining
==============================  ==================  =============================================
"""

from __future__ import annotations

import os

from rtgraph.errors import UsageError

SOURCE_BYTES = "RTGRAPH_MAX_SOURCE_BYTES"
TOKENS = "RTGRAPH_MAX_TOKENS"
STEPS = "RTGRAPH_MAX_STEPS"
OPS = "RTGRAPH_MAX_OPS"


def effective(variable: str, default: int) -> int:
    """``default``, or the positive whole number the environment variable ``variable`` holds
    (``_`` may group digits: ``RTGRAPH_MAX_OPS=5_000_000``)."""
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise UsageError(
            f"{variable}={text!r} is not a positive whole number",
            hint=f"unset it to use the default limit ({default:,}), or set it to e.g. "
            f"{variable}={default * 2}",
        )
    return value
