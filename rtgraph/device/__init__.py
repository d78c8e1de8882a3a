"""What an emulated NPU is made of, as data: typed specs, their TOML loader and the
runtime/firmware compatibility matrix.

In reading order: :mod:`.spec` holds the typed form every later stage reads;
:mod:`.document` is one TOML file and errors located in it; :mod:`.schema` says which keys a
spec holds and checks them; :mod:`.load` finds a spec by name or path and merges what it
``extends``; :mod:`.versions` and :mod:`.compat` hold version numbers and the compatibility
matrix; :mod:`.tables` prints devices. The shipped specs are in ``specs/``; docs/devices.md
documents every key. Code outside this package imports from ``rtgraph.device``.
"""

from rtgraph.device.compat import (
    RUNTIME_VERSION,
    CompatRow,
    check_compatibility,
    compat_matrix,
)
from rtgraph.device.load import (
    MAX_SPEC_BYTES,
    SEARCH_PATH_VARIABLE,
    device_name_problem,
    list_devices,
    load_device,
    load_named_device,
    parse_device,
    shipped_names,
)
from rtgraph.device.schema import SCHEMA, UNIT_KINDS
from rtgraph.device.spec import (
    DeviceSpec,
    HostSpec,
    MemorySpec,
    ProfilingSpec,
    SchedulerSpec,
    UnitSpec,
)
from rtgraph.device.tables import describe, devices_table
from rtgraph.device.versions import parse_version

__all__ = [
    "MAX_SPEC_BYTES",
    "RUNTIME_VERSION",
    "SCHEMA",
    "SEARCH_PATH_VARIABLE",
    "UNIT_KINDS",
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
    "device_name_problem",
    "devices_table",
    "list_devices",
    "load_device",
    "load_named_device",
    "parse_device",
    "parse_version",
    "shipped_names",
]
