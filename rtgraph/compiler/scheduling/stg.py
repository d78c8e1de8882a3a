"""Reader for the Standard Task Graph Set (STG) files of Kasahara Lab (Tobita & Kasahara, 2002).

The STG set is the public benchmark with known optimal makespans that judges the list scheduler
(see ``benchmarks/schedule_quality_stg.py``). A file without communication costs reads::

    n                                   (real tasks; some copies count the two dummies too)
    <id> <time> <npreds> <pred> ...     (one line per task id 0 .. n+1, fixed-width fields)
    # comment lines (generator, seeds, CP length, ...)

Task 0 is the entry dummy and the last task the exit dummy, both of time 0. They are kept, as
zero-duration jobs, so that job ``i`` is task ``i`` of the file and the makespan is unchanged.
Because the first line of some copies is not trustworthy, the task lines are read until the end
of the file or the first ``#`` line, and their ids must run 0, 1, 2, ... .
"""

from __future__ import annotations

from os import PathLike
from pathlib import Path

from rtgraph.compiler.scheduling.list_scheduler import Job
from rtgraph.errors import InputError

STG_UNIT = "cpu"


def read_stg(path: str | PathLike[str]) -> list[Job]:
    """The jobs of an STG file: unit ``"cpu"``, demand 1, dummies kept with duration 0."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise InputError(
            f"cannot read STG file '{path}': {e.strerror or e}",
            hint="check the path; STG files live under ../shared/benchmarks/stg",
        ) from None
    return parse_stg(text, name=str(path))


def parse_stg(text: str, *, name: str = "<stg>") -> list[Job]:
    """The jobs of STG text (see :func:`read_stg`); ``name`` is used in error messages."""
    lines = [line.split() for line in text.splitlines()]
    rows = [words for words in lines if words]
    if not rows or rows[0][0].startswith("#"):
        raise InputError(f"{name}: empty STG file", hint="the first line must be the task count")
    jobs: list[Job] = []
    for lineno, words in enumerate(lines[1:], start=2):
        if not words:
            continue
        if words[0].startswith("#"):
            break
        jobs.append(_task_line(words, lineno, len(jobs), name))
    if len(jobs) < 2:
        raise InputError(
            f"{name}: {len(jobs)} task line(s); an STG graph has at least the two dummy tasks",
            hint="task lines read '<id> <time> <npreds> <pred> ...' after the count line",
        )
    bad = [p for job in jobs for p in job.preds if p >= len(jobs)]
    if bad:
        raise InputError(
            f"{name}: predecessor {bad[0]} does not exist (tasks are 0..{len(jobs) - 1})",
            hint="the file may be truncated",
        )
    return jobs


def _task_line(words: list[str], lineno: int, expected_id: int, name: str) -> Job:
    where = f"{name}:{lineno}"
    try:
        numbers = [int(w) for w in words]
    except ValueError:
        raise InputError(
            f"{where}: task line has a non-integer field: {' '.join(words)!r}",
            hint="STG fields are whole numbers",
        ) from None
    if len(numbers) < 3:
        raise InputError(
            f"{where}: task line needs '<id> <time> <npreds>', got {len(numbers)} field(s)",
        )
    task_id, time, npreds, preds = numbers[0], numbers[1], numbers[2], numbers[3:]
    if task_id != expected_id:
        raise InputError(
            f"{where}: expected task id {expected_id}, got {task_id}",
            hint="task lines must be numbered 0, 1, 2, ... in order",
        )
    if time < 0:
        raise InputError(f"{where}: task {task_id} has negative processing time {time}")
    if npreds != len(preds):
        raise InputError(
            f"{where}: task {task_id} says {npreds} predecessor(s) but lists {len(preds)}",
        )
    if any(p < 0 or p == task_id for p in preds):
        raise InputError(f"{where}: task {task_id} has an invalid predecessor in {preds}")
    return Job(duration=float(time), unit=STG_UNIT, preds=tuple(preds))
