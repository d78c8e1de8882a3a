"""What an emulated NPU is made of, as data: typed specs, their TOML loader and the
runtime/firmware compatibility matrix.

:mod:`.spec` holds the typed form every later stage reads; :mod:`.load` reads and validates
the TOML files (the shipped ones are in ``specs/``; docs/devices.md documents every key).
"""

from rtgraph.device.load import (
    RUNTIME_VERSION,
    CompatRow,
    check_compatibility,
    compat_matrix,
    describe,
    devices_table,
    list_devices,
    load_device,
    parse_device,
    parse_version,
    shipped_names,
)
from rtgraph.device.spec import (
    DeviceSpec,
    HostSpec,
    MemorySpec,
    ProfilingSpec,
    SchedulerSpec,
    UnitSpec,
)

__all__ = [
    "RUNTIME_VERSION",
    "CompatRow",
    "DeviceSpec",
    "HostSpec",
    "MemorySpec",
    "ProfilingSpec",
    "SchedulerSpec",
    "UnitSpec",
    "check_compatibility",
    "compat_matrix",
    "describe",
    "devices_table",
    "list_devices",
    "load_device",
    "parse_device",
    "parse_version",
    "shipped_names",
]
