"""The ``rtgraph`` command line.

Exit status: 0 success, 1 a user error in the input (reported as ``file:line:col: error: …``),
2 a usage error. Files are written whole or not at all (:func:`rtgraph.files.write_atomic`).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence

from rtgraph.cli.arguments import refuse_overwriting_inputs
from rtgraph.cli.commands import COMMANDS
from rtgraph.cli.parser import build_parser
from rtgraph.errors import PrecisionWarning, RtgError, UsageError
from rtgraph.files import exit_on_sigterm

__all__ = ["build_parser", "main"]


def _show_warning(message, category, *_: object, **__: object) -> None:
    """A warning as one line on stderr (``rtgraph: warning: …``), not Python's source echo."""
    print(f"rtgraph: warning: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``rtgraph`` command; returns its exit status. SIGTERM ends it the way Ctrl-C
    does, removing any output it was writing (:func:`rtgraph.files.exit_on_sigterm`)."""
    exit_on_sigterm()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        refuse_overwriting_inputs(args)
        with warnings.catch_warnings():
            warnings.simplefilter("always", PrecisionWarning)
            warnings.showwarning = _show_warning
            return COMMANDS[args.command](args)
    except UsageError as e:
        print(e.render(), file=sys.stderr)
        return 2
    except RtgError as e:
        print(e.render(), file=sys.stderr)
        return 1
    except RecursionError:
        print("rtgraph: error: input nested too deeply", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
