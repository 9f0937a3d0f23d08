"""The one way a crawl directory file is written: whole or not at all (docs/DESIGN.md, The
crawl directory). The temporary name `.<name>.tmp<pid>@<machine>` is what crawl_io.crawldb.tempfiles
removes once its writer is gone. `durable=True`, for what a published version stands on,
fsyncs the bytes before the rename and the folder after it; the rest is spared the fsyncs."""

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
    """The hidden temporary name a write to `path` goes through: it names the writing
    process and its machine (a pid alone means nothing on another machine)."""
    return path.with_name(f".{path.name}.tmp{os.getpid()}@{machine()}")


def machine() -> str:
    """This machine's name as temporary names carry it (no '/', which a file name cannot
    hold)."""
    return socket.gethostname().replace("/", "_") or "localhost"


_SYNC_FILE_RANGE_WRITE = 2  # linux/fs.h: start writeback, do not wait


def start_writeback(path: Path) -> threading.Thread | None:
    """Start writing `path`'s pages to disk without waiting (Linux; elsewhere nothing), on the
    thread returned, since asking the kernel blocks while it queues the writes."""
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
    """Make `target` a reflink copy of `source` (Linux; XFS, btrfs and others) and say whether it
    could; where not, nothing is made and the caller copies."""
    try:
        with open(source, "rb") as src, open(target, "wb") as dst:
            fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
    except OSError:  # EOPNOTSUPP, EXDEV, EINVAL, ENOTTY: not here
        target.unlink(missing_ok=True)
        return False
    return True


def fsync_folder(folder: Path) -> None:
    """Make a folder's entries (names created, renamed or linked in it) durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
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
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_folder(path.parent)


def rename_into_place(built: Path, path: Path) -> None:
    """Rename what was built under a hidden name (a file or a folder) to `path`, durably.
    An existing file `path` is replaced; a folder `path` must not exist."""
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
    """Write a Parquet file atomically, zstd-compressed, with page CRCs; `metadata` goes into the
    footer. `compact` (small whole tables) leaves out the footer's Arrow schema copy and the
    statistics of columns no reader filters by (FILTERED keeps them)."""
    if metadata:  # a key the table brought from the part it was read from is replaced
        kept = {k: v for k, v in (table.schema.metadata or {}).items() if k not in metadata}
        table = table.replace_schema_metadata(kept)
    dictionary, encodings = _encodings(table)

    def write(tmp: Path) -> None:
        options = {
            "compression": "zstd",
            "write_page_checksum": True,
            "use_dictionary": dictionary,
            "column_encoding": encodings,
            "store_schema": not compact,
            "write_statistics": [c for c in FILTERED if c in table.column_names]
            if compact
            else True,
        }
        # not in the table's schema: without the Arrow schema pyarrow would drop it
        with pq.ParquetWriter(tmp, table.schema, **options) as writer:
            writer.write_table(table)
            if metadata:
                writer.add_key_value_metadata(metadata)

    write_atomic(path, write, durable=durable)


def _encodings(table: pa.Table) -> tuple[list[str], dict[str, str]]:
    """Dictionary encoding for columns whose values repeat, none for mostly distinct ones (paths,
    sizes, hashes: the indices would not compress); DELTA_BYTE_ARRAY for strings, since sorted
    paths share long prefixes."""
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
