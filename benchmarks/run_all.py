"""Run every benchmark script and write benchmarks/README.md with their latest output.

Each script runs as its own subprocess (``python benchmarks/NAME.py ARGS``, one BLAS thread),
in the order of :data:`SCRIPTS`; its standard output goes into the README under its name with
the exact command, the wall time it took and its exit status. A script that fails is recorded
as failed (with the end of its error output) and the others still run. The headline table
(``python -m rtgraph.bench models/``, the same as ``rtgraph bench models/``) comes first.
With ``--only``, the chosen sections (and their rows of the status table) replace the same
sections of the existing README, or are added there in this order if it lacks them; the other
sections stay as they were.

Usage: python benchmarks/run_all.py [--quick] [--only NAME,NAME] [--output PATH]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rtgraph.bench import machine_note  # noqa: E402

#: (name, command after the interpreter, command with --quick, what it measures)
SCRIPTS: tuple[tuple[str, list[str], list[str], str], ...] = (
    (
        "headline",
        ["-m", "rtgraph.bench", "models/"],
        ["-m", "rtgraph.bench", "models/"],
        "streams, memory plan and allocation on every bundled model (emulated clock)",
    ),
    (
        "schedule_quality_models",
        ["benchmarks/schedule_quality_models.py"],
        ["benchmarks/schedule_quality_models.py"],
        "makespan ÷ lower bound per model and stream policy",
    ),
    (
        "memory_quality",
        ["benchmarks/memory_quality.py"],
        ["benchmarks/memory_quality.py"],
        "greedy plan ÷ max-live lower bound per model; the stream-ordered plan beside it",
    ),
    (
        "compile_scaling",
        ["benchmarks/compile_scaling.py", "--repeat", "2"],
        ["benchmarks/compile_scaling.py", "--sizes", "1000,10000"],
        "compile time per task and timing-only emulation at 1k/10k/100k tasks",
    ),
    (
        "optimizer_compile_time",
        ["benchmarks/optimizer_compile_time.py", "--repeat", "2"],
        ["benchmarks/optimizer_compile_time.py", "--sizes", "10000", "--repeat", "1"],
        "compile time at -O2 against -O0 at 10k and 100k tasks (target: at most 1.5×)",
    ),
    (
        "simulate_overhead",
        ["benchmarks/simulate_overhead.py"],
        ["benchmarks/simulate_overhead.py", "--repeat", "1"],
        "numeric run vs a task loop doing the same data work (same tasks, same device memory); "
        "per-task overhead on tiny kernels, Dask beside it",
    ),
    (
        "run_check",
        ["benchmarks/run_check.py"],
        ["benchmarks/run_check.py", "--repeat", "1"],
        "`rtgraph run models/attention.rtg` in CPU seconds with each check mode, against one "
        "reference evaluation",
    ),
    (
        "simulate_speed",
        ["benchmarks/simulate_speed.py"],
        ["benchmarks/simulate_speed.py", "--quick"],
        "the emulator alone in tasks per second, the whole pipeline (parse, compile, emulate) "
        "for the same programs, and numeric overhead",
    ),
    (
        "peers",
        ["benchmarks/peers.py"],
        ["benchmarks/peers.py", "--quick"],
        "rtgraph's whole pipeline against a SimPy model of the same device and Dask's threaded "
        "scheduler on one random layered DAG, with issue 14's ratios",
    ),
    (
        "schedule_quality_stg",
        ["benchmarks/schedule_quality_stg.py"],
        ["benchmarks/schedule_quality_stg.py", "--budget", "20000"],
        "list scheduler against the STG optimal schedules",
    ),
    (
        "streams_per_core",
        ["benchmarks/streams_per_core.py"],
        ["benchmarks/streams_per_core.py", "--instances", "20"],
        "by-unit:N (N = the cores) and list against exact optima on random single-core DAGs",
    ),
    (
        "onnx_conformance",
        ["benchmarks/onnx_conformance.py"],
        ["benchmarks/onnx_conformance.py", "--no-timing"],
        "ONNX's backend test models imported and run against the outputs ONNX ships",
    ),
    (
        "memory_planning",
        ["benchmarks/memory_planning.py"],
        ["benchmarks/memory_planning.py", "--method", "fast"],
        "static memory planner on the MiniMalloc instances",
    ),
    (
        "minimalloc_peer",
        ["benchmarks/minimalloc_peer.py"],
        ["benchmarks/minimalloc_peer.py", "--time-limit", "6"],
        "the exact planner against MiniMalloc's solver ($MINIMALLOC_BIN), in turn",
    ),
    (
        "allocators",
        ["benchmarks/allocators.py"],
        ["benchmarks/allocators.py", "--quick"],
        "run-time allocators: latency and fragmentation on replayed traces",
    ),
    (
        "parse_speed",
        ["benchmarks/parse_speed.py"],
        ["benchmarks/parse_speed.py"],
        "front-end lines per second",
    ),
    (
        "render_timeline",
        ["benchmarks/render_timeline.py"],
        ["benchmarks/render_timeline.py", "--quick"],
        "time to draw timeline pictures",
    ),
    (
        "serving",
        ["benchmarks/serving.py"],
        ["benchmarks/serving.py", "--quick"],
        "rtgraph serve: a 100k-request 10-minute trace's run time; batching and merging on the "
        "image model; decoder capacity per policy under an SLO; continuous (chunked prefill) "
        "against static batching at equal P99 TBT",
    ),
    (
        "precision",
        ["benchmarks/precision.py"],
        ["benchmarks/precision.py", "--quick"],
        "f32 / f16 / int8 / auto on the UNet block and the naive transformer: speed against f32, "
        "error against the f32 program (issue 17: auto ≥ 1.4× at cosine ≥ 0.999)",
    ),
    (
        "scaling",
        ["benchmarks/scaling.py"],
        ["benchmarks/scaling.py", "--quick"],
        "one step over 1, 2, 4, 8 devices of ascend-910b-x8 under data, pipeline (8 "
        "micro-batches, 1F1B) and tensor parallelism: speedup and efficiency against linear, "
        "bubble, link traffic, memory per device (issue 20)",
    ),
    (
        "graph_replay",
        ["benchmarks/graph_replay.py"],
        ["benchmarks/graph_replay.py"],
        "a decode step's ops captured once and replayed 64 times against eager submission: host "
        "time and makespan per step (issue 18)",
    ),
    (
        "matmul_row_blocks",
        ["benchmarks/matmul_row_blocks.py"],
        ["benchmarks/matmul_row_blocks.py"],
        "the price of row-stable matmuls: calls of row_block(rows) rows against calls cut at "
        "the product's own rows (CPU time)",
    ),
    (
        "dynamic_shapes",
        ["benchmarks/dynamic_shapes.py"],
        ["benchmarks/dynamic_shapes.py"],
        "one compile for several sizes (a sequence range, gears, a batch range; runs between "
        "gears padded) against a static compile per size: CPU time, makespans, padding's share "
        "(issue 18)",
    ),
    (
        "sweep",
        ["benchmarks/sweep.py"],
        ["benchmarks/sweep.py", "--quick"],
        "rtgraph sweep: a 200-point sweep on the local Dask cluster against --workers 1 "
        "(wall time, speed-up, identical tables, load average)",
    ),
)


def run_one(command: list[str]) -> tuple[int, str, str, float]:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *command], cwd=ROOT, env=env, capture_output=True, text=True
    )
    return done.returncode, done.stdout, done.stderr, time.perf_counter() - start


def section(name: str, command: list[str], purpose: str, outcome) -> list[str]:
    code, out, err, seconds = outcome
    status = "ok" if code == 0 else f"FAILED (exit {code})"
    lines = [
        f"## {name}",
        "",
        f"{purpose}. Command: `python {' '.join(command)}` — {status}, {seconds:.1f} s.",
        "",
    ]
    # The script's own headings go two levels down, under this section's heading.
    text = "\n".join("##" + ln if ln.startswith("#") else ln for ln in out.strip().splitlines())
    if text:
        lines += [text, ""]
    if code != 0:
        tail = "\n".join(err.strip().splitlines()[-15:])
        lines += ["```", tail, "```", ""]
    return lines


def splice(readme: str, name: str, row: str, lines: list[str]) -> str:
    """``readme`` with section ``name`` and its row of the status table replaced — or, for a
    script the README does not have yet, added before the next script's (else at the end)."""
    marker = f"\n## {name}\n"
    if marker not in readme:
        return insert(readme, name, row, lines)
    start = readme.index(marker) + 1
    end = readme.find("\n## ", start)
    block = "\n".join(lines) + "\n"
    if end == -1:  # the last section: the file ends with one newline
        readme, block = readme.rstrip() + "\n", block.rstrip() + "\n"
        end = len(readme) - 1
    text = readme[:start] + block + readme[end + 1 :]
    prefix = f"| [{name}](#{name}) |"
    return "\n".join(row if ln.startswith(prefix) else ln for ln in text.split("\n"))


