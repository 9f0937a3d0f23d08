"""The one way a file of the crawl directory is written: whole or not at all.

A writer writes to a hidden temporary name beside the target, `.<name>.tmp<pid>@<machine>`
(the name crawl_io.tempfiles recognises and removes once its writer is gone; the machine
because fetch workers on several machines may write into one shared crawl directory), and
renames it into place: a reader sees the old file or the new one, never a part of either.

`durable=True` is for what the published crawldb stands on (the parts of a version, its
manifest, CURRENT): the file's bytes are on disk before the rename, and the folder's entry
after it, so a power cut cannot leave a name that points at bytes the disk never got.
Everything else (segments, hints, rules) is either rewritten by the next attempt or
advisory, and is spared the fsyncs.
"""

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
    """Start writing `path`'s pages to disk without waiting for them (Linux; elsewhere
    nothing): a big file just copied then goes out while its user computes, rather than all
    at once when it is first synced. Asking the kernel waits while it queues the writes (up
    to 40 ms for a 160 MiB file here), so the asking is done by the thread returned."""
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
    """Make `target` a copy of `source` that shares its blocks (a reflink: XFS, btrfs, bcachefs
    and others; Linux), and say whether it could: where the file system cannot (ext4, tmpfs,
    another file system than the source's), nothing is made and the caller copies. Writes to
    either file then take new blocks of their own, so the other never changes."""
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
    """Write `content` to `path` so that it appears whole or not at all: bytes, text (UTF-8),
    or a function that writes the file it is given. The folder is created if need be; on
    any error the temporary file goes and `path` is as it was."""
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
    """Publish what was built whole under a hidden name (a file, or a folder such as a
    version being built) by renaming it to `path`, durably: the rename is on disk when this
    returns. An existing file `path` is replaced; a folder `path` must not exist."""
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
    """Write a Parquet file atomically (write_atomic), zstd-compressed, with a CRC in every
    page header so that a flipped bit is caught when the page is read. `metadata` goes into
    the footer's key-value metadata (read back by pq.read_metadata).

    `compact`, for the small tables a round writes whole (hosts, partitions, prefix_stats
    parts): the footer leaves out the copy of the Arrow schema (1.6 kB; their Parquet
    schema reads back as the same Arrow schema, as every table of crawl_io.schema's does)
    and the min/max statistics of the columns no reader filters by (FILTERED keeps them)."""
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
    """A dictionary for the columns whose values repeat (hosts, shares, partitions, times,
    formats); none for those of mostly distinct values (paths, sizes, hashes), whose
    dictionary indices would not compress: a part of 20 000 rows came out three times the
    size of its share of one big part. Distinct strings are stored as differences from the
    previous one (DELTA_BYTE_ARRAY): sorted paths share long prefixes."""
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
