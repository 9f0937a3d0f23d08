"""Files of the crawl directory written whole or not at all, through the temporary name
`.<name>.tmp<pid>@<machine>` (crawl_io.crawldb.tempfiles removes it once its writer is gone);
Parquet parts with page CRCs; reflink copies."""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

Content = bytes | str | Callable[[Path], None]


def temp_name(path: Path) -> Path:
    """The hidden name a write to `path` goes through (a pid alone means nothing elsewhere)."""
    return path.with_name(f".{path.name}.tmp{os.getpid()}@{machine()}")


def machine() -> str:
    """This machine's name as temporary names carry it (no '/')."""
    return socket.gethostname().replace("/", "_") or "localhost"


_SYNC_FILE_RANGE_WRITE = 2  # linux/fs.h: start writeback, do not wait


def start_writeback(path: Path) -> threading.Thread | None:
    """Start writing `path`'s pages to disk (Linux) on the thread returned: asking blocks."""
    sync_file_range = getattr(ctypes.CDLL(None), "sync_file_range", None)
    if sync_file_range is None:
        return None
    fd = os.open(path, os.O_RDONLY)  # now: the file may be renamed or removed meanwhile

    def ask() -> None:
        try:
            sync_file_range(fd, ctypes.c_int64(0), ctypes.c_int64(0), _SYNC_FILE_RANGE_WRITE)
        finally:
            os.close(fd)

    thread = threading.Thread(target=ask, name="writeback", daemon=True)
    thread.start()
    return thread


FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int)


def clone_file(source: Path, target: Path) -> bool:
    """Make `target` a reflink copy of `source` (XFS, btrfs ...); False: nothing made."""
    try:
        with open(source, "rb") as src, open(target, "wb") as dst:
            fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
    except OSError:  # EOPNOTSUPP, EXDEV, EINVAL, ENOTTY: not here
        target.unlink(missing_ok=True)
        return False
    return True


def fsync_folder(path: Path) -> None:
    """Make a file's bytes, or a folder's entries (names created, renamed, linked), durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, content: Content, *, durable: bool = False) -> None:
    """Write `content` (bytes, UTF-8 text, or a function given the file) to `path` whole or not at
    all; the folder is created if need be; on error `path` is as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(path)
    try:
        if callable(content):
            content(tmp)
        else:
            tmp.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
        if durable:
            fsync_folder(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_folder(path.parent)


def rename_into_place(built: Path, path: Path) -> None:
    """Rename what was built under a hidden name to `path` (not an existing folder), durably."""
    os.replace(built, path)
    fsync_folder(path.parent)


FILTERED = ("host", "share", "partition_id", "prefix")  # what queries select rows by


def write_parquet(
    table: pa.Table,
    path: str | os.PathLike,
    *,
    durable: bool = False,
    metadata: dict[bytes, bytes] | None = None,
    compact: bool = False,
) -> None:
    """Write a Parquet file atomically, zstd, page CRCs, `metadata` in the footer. `compact`
    (small tables) leaves out the Arrow schema and statistics of columns not in FILTERED."""
    if metadata:  # replaces a key the table brought from the part it was read from
        kept = {k: v for k, v in (table.schema.metadata or {}).items() if k not in metadata}
        table = table.replace_schema_metadata(kept)
    dictionary, encodings = _encodings(table)
    statistics = [c for c in FILTERED if c in table.column_names] if compact else True

    def write(tmp: Path) -> None:
        options = {
            "compression": "zstd",
            "write_page_checksum": True,
            "use_dictionary": dictionary,
            "column_encoding": encodings,
            "store_schema": not compact,
            "write_statistics": statistics,
        }
        # not in the table's schema: without the Arrow schema pyarrow would drop it
        with pq.ParquetWriter(tmp, table.schema, **options) as writer:
            writer.write_table(table)
            if metadata:
                writer.add_key_value_metadata(metadata)

    write_atomic(path, write, durable=durable)


def _encodings(table: pa.Table) -> tuple[list[str], dict[str, str]]:
    """Dictionary encoding where values repeat, none for mostly distinct ones (the indices
    would not compress); DELTA_BYTE_ARRAY for strings: sorted paths share long prefixes."""
    dictionary, encodings = [], {}
    for field in table.schema:
        if pa.types.is_nested(field.type):
            continue  # lists (scan histories): small, left to the defaults
        column = table[field.name]
        if column.null_count == len(column) or pc.count_distinct(column).as_py() * 2 <= len(column):
            dictionary.append(field.name)
        elif pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
            encodings[field.name] = "DELTA_BYTE_ARRAY"
    return dictionary, encodings
