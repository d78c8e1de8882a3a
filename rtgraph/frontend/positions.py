"""Positions as offsets: line and column computed only when something asks for them.

The parser knows where each token starts (an offset into the text); the line and column a
message shows are found from the offsets by a binary search over the line starts, which are
computed once per source, on the first question. :class:`SourceSpan` is the
:class:`~rtgraph.errors.Span` every AST node (and so every IR tensor and node) carries: it
holds its source's :class:`Lines` and two offsets, costs less than half a ``Span`` to make,
and reads exactly like one (``line``, ``col``, ``end_line``, ``end_col``, ``source``,
equality, hashing, rendering), so nothing downstream can tell them apart.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate

from rtgraph.errors import Source, Span


class Lines:
    """A source and the offsets where its lines start (only ``\\n`` ends a line, as for the
    tokenizer and :class:`~rtgraph.errors.Source`)."""

    __slots__ = ("_starts", "source")

    def __init__(self, source: Source) -> None:
        self.source = source
        self._starts: list[int] | None = None

    def line_col(self, offset: int) -> tuple[int, int]:
        """The 1-based line and column of the character at ``offset``."""
        starts = self._starts
        if starts is None:
            lengths = (len(line) + 1 for line in self.source.text.split("\n"))
            starts = self._starts = list(accumulate(lengths, initial=0))
        line = bisect_right(starts, offset)
        return line, offset - starts[line - 1] + 1

    def span(self, start: int, end: int) -> SourceSpan:
        return SourceSpan(self, start, end)


class SourceSpan(Span):
    """The text from offset ``start`` up to (not including) ``end``: a lazy :class:`Span`.

    Its end is the column after its last character, on that character's line (the end of a
    span that ends with a line break is on the line the break ends); an empty span (the end of
    the file) is one column wide.
    """

    __slots__ = ("_at", "_end", "_lines", "_start")

    def __init__(self, lines: Lines, start: int, end: int) -> None:
        # Span is frozen; its fields are properties here, computed from these three.
        _set_lines(self, lines)
        _set_start(self, start)
        _set_end(self, end)

    @property
    def source(self) -> Source:  # type: ignore[override]
        return self._lines.source

    @property
    def line(self) -> int:  # type: ignore[override]
        return self._position()[0]

    @property
    def col(self) -> int:  # type: ignore[override]
        return self._position()[1]

    @property
    def end_line(self) -> int:  # type: ignore[override]
        return self._position()[2]

    @property
    def end_col(self) -> int:  # type: ignore[override]
        return self._position()[3]

    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def end_offset(self) -> int:
        return self._end

    def _position(self) -> tuple[int, int, int, int]:
        try:
            return self._at
        except AttributeError:
            pass
        line, col = self._lines.line_col(self._start)
        if self._end > self._start:
            end_line, end_col = self._lines.line_col(self._end - 1)
            at = (line, col, end_line, end_col + 1)
        else:
            at = (line, col, line, col + 1)
        _set_at(self, at)
        return at

    def to(self, other: Span) -> Span:
        if isinstance(other, SourceSpan) and other._lines is self._lines:
            return SourceSpan(self._lines, self._start, other._end)
        return super().to(other)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Span):
            return NotImplemented
        return self._position() == (other.line, other.col, other.end_line, other.end_col)

    __hash__ = Span.__hash__

    def __repr__(self) -> str:
        line, col, end_line, end_col = self._position()
        return f"Span(line={line}, col={col}, end_line={end_line}, end_col={end_col})"


_set_lines = SourceSpan._lines.__set__  # type: ignore[attr-defined]
_set_start = SourceSpan._start.__set__  # type: ignore[attr-defined]
_set_end = SourceSpan._end.__set__  # type: ignore[attr-defined]
_set_at = SourceSpan._at.__set__  # type: ignore[attr-defined]
