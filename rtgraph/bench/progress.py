"""The bench's progress bar: redrawn in place on a terminal, a line per model elsewhere."""

from __future__ import annotations

from typing import TextIO


class Progress:
    """A plain-text progress bar over ``total`` steps, written to ``out`` when ``show``."""

    WIDTH = 24

    def __init__(self, total: int, out: TextIO, show: bool) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.out = out
        self.show = show
        self.tty = show and out.isatty()

    def model(self, name: str) -> None:
        """A new model starts (a line of its own when not on a terminal)."""
        if self.show and not self.tty:
            print(f"bench: [{self.done}/{self.total}] {name}", file=self.out, flush=True)

    def step(self, label: str) -> None:
        """One more run is under way (redraws the bar on a terminal)."""
        self.advance(1, label)

    def advance(self, steps: int, label: str) -> None:
        """``steps`` more runs are done or under way (a whole model, from a worker process)."""
        self.done += steps
        if self.tty:
            filled = self.WIDTH * self.done // self.total
            bar = "#" * filled + "." * (self.WIDTH - filled)
            self.out.write(f"\r[{bar}] {self.done}/{self.total} {label[:48]:<48}")
            self.out.flush()

    def finish(self) -> None:
        if self.tty:
            self.out.write("\n")
            self.out.flush()
        elif self.show:
            print(f"bench: [{self.total}/{self.total}] done", file=self.out, flush=True)
