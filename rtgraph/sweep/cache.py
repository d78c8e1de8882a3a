"""Point results on disk, content-addressed: the same computation is never run twice.

A point's address is the sha256 of everything its result depends on — the program text, the
parameters, the compile options, the device spec's data, the run's settings (numerics, seed)
and the rtgraph code (:func:`code_version`: the version and a hash of the package's sources,
so an edited checkout does not reuse an old result) — and its result is one JSON file,
``CACHE/ab/abcdef….json``, written whole or not at all (:func:`rtgraph.files.write_atomic`). A
sweep killed at any moment leaves complete results and nothing else; the next run reads them
and computes the rest, and no point is lost or counted twice.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from functools import cache
from pathlib import Path

import rtgraph
from rtgraph.compiler.options import CompileOptions
from rtgraph.device.spec import DeviceSpec
from rtgraph.files import write_atomic
from rtgraph.frontend.parser import grammar_text


@cache
def code_version() -> str:
    """``VERSION+HASH``: rtgraph's version and a hash of its sources, specs and grammar.

    The same code gives the same hash from a source checkout and from an install of it: the
    grammar (``grammars/`` in a checkout, the package ``rtgraph.grammars`` once installed) is
    hashed by its text, wherever it was found, and not as files under the package."""
    root = Path(rtgraph.__file__).parent
    digest = hashlib.sha256()
    for path in sorted([*root.rglob("*.py"), *root.rglob("*.toml")]):
        relative = path.relative_to(root)
        if relative.parts[0] in ("grammars", "__pycache__"):
            continue
        digest.update(str(relative).encode("utf-8") + b"\0")
        digest.update(path.read_bytes())
    digest.update(grammar_text().encode("utf-8"))
    return f"{rtgraph.__version__}+{digest.hexdigest()[:12]}"


def options_data(options: CompileOptions) -> dict[str, object]:
    """The options as JSON data (the device is hashed on its own; a compile's calibration
    weights are the program's, which the program text covers)."""
    skip = ("device", "calibration_params")
    return {
        f.name: getattr(options, f.name) for f in dataclasses.fields(options) if f.name not in skip
    }


def device_data(spec: DeviceSpec) -> dict:
    return dataclasses.asdict(spec)


def content_key(
    text: str,
    params: dict[str, int],
    options: CompileOptions,
    spec: DeviceSpec | None,
    run: dict[str, object],
) -> str:
    """The sha256 (hex) addressing one point's result (see the module docstring)."""
    data = {
        "program": text,
        "params": params,
        "options": options_data(options),
        "device": device_data(spec) if spec is not None else None,
        "run": run,
        "rtgraph": code_version(),
    }
    blob = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResultCache:
    """Results by content key under ``folder`` (created on the first write)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    def path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        """The stored result, or None (never stored, or unreadable: computed again)."""
        try:
            return json.loads(self.path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None

    def put(self, key: str, result: dict) -> Path:
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_atomic(path, json.dumps(result, sort_keys=True, indent=1) + "\n")
