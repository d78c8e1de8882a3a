"""The machine a wall-clock figure was measured on, for the benchmarks' output."""

from __future__ import annotations

import os
import platform

import numpy as np


def machine_note() -> str:
    """One line naming the machine a wall-clock figure was measured on."""
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "default")
    return (
        f"{platform.platform()}; {platform.machine()}, {os.cpu_count()} CPUs; "
        f"Python {platform.python_version()}, NumPy {np.__version__} (BLAS threads: {threads})"
    )
