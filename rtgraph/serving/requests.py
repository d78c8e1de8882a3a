"""What serving's inputs share: the error they raise, where in a flag or file it points, and
how a duration is written (``10ms``, ``0.5s``, ``200us``)."""

from __future__ import annotations

import re

from rtgraph.errors import InputError, Source, Span, UsageError


class ServingError(InputError):
    """A serving input (a trace, a flag's value, an SLO, a KV-cache size) that cannot work."""


def located(name: str, text: str, line: int = 1, col: int = 1, width: int = 0) -> Span:
    """The span of ``width`` characters at ``line``:``col`` of ``text`` (shown under ``name``)."""
    return Span(Source(name, text), line, col, line, col + max(width, 1))


def flag_span(flag: str, value: str, start: int = 0, width: int | None = None) -> Span:
    """A span into a flag's value, so an error underlines the part that is wrong."""
    text = f"{flag} {value}"
    col = len(flag) + 2 + start
    return located("<command line>", text, 1, col, len(value) - start if width is None else width)


_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(us|µs|ms|s|min)?\s*$")
_UNIT_S = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, None: 1.0}


def parse_duration(text: str, flag: str = "--duration", full: str | None = None) -> float:
    """Seconds from ``10ms``, ``0.5s``, ``200us``, ``2min`` or a bare number of seconds."""
    m = _DURATION.match(text)
    if not m:
        whole = full if full is not None else text
        start = whole.find(text) if text else 0
        raise UsageError(
            f"{flag} {whole}: {text!r} is not a duration",
            flag_span(flag, whole, max(start, 0), max(len(text), 1)),
            hint="a number with a unit: 200us, 10ms, 0.5s, 2min (bare numbers are seconds)",
        )
    return float(m[1]) * _UNIT_S[m[2]]


def flag_error(flag: str, value: str, problem: str, hint: str, start: int = 0, width=None):
    """A malformed flag value: a usage error (exit status 2) underlining the wrong part."""
    return UsageError(f"{flag} {value}: {problem}", flag_span(flag, value, start, width), hint)
