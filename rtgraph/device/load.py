"""The one device-spec loader: find a spec by name or path, read it, merge what it ``extends``.

A device is data. rtgraph ships a few specs as package data (``rtgraph/device/specs/*.toml``) and
reads a user's spec from a path; a spec may ``extends`` another (a shipped name or a path
relative to the extending file) and override single keys, tables merging deeply. The loader
remembers which file each key came from, so :func:`~rtgraph.device.schema.build_spec` can blame
a bad value on the file that wrote it. Which file a name means is decided in one place,
:func:`_resolve`. Every key is documented in ``docs/devices.md``.

Only the user points at files. A program's ``device "NAME"``, a stream program's ``"device"``
and a spec's ``extends`` *name* a device: a shipped spec, or ``NAME.toml`` in a folder of
``RTGRAPH_DEVICE_PATH`` (``extends`` also looks beside the extending spec) — never a path, so a
program cannot make rtgraph open ``/etc/shadow`` or ``/dev/zero``. A path is taken only where
the user gives one (``--device PATH.toml``, ``rtgraph.device(path)``,
``rtgraph.runtime.set_device(path)``), and every file read must be a regular ``.toml`` file of at
most :data:`MAX_SPEC_BYTES`, checked before a byte is read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from rtgraph.device.document import (
    COMPAT_FILE,
    PACKAGE,
    Doc,
    Origins,
    located_error,
    packaged_doc,
    parse_toml,
    read_capped_toml,
)
from rtgraph.device.schema import Checker, build_spec, show_value
from rtgraph.device.spec import DeviceSpec
from rtgraph.errors import DeviceSpecError, did_you_mean

# --- loading -------------------------------------------------------------------------------


#: The largest device-spec file rtgraph reads, in bytes (checked before reading).
MAX_SPEC_BYTES = 256 * 1024
#: Folders (separated by ``os.pathsep``) where a named device ``NAME`` is found as ``NAME.toml``.
SEARCH_PATH_VARIABLE = "RTGRAPH_DEVICE_PATH"
#: What a device name looks like: letters, digits, ``.``, ``_``, ``-``, at most 64 characters.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def device_name_problem(name: str) -> tuple[str, str] | None:
    """Why ``name`` cannot name a device where a file names one (a problem and a hint), or None.

    A name is a shipped device or a spec on the search path, never a path to a file.
    """
    if _NAME.fullmatch(name) and name.lower() != ".toml":
        return None
    shown = name if len(name) <= 64 else f"{name[:61]}..."
    if "/" in name or os.sep in name or name.startswith("."):
        problem = f"'{shown}' is a path; a device is named here, not opened from a file"
    else:
        problem = f"'{shown}' is not a device name (letters, digits, '.', '_', '-'; at most 64)"
    hint = (
        f"name a shipped device ({', '.join(shipped_names())}) or one on {SEARCH_PATH_VARIABLE}, "
        "or pass your spec's path with --device PATH.toml"
    )
    return problem, hint


def load_device(name_or_path: str | os.PathLike[str]) -> DeviceSpec:
    """The device spec the user asked for: a name (shipped, or on the search path) or the path
    of a ``.toml`` file.

    Raises :class:`DeviceSpecError` for an unknown name (with a did-you-mean), a missing,
    unreadable, oversized or non-regular file, invalid TOML, an ``extends`` cycle, or any value
    the schema refuses.
    """
    return _load(_resolve(os.fspath(name_or_path), None))


def load_named_device(name: str) -> DeviceSpec:
    """The device a file names (a program's ``device``, a stream program's ``"device"``): a
    shipped spec or ``NAME.toml`` on the search path, never a path."""
    problem = device_name_problem(name)
    if problem is not None:
        raise DeviceSpecError(problem[0], hint=problem[1])
    return _load(_resolve(name, None, named=True))


def parse_device(text: str, label: str = "<string>") -> DeviceSpec:
    """A device spec from TOML text (``extends`` paths are relative to the working directory)."""
    return _load(Doc(label, text, f"text:{label}", Path.cwd()))


def _load(doc: Doc) -> DeviceSpec:
    data, origins = _read(doc, ())
    return build_spec(data, Checker(doc, origins))


def list_devices() -> list[DeviceSpec]:
    """Every shipped device spec, loaded and validated, in name order."""
    return [load_device(name) for name in shipped_names()]


# --- finding a spec by name or path ----------------------------------------------------------


def shipped_names() -> list[str]:
    """The names of the device specs shipped with rtgraph, sorted."""
    return list(_shipped())


@cache
def _shipped() -> tuple[str, ...]:
    entries = resources.files(PACKAGE).iterdir()
    names = (e.name[: -len(".toml")] for e in entries if e.name.endswith(".toml"))
    return tuple(sorted(n for n in names if n != COMPAT_FILE[: -len(".toml")]))


def _resolve(ref: str, referrer: Doc | None, *, named: bool = False) -> Doc:
    """The document ``ref`` names: a shipped device, a spec on the search path, or a file.

    ``referrer`` is the spec whose ``extends`` names ``ref`` (None for the spec asked for); its
    errors point at that ``extends`` key, and ``ref`` may then also be a ``.toml`` file beside it
    (or below it), never an absolute path or one through ``..``. ``named`` (a name a program
    gives) allows no file at all but the search path's.
    """
    if ref in _shipped():
        return packaged_doc(f"{ref}.toml")
    if referrer is not None:
        return _extended(ref, referrer)
    if not named and _looks_like_path(ref):
        return _file_doc(Path(ref), None)
    found = _on_search_path(ref, ())
    if found is None:
        raise _unknown_device(ref)
    return _file_doc(found, None)


def _extended(ref: str, referrer: Doc) -> Doc:
    """The document an ``extends`` of ``referrer`` names."""
    path = Path(ref)
    beside = () if referrer.folder is None else (referrer.folder,)
    if path.is_absolute() or ".." in path.parts or (not beside and len(path.parts) > 1):
        raise located_error(
            referrer,
            "extends",
            f"'{ref}' is outside this spec's folder",
            f"name a shipped device, a spec on {SEARCH_PATH_VARIABLE}, or a .toml file beside "
            "this one",
        )
    if ref.endswith(".toml") and beside:
        return _file_doc(beside[0] / path, referrer)
    problem = device_name_problem(ref)
    found = None if problem is not None else _on_search_path(ref, beside)
    if found is None:
        error = _unknown_device(ref)
        raise located_error(referrer, "extends", error.message, error.hint)
    return _file_doc(found, referrer)


def _on_search_path(name: str, first: tuple[Path, ...]) -> Path | None:
    """``NAME.toml`` in the first of ``first`` and the search path's folders that has one."""
    if device_name_problem(name) is not None:
        return None
    listed = os.environ.get(SEARCH_PATH_VARIABLE, "").split(os.pathsep)
    folders = [*first, *(Path(p) for p in listed if p)]
    filename = name if name.endswith(".toml") else f"{name}.toml"
    for folder in folders:
        candidate = folder / filename
        if candidate.is_file():
            return candidate
    return None


