"""Reading ``.npz`` files of inputs and params as untrusted data.

An ``.npz`` is a zip archive of ``.npy`` members. ``numpy.load`` trusts it: it decompresses a
member in full before it knows what it holds, so a member whose header declares 16 bytes can
inflate to gigabytes, and a file that is not a zip at all is tried as a pickle. Here every check
that costs nothing comes before every byte that costs memory:

1. the file: a regular file (a FIFO or ``/dev/zero`` is never read), not empty, not a lone
   ``.npy``, a zip archive whose central directory is small enough to parse;
2. each member, from its name and its NPY header alone: an array (``.npy``) of a key the
   program declares (an unknown key is never decompressed), a bool/integer/float dtype (an
   object array is refused, never unpickled), and a declared size that matches the member's
   size and, summed over the file, stays under :data:`MAX_NPZ_BYTES`;
3. only then the data, read in chunks into an array of the declared size and never past it.

Every failure is an :class:`~rtgraph.errors.InputError` naming the file and the array.
"""

from __future__ import annotations

import math
import os
import stat
import struct
import zipfile
import zlib
from collections.abc import Collection
from typing import IO

import numpy as np
from numpy.lib import format as npy

from rtgraph.errors import InputError, did_you_mean
from rtgraph.files import open_for_reading

#: The most bytes the arrays of one ``.npz`` file may declare, summed over its members — checked
#: from the NPY headers before anything is decompressed.
MAX_NPZ_BYTES = 4 * 2**30

#: The most members one ``.npz`` archive may have (read from its end record, before parsing).
MAX_NPZ_MEMBERS = 10_000

#: The largest central directory (the archive's table of members) that is parsed, in bytes.
MAX_NPZ_DIRECTORY_BYTES = 4 * 2**20

#: The largest NPY header read from a member, in bytes (NumPy's own default).
MAX_NPY_HEADER_BYTES = 10_000

_SAVE_HINT = "write it with numpy.savez(path, name=array, ...), one array per input or param"
_DAMAGED_HINT = "the file is damaged or was not written by numpy.savez"
_CHUNK = 16 * 2**20  # data is decompressed this many bytes at a time
_EOCD = b"PK\x05\x06"
_EOCD64_LOCATOR = b"PK\x06\x07"
_EOCD64 = b"PK\x06\x06"
_NUMERIC_KINDS = "biuf"
_NAME_WIDTH = 60  # characters of an archive's name a message shows
_WHY_WIDTH = 120  # characters of a library's reason a message shows
_LISTED = 5  # unknown keys a message names


class _Refused(Exception):
    """A problem found in the archive: the message after 'cannot read PATH as .npz: '."""

    def __init__(self, message: str, hint: str = _SAVE_HINT) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def load_npz(
    path: str | os.PathLike,
    *,
    known: Collection[str] | None = None,
    role: str = "input",
    owner: str | None = None,
    max_bytes: int = MAX_NPZ_BYTES,
) -> dict[str, np.ndarray]:
    """The arrays of the ``.npz`` file at ``path`` by key, checked before they are read.

    ``known`` (when the program is known) are the names of its ``role`` tensors (``input`` or
    ``param``) of program ``owner``: a key outside them is an error and is never decompressed.
    Arrays keep the dtype and byte order the file gives; converting them is the caller's.
    """
    fd = _open_regular(path)
    with os.fdopen(fd, "rb") as f:
        try:
            return _read_archive(f, known, role, owner, max_bytes)
        except _Refused as e:
            raise InputError(f"cannot read {path} as .npz: {e.message}", hint=e.hint) from None
        except OSError as e:  # the disk, not the data: an I/O error while reading
            raise InputError(f"cannot read {path}: {e.strerror or e}") from None


def _open_regular(path: str | os.PathLike) -> int:
    """A read-only descriptor of ``path``, refused unless it is a regular file (opened without
    blocking, so a FIFO cannot hang the read)."""
    try:
        fd, info = open_for_reading(path)
    except FileNotFoundError:
        raise InputError(f"cannot read {path}: no such file") from None
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None
    mode = info.st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise InputError(f"cannot read {path}: it is {what}", hint=_SAVE_HINT)
    return fd


def _read_archive(
    f: IO[bytes], known: Collection[str] | None, role: str, owner: str | None, max_bytes: int
) -> dict[str, np.ndarray]:
    head = f.read(8)
    if not head:
        raise _Refused("the file is empty")
    if head.startswith(b"\x93NUMPY"):
        raise _Refused(
            "it is a .npy file (one array), not an .npz archive",
            "save it with numpy.savez(path, name=array), naming the input or param it holds",
        )
    _check_directory(f, head)
    try:
        archive = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as e:
        raise _Refused(f"the zip archive is corrupt ({_why(e)})", _DAMAGED_HINT) from None
    with archive:
        members = _members(archive)
        if known is not None:
            _check_known(list(members), known, role, owner)
        layouts = {key: _layout(archive, key, info, max_bytes) for key, info in members.items()}
        total = sum(layout[3] for layout in layouts.values())
        if total > max_bytes:
            raise _Refused(
                f"its arrays declare {total:,} bytes in all; an .npz may hold at most "
                f"{max_bytes:,} bytes",
                "supply fewer or smaller arrays (lower the program parameters with -D)",
            )
        return {key: _read_data(archive, key, info, layouts[key]) for key, info in members.items()}


def _check_directory(f: IO[bytes], head: bytes) -> None:
    """Refuse, from the archive's end record alone, a file that is no zip or whose table of
    members is too large to parse (zipfile would build an object per member first)."""
    size = f.seek(0, os.SEEK_END)
    tail_start = max(0, size - 22 - 65_535)
    f.seek(tail_start)
    tail = f.read()
    at = tail.rfind(_EOCD)
    if at < 0 or len(tail) - at < 22:
        if head.startswith(b"PK\x03\x04"):
            raise _Refused("the zip archive is truncated (it has no end record)", _DAMAGED_HINT)
        raise _Refused("it is not a zip archive (an .npz is one)")
    _, _, _, _, entries, directory, _, _ = struct.unpack("<4s4H2LH", tail[at : at + 22])
    locator = at - 20
    zip64 = entries == 0xFFFF or directory == 0xFFFFFFFF
    if zip64 and locator >= 0 and tail[locator : locator + 4] == _EOCD64_LOCATOR:
        (offset,) = struct.unpack("<Q", tail[locator + 8 : locator + 16])
        f.seek(offset)
        record = f.read(56)
        if len(record) == 56 and record.startswith(_EOCD64):
            entries, directory = struct.unpack("<QQ", record[32:48])
    if entries > MAX_NPZ_MEMBERS:
        raise _Refused(
            f"the archive has {entries:,} members; an .npz may have at most {MAX_NPZ_MEMBERS:,}"
        )
    if directory > MAX_NPZ_DIRECTORY_BYTES:
        raise _Refused(
            f"the archive's table of members is {directory:,} bytes; at most "
            f"{MAX_NPZ_DIRECTORY_BYTES:,} are read"
        )
    f.seek(0)