def insert(readme: str, name: str, row: str, lines: list[str]) -> str:
    """``readme`` with a new section ``name`` and its status row, in :data:`SCRIPTS` order."""
    names = [s[0] for s in SCRIPTS]
    later = [n for n in names[names.index(name) + 1 :] if f"\n## {n}\n" in readme]
    block = "\n".join(lines) + "\n"
    if later:
        at = readme.index(f"\n## {later[0]}\n") + 1
        readme = readme[:at] + block + readme[at:]
        before = f"| [{later[0]}](#{later[0]}) |"
        return "\n".join(
            f"{row}\n{ln}" if ln.startswith(before) else ln for ln in readme.split("\n")
        )
    readme = readme.rstrip() + "\n\n" + block.rstrip() + "\n"
    rows = [k for k, ln in enumerate(readme.split("\n")) if ln.startswith("| [")]
    text = readme.split("\n")
    text.insert(rows[-1] + 1 if rows else 0, row)
    return "\n".join(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes where scripts allow")
    parser.add_argument("--only", help="comma-separated script names")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "README.md"))
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None
    chosen = [s for s in SCRIPTS if only is None or s[0] in only]
    unknown = (only or set()) - {s[0] for s in SCRIPTS}
    if unknown:
        parser.error(f"unknown script(s): {', '.join(sorted(unknown))}")

    head = [
        "# Benchmarks",
        "",
        "Written by `python benchmarks/run_all.py"
        + (" --quick" if args.quick else "")
        + "`, which runs each script below as a subprocess",
        "(one BLAS thread) and pastes its output. Emulated figures (makespans, utilization, bytes)",
        "do not depend on the machine; wall-clock figures do. Regenerate after changing the",
        "compiler, the emulator or a model.",
        "",
        f"Machine: {machine_note().replace('default', '1')}.",
        "",
        "| script | status | seconds |",
        "|---|---|---:|",
    ]
    body: list[str] = []
    output = Path(args.output)
    spliced = output.read_text() if only and output.exists() else None
    for name, full, quick, purpose in chosen:
        command = quick if args.quick else full
        print(f"run_all: {name} …", file=sys.stderr, flush=True)
        outcome = run_one(command)
        row = f"| [{name}](#{name}) | {'ok' if outcome[0] == 0 else 'FAILED'} | {outcome[3]:.1f} |"
        head.append(row)
        lines = section(name, command, purpose, outcome)
        body += lines
        if spliced is not None:
            spliced = splice(spliced, name, row, lines)
    text = spliced if spliced is not None else "\n".join([*head, "", *body]).rstrip() + "\n"
    output.write_text(text)
    print(f"run_all: wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
