"""The one device-spec loader: find a spec by name or path, read it, merge what it ``extends``.

A device is data. rtgraph ships a few specs as package data (``rtgraph/device/specs/*.toml``) and
reads a user's spec from a path; a spec may ``extends`` another (a shipped name or a path
relative to the extending file) and override single keys, tables merging deeply. The loader
remembers which file each key came from, so :func:`~rtgraph.device.schema.build_spec` can blame
a bad value on the file that wrote it. Which file a name means is decided in one place,
:func:`_resolve`. Every key is documented in ``docs/devices.md``.
"""

from __future__ import annotations

import os
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
)
from rtgraph.device.schema import Checker, build_spec, show_value
from rtgraph.device.spec import DeviceSpec
from rtgraph.errors import DeviceSpecError, did_you_mean

# --- loading -------------------------------------------------------------------------------


def load_device(name_or_path: str | os.PathLike[str]) -> DeviceSpec:
    """The device spec called ``name_or_path``: a shipped name or the path of a TOML file.

    Raises :class:`DeviceSpecError` for an unknown name (with a did-you-mean), a missing or
    unreadable file, invalid TOML, an ``extends`` cycle, or any value the schema refuses.
    """
    return _load(_resolve(os.fspath(name_or_path), None))


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


def _resolve(ref: str, referrer: Doc | None) -> Doc:
    """The document ``ref`` names: a shipped device, or a path (relative to the referrer).

    ``referrer`` is the spec whose ``extends`` names ``ref`` (None for the spec asked for);
    its errors point at that ``extends`` key.
    """
    if ref in _shipped():
        return packaged_doc(f"{ref}.toml")
    if referrer is not None and referrer.folder is None:
        raise located_error(referrer, "extends", f"unknown shipped device '{ref}'")
    if not _looks_like_path(ref):
        error = _unknown_device(ref)
        if referrer is not None:
            raise located_error(referrer, "extends", error.message, error.hint)
        raise error
    path = Path(ref)
    if referrer is not None and referrer.folder is not None and not path.is_absolute():
        path = referrer.folder / path
    return _file_doc(path, referrer)


def _file_doc(path: Path, referrer: Doc | None) -> Doc:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        message = f"no device spec file '{path}'"
        hint = f"shipped devices: {', '.join(shipped_names())}; or pass a path to a .toml file"
        if referrer is not None:
            raise located_error(referrer, "extends", message, hint) from None
        raise DeviceSpecError(message, hint=hint) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DeviceSpecError(f"cannot read device spec '{path}': {exc}") from None
    return Doc(str(path), text, str(path.resolve()), path.resolve().parent)


def _looks_like_path(ref: str) -> bool:
    return ref.endswith(".toml") or "/" in ref or os.sep in ref or Path(ref).exists()


def _unknown_device(ref: str) -> DeviceSpecError:
    names = shipped_names()
    hint = did_you_mean(ref, names) or "pass a path to a .toml file for your own device"
    return DeviceSpecError(f"unknown device '{ref}' (shipped: {', '.join(names)})", hint=hint)


# --- reading and merging ---------------------------------------------------------------


def _read(doc: Doc, chain: tuple[Doc, ...]) -> tuple[dict[str, Any], Origins]:
    """The merged data of ``doc`` and everything it extends, and where each key came from."""
    data = parse_toml(doc)
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
