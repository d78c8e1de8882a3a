"""How long a timeline picture takes: building the figure, and writing it as PNG (and SVG).

The program is synthetic: N tasks on 4 streams (stream i runs cube, vector, dma, vector work),
with a record/wait hand-off from each stream to the next every 8 tasks, block dims of 1–2 and
a region per 16 tasks for the memory strip. It runs in timing-only mode on the shipped ``toy``
device. The picture is drawn with the memory strip and the default label limit.

Run: ``python benchmarks/render_timeline.py [--quick] [--sizes 250 1000 4000]``. Wall-clock
numbers depend on the machine; the script prints them, no test asserts them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rtgraph.device import load_device
from rtgraph.emulator import run
from rtgraph.reports.timeline import plot_timeline, save_figure
from rtgraph.stream_program import (
    Launch,
    MemoryPlan,
    Record,
    Region,
    StreamInfo,
    StreamProgram,
    Task,
    Wait,
    validate,
)

STREAM_UNITS = ("cube", "vector", "dma", "vector")
OPS = {"cube": "matmul", "vector": "relu", "dma": "copy"}


def synthetic(n: int, streams: int = 4) -> StreamProgram:
    """``n`` synthetic tasks round-robin over ``streams`` streams, with event hand-offs."""
    tasks: list[Task] = []
    commands: list = []
    events = 0
    regions: dict[str, Region] = {}
    slot = 4096
    for i in range(n):
        s = i % streams
        unit = STREAM_UNITS[s % len(STREAM_UNITS)]
        if i >= streams and i % 8 == 0:
            # the previous stream hands this one its latest result
            commands.append(Record((s - 1) % streams, events))
            commands.append(Wait(s, events))
            events += 1
        tasks.append(
            Task(
                id=i,
                name=f"{OPS[unit]}{i}",
                op="kernel",
                unit=unit,
                inputs=(),
                output=None,
                reads=(),
                writes=(),
                duration_us=float(1 + (i * 7) % 5),
                block_dim=1,
                attrs={"unit": unit, "us": float(1 + (i * 7) % 5)},
            )
        )
        commands.append(Launch(s, i))
        if i % 16 == 0:
            name = f"r{i}"
            regions[name] = Region(name, (i // 16) % 8 * slot, slot, "value", i, min(i + 40, n - 1))
    program = StreamProgram(
        name=f"synthetic{n}",
        device="toy",
        streams=[StreamInfo(k, f"s{k}") for k in range(streams)],
        tasks=tasks,
        commands=commands,
        memory=MemoryPlan("static", regions, 8 * slot, 64),
        host_tensors=[],
        num_events=events,
    )
    validate(program)
    return program


def measure(n: int, svg: bool) -> dict[str, float]:
    program = synthetic(n)
    result = run(program, load_device("toy"), numerics=False)
    t0 = time.perf_counter()
    fig = plot_timeline(result, program)
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        save_figure(fig, Path(folder) / "t.png")
        t2 = time.perf_counter()
        if svg:
            save_figure(fig, Path(folder) / "t.svg")
        t3 = time.perf_counter()
    return {
        "tasks": n,
        "waits": len(result.event_waits),
        "build": t1 - t0,
        "png": t2 - t1,
        "svg": t3 - t2 if svg else float("nan"),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the 1,000-task program")
    parser.add_argument("--sizes", type=int, nargs="+", default=[250, 1000, 4000])
    parser.add_argument("--svg", action="store_true", help="also time writing an SVG")
    args = parser.parse_args(argv)
    sizes = [1000] if args.quick else args.sizes
    print(f"{'tasks':>6} {'waits':>6} {'build s':>8} {'save-png s':>11} {'save-svg s':>11}")
    for n in sizes:
        row = measure(n, args.svg)
        print(
            f"{row['tasks']:>6} {row['waits']:>6} {row['build']:>8.3f} {row['png']:>11.3f} "
            f"{row['svg']:>11.3f}"
        )


if __name__ == "__main__":
    main()