def _file_doc(path: Path, referrer: Doc | None) -> Doc:
    """A spec file's document, read only if it is a regular ``.toml`` file within the size cap
    (opened without blocking, so a FIFO cannot hang the read)."""

    def refuse(message: str, hint: str | None = None) -> DeviceSpecError:
        if referrer is not None:
            return located_error(referrer, "extends", message, hint)
        return DeviceSpecError(message, hint=hint)

    if path.suffix != ".toml":
        raise refuse(
            f"'{path}' is not a device spec: spec files end in .toml",
            f"shipped devices: {', '.join(shipped_names())}",
        )
    hint = f"shipped devices: {', '.join(shipped_names())}; or pass a path to a .toml file"
    return read_capped_toml(path, "device spec", MAX_SPEC_BYTES, refuse, hint)


def _looks_like_path(ref: str) -> bool:
    return ref.endswith(".toml") or "/" in ref or os.sep in ref


def _unknown_device(ref: str) -> DeviceSpecError:
    names = shipped_names()
    shown = ref if len(ref) <= 64 else f"{ref[:61]}..."
    close = did_you_mean(ref, names) if len(ref) <= 64 else None
    hint = close or (
        f"for your own device, put NAME.toml in a folder on {SEARCH_PATH_VARIABLE}, "
        "or pass its path with --device PATH.toml"
    )
    return DeviceSpecError(f"unknown device '{shown}' (shipped: {', '.join(names)})", hint=hint)


# --- reading and merging ---------------------------------------------------------------


def _read(doc: Doc, chain: tuple[Doc, ...]) -> tuple[dict[str, Any], Origins]:
    """The merged data of ``doc`` and everything it extends, and where each key came from."""
    data = parse_toml(doc, spec=True)
    origins: Origins = {}
    _note_origins(data, doc, "", origins)
    base_ref = data.pop("extends", None)
    if base_ref is None:
        return data, origins
    if not isinstance(base_ref, str):
        raise located_error(
            doc, "extends", f"expected a device name or path, got {show_value(base_ref)}"
        )
    base = _resolve(base_ref, doc)
    seen = [d.ref for d in (*chain, doc)]
    if base.ref in seen:
        labels = [d.label for d in (*chain, doc)]
        start = seen.index(base.ref)
        loop = [*labels[start:], labels[start]]
        raise located_error(doc, "extends", f"cycle {' → '.join(loop)}")
    base_data, base_origins = _read(base, (*chain, doc))
    return _merge(base_data, data), {**base_origins, **origins}


def _note_origins(data: Mapping[str, Any], doc: Doc, prefix: str, origins: Origins) -> None:
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        origins[dotted] = doc
        if isinstance(value, dict):
            _note_origins(value, doc, f"{dotted}.", origins)


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` laid on top: tables merge key by key, anything else is replaced."""
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged
