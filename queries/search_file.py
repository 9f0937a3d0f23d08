"""The search arrays file, `index/search.arrays`: what a search reads of the index (works'
filter columns, postings with impacts, deletion keys, display rows, copies' host and format
values) as raw little-endian arrays that a fresh process maps without DuckDB (queries.
search_arrays builds them, queries.index writes the file beside each new index file).

It names the index file it was made from by identity (inode, mtime, size; queries.index_store):
a reader uses it only while the index path names that file, else reads the index itself, so
an arrays file left by an older index, a missing one or one that does not read (a bad header,
another size than it says) never answers. It is renamed into place before its index file is:
a reader sees a matching pair, or a mismatch and the index alone."""

from __future__ import annotations

import json
import mmap
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = 1  # of this file; its contents follow the index's FORMAT too (queries.index_store)
MAGIC = b"SCARRAYS"
_PREFIX = struct.Struct("<8sQI4x")  # magic, header length, CRC-32 of the header
_ALIGN = 64


def arrays_path(index_path: Path) -> Path:
    """The arrays file of the index at `index_path` (search.duckdb -> search.arrays)."""
    return Path(index_path).with_suffix(".arrays")


@dataclass
class Tables:
    """A search's arrays by name, and what goes beside them (hosts' URLs, column names...)."""

    header: dict[str, Any]
    arrays: dict[str, np.ndarray]


def write_tables(path: Path, tables: Tables, identity: tuple[int, int, int]) -> None:
    """Write `tables` to the new file `path`, naming index file `identity` (fsynced); tables
    read from another file keep the CRCs it was checked against (read_tables' `verify`)."""
    sections: dict[str, list] = {}
    offset = 0
    header = dict(tables.header)
    known = header.pop("crc", {})
    for name, values in tables.arrays.items():
        crc = known.get(name)
        if crc is None:
            crc = zlib.crc32(np.ascontiguousarray(values).view(np.uint8).reshape(-1))
        sections[name] = [offset, values.dtype.str, int(values.size), crc]
        offset += -(-values.nbytes // _ALIGN) * _ALIGN
    header = {"format": FORMAT, "index": list(identity), **header}
    # offsets are from the first section, which starts after the header's padding
    text = json.dumps(header | {"sections": sections, "data": offset}).encode()
    start = -(-(_PREFIX.size + len(text)) // _ALIGN) * _ALIGN
    with open(path, "wb") as out:
        out.write(_PREFIX.pack(MAGIC, len(text), zlib.crc32(text)))
        out.write(text)
        out.write(b"\0" * (start - _PREFIX.size - len(text)))
        for values in tables.arrays.values():
            data = np.ascontiguousarray(values).view(np.uint8).reshape(-1)
            out.write(memoryview(data))
            out.write(b"\0" * (-len(data) % _ALIGN))
        out.flush()
        os.fsync(out.fileno())


def read_tables(
    path: Path, identity: tuple[int, int, int], *, verify: bool = False
) -> Tables | None:
    """The tables of the arrays file at `path`, mapped, if it was made from index file
    `identity` and reads whole (`verify`: every section's CRC-32 too, at 250-500 MB/s here;
    a fresh process's search checks the header and size alone); else None (read the index)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size < _PREFIX.size:
            return None
        mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    try:
        tables = _parse(mapped, size, identity)
        return None if tables is None or (verify and damaged_sections(tables)) else tables
    except (ValueError, KeyError, TypeError, struct.error):  # garbled: never trusted
        return None


def arrays_meta(index_path: Path, identity: tuple[int, int, int]) -> dict[str, str] | None:
    """The meta of index file `identity` (at `index_path`) as its arrays file names it, or None
    (no such arrays file, or one made before it carried the meta)."""
    tables = read_tables(arrays_path(index_path), identity)
    meta = tables.header.get("meta") if tables is not None else None
    return dict(meta) if isinstance(meta, dict) else None


def _parse(mapped: mmap.mmap, size: int, identity: tuple[int, int, int]) -> Tables | None:
    magic, length, crc = _PREFIX.unpack_from(mapped, 0)
    if magic != MAGIC or _PREFIX.size + length > size:
        return None
    text = mapped[_PREFIX.size : _PREFIX.size + length]
    if zlib.crc32(text) != crc:
        return None
    header = json.loads(text)
    if header.get("format") != FORMAT or header.get("index") != list(identity):
        return None
    start = -(-(_PREFIX.size + length) // _ALIGN) * _ALIGN
    if start + header["data"] != size:  # cut short, or more than it says
        return None
    sections = header.pop("sections")
    for key in ("format", "index", "data"):  # the file's, not the tables'
        del header[key]
    arrays = {
        name: np.frombuffer(mapped, dtype=np.dtype(dtype), count=count, offset=start + offset)
        for name, (offset, dtype, count, _) in sections.items()
    }
    header["crc"] = {name: section[3] for name, section in sections.items()}
    return Tables(header, arrays)


def damaged_sections(tables: Tables) -> list[str]:
    """The names of the read arrays whose bytes differ from what was written (CRC-32)."""
    return [
        name
        for name, values in tables.arrays.items()
        if zlib.crc32(values.view(np.uint8)) != tables.header["crc"][name]
    ]