def _members(archive: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    """The archive's arrays by key (the member name without ``.npy``), as ``numpy.load`` names
    them; any other member is an error."""
    members: dict[str, zipfile.ZipInfo] = {}
    for info in archive.infolist():
        if not info.filename.endswith(".npy"):
            raise _Refused(f"member {_name(info.filename)} is not an array (.npy)")
        key = info.filename[: -len(".npy")]
        if key in members:
            raise _Refused(f"array {_name(key)} appears twice")
        members[key] = info
    return members


def _check_known(keys: list[str], known: Collection[str], role: str, owner: str | None) -> None:
    unknown = [k for k in keys if k not in known]
    if not unknown:
        return
    program = f"program '{owner}'" if owner else "the program"
    if len(unknown) == 1:
        article = "an" if role[0] in "aeiou" else "a"
        message = f"array {_name(unknown[0])} is not {article} {role} of {program}"
    else:
        message = f"arrays {_quoted(unknown)} are not {role}s of {program}"
    names = sorted(known)
    hint = did_you_mean(unknown[0], names) or f"its {role}s are: {', '.join(names) or '(none)'}"
    raise _Refused(message, hint)


def _quoted(names: list[str]) -> str:
    shown = ", ".join(_name(n) for n in names[:_LISTED])
    return shown if len(names) <= _LISTED else f"{shown} and {len(names) - _LISTED} more"


def _name(name: str) -> str:
    """A name from the archive, quoted for a message: control characters escaped (a hostile
    name must not drive the terminal), a long one cut."""
    shown = _printable(name)
    return f"'{shown[:_NAME_WIDTH]}…'" if len(shown) > _NAME_WIDTH else f"'{shown}'"


def _why(error: BaseException) -> str:
    """What zipfile or zlib said, printable and short (it may quote the archive's names)."""
    text = _printable(str(error)) or type(error).__name__
    return text if len(text) <= _WHY_WIDTH else f"{text[:_WHY_WIDTH]}…"


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _layout(
    archive: zipfile.ZipFile, key: str, info: zipfile.ZipInfo, max_bytes: int
) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """Shape, Fortran order, dtype and data bytes of member ``key``, from its NPY header only
    (a few KiB decompressed at most), checked against the member's size."""
    try:
        with archive.open(info) as member:
            version = npy.read_magic(member)
            if version == (1, 0):
                header = npy.read_array_header_1_0(member, max_header_size=MAX_NPY_HEADER_BYTES)
            elif version == (2, 0):
                header = npy.read_array_header_2_0(member, max_header_size=MAX_NPY_HEADER_BYTES)
            else:
                raise _Refused(
                    f"array {_name(key)} is in .npy format version {version[0]}.{version[1]}; "
                    "versions 1.0 and 2.0 are read"
                )
            start = member.tell()
    except (zipfile.BadZipFile, EOFError, zlib.error, OSError, NotImplementedError) as e:
        raise _Refused(f"array {_name(key)} is corrupt ({_why(e)})", _DAMAGED_HINT) from None
    except RuntimeError as e:  # an encrypted member
        raise _Refused(f"array {_name(key)} cannot be read ({_why(e)})") from None
    except ValueError:  # no magic or a header NumPy cannot parse (its message quotes the bytes)
        raise _Refused(f"array {_name(key)} has no valid .npy header") from None
    shape, fortran, dtype = header
    if dtype.hasobject:
        raise _Refused(
            f"array {_name(key)} holds Python objects (pickled data), which rtgraph never loads",
            "save numeric arrays only (bool, integer or float)",
        )
    if dtype.kind not in _NUMERIC_KINDS:
        raise _Refused(
            f"array {_name(key)} has dtype {dtype}; inputs and params are bool, integer or float",
            "save numeric arrays only (bool, integer or float)",
        )
    nbytes = math.prod(shape) * dtype.itemsize
    declared = f"array {_name(key)} declares shape {list(shape)} of {dtype} ({nbytes:,} bytes)"
    if nbytes > max_bytes:
        raise _Refused(
            f"{declared}; an .npz may hold at most {max_bytes:,} bytes",
            "supply a smaller array (lower the program parameters with -D)",
        )
    if info.file_size != start + nbytes:
        raise _Refused(
            f"{declared} but its member holds {max(0, info.file_size - start):,} bytes of data",
            _DAMAGED_HINT,
        )
    return shape, fortran, dtype, nbytes


def _read_data(
    archive: zipfile.ZipFile,
    key: str,
    info: zipfile.ZipInfo,
    layout: tuple[tuple[int, ...], bool, np.dtype, int],
) -> np.ndarray:
    """Member ``key``'s array: exactly the declared bytes, decompressed a chunk at a time; a
    member that ends early or runs on is corrupt."""
    shape, fortran, dtype, nbytes = layout
    array = np.empty(math.prod(shape), dtype)
    target = array.view(np.uint8)
    try:
        with archive.open(info) as member:
            member.seek(info.file_size - nbytes)
            done = 0
            while done < nbytes:
                chunk = member.read(min(_CHUNK, nbytes - done))
                if not chunk:
                    raise EOFError("the data ends early")
                target[done : done + len(chunk)] = np.frombuffer(chunk, np.uint8)
                done += len(chunk)
            if member.read(1):
                raise EOFError("the data runs past its declared size")
    except (zipfile.BadZipFile, EOFError, zlib.error, OSError, NotImplementedError) as e:
        raise _Refused(f"array {_name(key)} is corrupt ({_why(e)})", _DAMAGED_HINT) from None
    except RuntimeError as e:  # an encrypted member
        raise _Refused(f"array {_name(key)} cannot be read ({_why(e)})") from None
    return array.reshape(shape, order="F" if fortran else "C")
