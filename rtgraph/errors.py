"""Every error rtgraph reports, and the one renderer that shows them.

A user mistake is never a Python traceback: it is an :class:`RtgError` carrying the source
span it is about and, where one helps, a hint. ``render()`` gives the compiler-style text::

    models/bad.rtg:7:9: error: unknown op 'sofmax'
        p = sofmax(q @ k, axis=-1)
            ^^^^^^
    hint: did you mean 'softmax'?

Errors found together (a checker reports every independent mistake in one run) travel as one
:class:`RtgErrors`, whose members are kept in source order.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property


@dataclass(frozen=True, eq=False)
class Source:
    """A source text and the name it is reported under."""

    name: str
    text: str

    @cached_property
    def _lines(self) -> list[str]:
        # Only "\n" ends a line (as for the lexer): str.splitlines() would also split on
        # form feeds and Unicode separators inside comments and show the wrong line. Split once:
        # a hundred errors in a large file must not split it a hundred times.
        return self.text.split("\n")

    def line(self, lineno: int) -> str:
        lines = self._lines
        return lines[lineno - 1].rstrip("\r") if 1 <= lineno <= len(lines) else ""


@dataclass(frozen=True)
class Span:
    """A 1-based, end-exclusive region of a source: where a construct was written."""

    source: Source | None = field(compare=False, repr=False)
    line: int
    col: int
    end_line: int
    end_col: int

    @property
    def file(self) -> str:
        return self.source.name if self.source is not None else "<unknown>"

    def text_line(self) -> str:
        return self.source.line(self.line) if self.source is not None else ""

    def to(self, other: Span) -> Span:
        """The span from the start of ``self`` to the end of ``other``."""
        return Span(self.source, self.line, self.col, other.end_line, other.end_col)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"

    def to_json(self) -> dict:
        return {
            "file": self.file,
            "line": self.line,
            "col": self.col,
            "end_line": self.end_line,
            "end_col": self.end_col,
            "text": self.text_line(),
        }


#: The widest excerpt of a source line an error shows; a longer line is cut to a window that
#: starts a little before the span (so a 100,000-character line gives a short message).
SHOWN_WIDTH = 160
_LEAD = 40


def highlight(span: Span) -> str:
    """The source line of ``span`` with a caret (or an underline for a wider span) under it."""
    raw = span.text_line()
    if not raw and span.source is None:
        return ""
    text = raw.expandtabs(4)
    # Columns count characters of the raw line; tabs widen both the line and the caret indent.
    start = len(raw[: span.col - 1].expandtabs(4))
    end = len(raw[: span.end_col - 1].expandtabs(4)) if span.end_line == span.line else len(text)
    if len(text) > SHOWN_WIDTH:
        left = max(0, min(start - _LEAD, len(text) - SHOWN_WIDTH))
        head = "…" if left else ""
        tail = "…" if left + SHOWN_WIDTH < len(text) else ""
        text = f"{head}{text[left : left + SHOWN_WIDTH]}{tail}"
        start, end = start - left + len(head), min(end - left, SHOWN_WIDTH) + len(head)
    marker = "^" * max(1, end - start)
    return f"    {text}\n    {' ' * start}{marker}"


class RtgError(Exception):
    """Base of every error rtgraph raises for bad input: located, explained, hinted."""

    kind = "error"

    def __init__(self, message: str, span: Span | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.span = span
        self.hint = hint

    def render(self) -> str:
        head = f"{self.span}: " if self.span is not None else ""
        parts = [f"{head}{self.kind}: {self.message}"]
        if self.span is not None:
            shown = highlight(self.span)
            if shown:
                parts.append(shown)
        if self.hint:
            parts.append(f"    hint: {self.hint}")
        return "\n".join(parts)

    def __str__(self) -> str:
        return self.render()


class RtgErrors(RtgError):
    """Several independent errors found in one run, in source order."""

    def __init__(self, errors: Iterable[RtgError]) -> None:
        ordered = sorted(errors, key=_source_order)
        if not ordered:
            raise ValueError("RtgErrors needs at least one error")
        first = ordered[0]
        super().__init__(first.message, first.span, first.hint)
        self.errors: list[RtgError] = ordered

    def render(self) -> str:
        return "\n".join(e.render() for e in self.errors)


def _source_order(error: RtgError) -> tuple:
    s = error.span
    return (0, s.file, s.line, s.col) if s is not None else (1, "", 0, 0)


def raise_all(errors: Sequence[RtgError]) -> None:
    """Raise nothing, the one error, or all of them together."""
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise RtgErrors(errors)


def did_you_mean(name: str, candidates: Iterable[str]) -> str | None:
    """A hint naming the closest candidate, or None when nothing is close."""
    close = difflib.get_close_matches(name, sorted(set(candidates)), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else None


# --- the kinds of error, by the stage that finds them -------------------------------------


class UsageError(RtgError):
    """The command line was used wrongly (exit status 2)."""


class RtgSyntaxError(RtgError):
    """The text is not a program in the .rtg grammar."""


class CheckError(RtgError):
    """The program parses but means nothing: names, arguments, shapes, dtypes, streams."""


class ShapeError(CheckError):
    """Operand shapes do not fit the op's rule."""


class DTypeError(CheckError):
    """Operand element types do not fit the op's rule."""


class CapacityError(CheckError):
    """A tensor or buffer cannot fit in host or device memory."""


class InputError(RtgError):
    """Run-time data (inputs, params, .npz files) missing or of the wrong shape or dtype."""


class DeviceSpecError(RtgError):
    """A device spec file is malformed, unknown, or incompatible with this runtime."""


class ClusterSpecError(RtgError):
    """A cluster spec file is malformed or unknown, or describes a cluster that cannot exist."""


class StreamProgramError(RtgError):
    """A compiled stream program (e.g. loaded from JSON) is malformed."""


class RaceError(RtgError):
    """Conflicting accesses to device memory are not ordered by happens-before."""


class DeviceError(RtgError):
    """The emulated device failed while running: a kernel fault, a bad wait, a deadlock."""


class DeadlockError(DeviceError):
    """A wait can never be satisfied."""


class KernelFault(DeviceError):
    """A task's kernel failed (an injected fault or a non-finite result under --check-finite)."""


class OutOfMemoryError(RtgError):
    """An allocator could not serve a request."""


class PrecisionWarning(UserWarning):
    """The precision pass could not do what was asked and did something safer (the message
    says what and why); the command line prints it as ``warning: …``."""
