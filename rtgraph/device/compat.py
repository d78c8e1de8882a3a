"""The runtime/firmware compatibility matrix, and the check that a device suits the runtime.

The matrix is data (``rtgraph/device/specs/compat.toml``): each runtime version and the range
of firmware it supports. :func:`check_compatibility` finds the row that governs a runtime and
says what to upgrade or downgrade when a device's firmware does not fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from rtgraph.device.document import COMPAT_FILE, packaged_doc, parse_toml
from rtgraph.device.schema import VERSION, Checker, Rule, optional, show_value
from rtgraph.device.spec import DeviceSpec
from rtgraph.device.versions import in_series, parse_version
from rtgraph.errors import DeviceSpecError

#: The runtime version rtgraph emulates (CANN-style numbering), checked against the matrix.
RUNTIME_VERSION = "8.0.0"


@dataclass(frozen=True)
class CompatRow:
    """One runtime version and the firmware range it supports (``firmware_max`` may be None)."""

    runtime: str
    firmware_min: str
    firmware_max: str | None = None

    def supports(self, firmware: str) -> bool:
        fw = parse_version(firmware)
        if fw < parse_version(self.firmware_min):
            return False
        return self.firmware_max is None or fw <= parse_version(self.firmware_max)


COMPAT_KEYS: dict[str, Rule] = {
    "version": VERSION,
    "firmware_min": VERSION,
    "firmware_max": optional(VERSION),
}


@cache
def compat_matrix() -> tuple[CompatRow, ...]:
    """The runtime → firmware compatibility matrix shipped with rtgraph, oldest runtime first."""
    doc = packaged_doc(COMPAT_FILE)
    data = parse_toml(doc)
    check = Checker(doc, {})
    check.no_unknown(data, "", {"runtime": None})
    rows = data.get("runtime")
    if not isinstance(rows, list) or not rows:
        raise check.fail("runtime", "expected a non-empty array of [[runtime]] tables")
    built = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise check.fail(f"runtime[{i}]", f"expected a table, got {show_value(row)}")
        fields = check.keys(row, f"runtime[{i}]", COMPAT_KEYS)
        built.append(CompatRow(fields.pop("version"), **fields))
    return tuple(sorted(built, key=_runtime_key))


def _runtime_key(row: CompatRow) -> tuple:
    return parse_version(row.runtime)


def _row_for(runtime_version: str, rows: Sequence[CompatRow]) -> CompatRow | None:
    """The row that governs ``runtime_version``: the newest listed runtime not after it."""
    key = parse_version(runtime_version)
    governing = [r for r in rows if parse_version(r.runtime) <= key]
    return governing[-1] if governing else None


def check_compatibility(
    spec: DeviceSpec,
    runtime_version: str = RUNTIME_VERSION,
    *,
    matrix: Sequence[CompatRow] | None = None,
) -> None:
    """Raise :class:`DeviceSpecError` unless ``spec`` can run under ``runtime_version``.

    Two checks: the runtime's matrix (the shipped one unless ``matrix`` is given) must
    support the spec's firmware, and the spec must list a runtime series that
    ``runtime_version`` belongs to.
    """
    for what, version in (("runtime version", runtime_version), ("firmware", spec.firmware)):
        try:
            parse_version(version)
        except ValueError:
            raise DeviceSpecError(
                f"{what} '{version}' is not a version like '8.0.0' or '7.5.0.1.129'"
            ) from None
    rows = sorted(matrix if matrix is not None else compat_matrix(), key=_runtime_key)
    row = _row_for(runtime_version, rows)
    if row is None:
        raise DeviceSpecError(
            f"runtime {runtime_version} is older than every runtime in the compatibility matrix"
            f" (oldest: {rows[0].runtime})"
        )
    if not row.supports(spec.firmware):
        raise DeviceSpecError(
            f"device '{spec.name}' ({spec.source}): firmware {spec.firmware} is not supported by"
            f" runtime {runtime_version}; {_upgrade(spec.firmware, row, rows)}"
        )
    if not any(in_series(series, runtime_version) for series in spec.compatible_runtimes):
        raise DeviceSpecError(
            f"device '{spec.name}' ({spec.source}) lists compatible runtimes"
            f" {', '.join(spec.compatible_runtimes)}, which do not include {runtime_version}",
            hint="add the runtime series to device.compatible_runtimes once it is qualified",
        )


def _upgrade(firmware: str, row: CompatRow, rows: Sequence[CompatRow]) -> str:
    """What to change so that ``firmware`` and the runtime of ``row`` work together."""
    fw = parse_version(firmware)
    if fw < parse_version(row.firmware_min):
        change = f"upgrade the firmware to ≥ {row.firmware_min}"
        others = [r for r in rows if parse_version(r.runtime) < parse_version(row.runtime)]
        direction = "≤"
    else:
        change = f"downgrade the firmware to ≤ {row.firmware_max}"
        others = [r for r in rows if parse_version(r.runtime) > parse_version(row.runtime)]
        direction = "≥"
    fitting = [r.runtime for r in others if r.supports(firmware)]
    if not fitting:
        return f"{change} (no runtime in the matrix supports firmware {firmware})"
    pick = fitting[-1] if direction == "≤" else fitting[0]
    return f"{change} or use runtime {direction} {pick}"
