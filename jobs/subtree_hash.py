"""The one definition of partition and folder hashes (thesis §3.4.1): entry by entry for a walk
(walk_hash), column-wise for stored listings (`summarize`), the same records in the same order;
folder rows' Merkle and content hashes (`folder_summaries`) and the `duplicate_folders` view."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sharecrawl.crawl_io.mediatypes import MEDIA_NAME
from sharecrawl.crawl_io.schema import FOLDERS
from sharecrawl.crawl_io.sources import Entry
from sharecrawl.jobs.membership import parent_paths

COLUMNS = ["host", "share", "partition_id", "path", "name", "is_dir", "size", "mtime"]
FolderSeed = dict[str, tuple[str, str, int, int]]  # key -> hash, content_hash, n_files, bytes
EMPTY_MD5 = hashlib.md5().hexdigest()
PARTITION_COUNTS = ("n_folders", "n_files", "n_media", "bytes")  # beside its hash


def canonical_key(path: str) -> tuple[str, ...]:
    """Sort key giving depth-first order with children sorted by name ('a/b' before 'a b')."""
    return tuple(path.split("/")) if path else ()


def walk_hash(walk: Iterable[tuple[str, Entry]]) -> str:
    """The partition hash of a walk's (path, entry) pairs, in canonical order."""
    text = "".join([f"{p}\0{'d' if e.is_dir else 'f'}\0{e.size}\0{e.mtime_us}\n" for p, e in walk])
    return hashlib.md5(text.encode()).hexdigest()


def read_listing(part_path: str | Path) -> pa.Table:
    return listing_columns(pq.read_table(part_path, columns=COLUMNS), part_path)


def listing_columns(table: pa.Table, part_path: str | Path) -> pa.Table:
    """A listing part's COLUMNS checked (no nulls), as one chunk of large strings."""
    table = table.select(COLUMNS)
    for column in ("path", "name", "is_dir", "size", "mtime"):
        if table[column].null_count:
            raise ValueError(f"{part_path}: column {column!r} has nulls")
    strings = {c: pa.large_string() for c in ("host", "share", "partition_id", "path", "name")}
    schema = pa.schema([pa.field(f.name, strings.get(f.name, f.type)) for f in table.schema])
    return table.cast(schema).combine_chunks()


def media_mask(names: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Vectorised crawl_io.mediatypes.media_kind(name) is not None."""
    return pc.fill_null(pc.match_substring_regex(names, MEDIA_NAME, ignore_case=True), False)


def canonical_sort_key(paths: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Byte order of this key is canonical_key order: '/' below every other character."""
    return pc.replace_substring(paths, "/", "\x00")


def _join(*parts: pa.Array | str) -> pa.Array:
    large = [
        pa.scalar(p, pa.large_string()) if isinstance(p, str) else p.cast(pa.large_string())
        for p in parts
    ]
    return pc.binary_join_element_wise(*large, pa.scalar("", pa.large_string()))


def _digests(records: pa.Array, run_ends: np.ndarray) -> list[str]:
    """md5 of each run of consecutive records: a slice of the contiguous buffer each."""
    records = records.cast(pa.large_string())
    offsets = np.frombuffer(records.buffers()[1], np.int64)[
        records.offset : records.offset + len(records) + 1
    ]
    data = memoryview(records.buffers()[2] or b"")
    starts = np.concatenate([[0], run_ends[:-1]])
    return [
        hashlib.md5(data[offsets[s] : offsets[e]]).hexdigest()
        for s, e in zip(starts.tolist(), run_ends.tolist(), strict=True)
    ]


def _runs(sorted_keys: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """The distinct values of a sorted column and where each run of them ends."""
    if len(sorted_keys) == 0:
        return sorted_keys, np.zeros(0, np.int64)
    encoded = pc.run_end_encode(sorted_keys, run_end_type=pa.int64())
    return encoded.values, encoded.run_ends.to_numpy()


def _to_str(values: pa.Array) -> pa.Array:
    return pc.cast(values, pa.large_string())


def in_partition_order(table: pa.Table) -> pa.Table:
    """The rows grouped by partition, each in canonical order (as a fetch writes them: sorted only
    when not)."""
    pids = table["partition_id"].combine_chunks()
    keys = canonical_sort_key(table["path"].combine_chunks())
    runs = pc.run_end_encode(pids, run_end_type=pa.int64()).values
    if len(runs) == len(pc.unique(runs)):
        same = pc.equal(pids.slice(1), pids.slice(0, len(pids) - 1))
        back = pc.and_(same, pc.less(keys.slice(1), keys.slice(0, len(keys) - 1)))
        if not pc.any(back).as_py():
            return table
    order = pc.sort_indices(
        pa.table({"p": pids, "k": keys}), sort_keys=[("p", "ascending"), ("k", "ascending")]
    )
    return table.take(order).combine_chunks()


def summarize(table: pa.Table) -> dict[str, dict]:
    """partition_id -> {hash (walk_hash), n_folders, n_files, n_media, bytes} of the rows."""
    if table.num_rows == 0:
        return {}
    t = in_partition_order(table).combine_chunks()
    is_dir = t["is_dir"].chunk(0)
    mtime_us = pc.cast(t["mtime"].chunk(0), pa.int64())
    record = _join(
        t["path"].chunk(0),
        "\x00",
        pc.if_else(is_dir, "d", "f"),
        "\x00",
        _to_str(t["size"].chunk(0)),
        "\x00",
        _to_str(mtime_us),
        "\n",
    )
    pids, run_ends = _runs(t["partition_id"].chunk(0))
    hashes = _digests(record, run_ends)
    starts = np.concatenate([[0], run_ends[:-1]])
    dirs = is_dir.to_numpy(zero_copy_only=False)
    files = ~dirs
    media = files & media_mask(t["name"].chunk(0)).to_numpy(zero_copy_only=False)
    file_bytes = np.where(files, t["size"].chunk(0).to_numpy(), 0)
    sums = {
        name: np.add.reduceat(values.astype(np.int64), starts).tolist()
        for name, values in zip(PARTITION_COUNTS, (dirs, files, media, file_bytes), strict=True)
    }
    return {
        pid: {"hash": h, **{name: sums[name][i] for name in sums}}
        for i, (pid, h) in enumerate(zip(pids.to_pylist(), hashes, strict=True))
    }


def folder_keys(table: pa.Table, column: str = "path") -> pa.Array:
    """host NUL share NUL path of each row (or of its parent, column "parent"): a folder's key."""
    if not table.num_rows:
        return pa.array([], pa.large_string())
    table = table.combine_chunks()
    host, share, paths = (table[c].chunk(0) for c in ("host", "share", "path"))
    if column == "parent":
        paths = parent_paths(paths)
    return _join(host, "\x00", share, "\x00", paths)


def folder_summaries(table: pa.Table, seed: FolderSeed | None = None) -> pa.Table:
    """Every folder row's hash and content hash (Merkle hashes with and without mtimes), files and
    bytes, level by level from the deepest; `seed`: those of folders whose children are absent."""
    if not pc.any(table["is_dir"]).as_py():
        return FOLDERS.empty_table()
    table = table.combine_chunks()
    host, share, path = (table[c].chunk(0) for c in ("host", "share", "path"))
    key = folder_keys(table)
    parent_key = folder_keys(table, "parent")
    depth = pc.count_substring(path, "/").to_numpy()
    is_dir = table["is_dir"].chunk(0).to_numpy(zero_copy_only=False)

    folder_rows = np.flatnonzero(is_dir)
    dir_keys = key.take(pa.array(folder_rows))
    n_folders = len(folder_rows)
    # per folder (in folder_rows order): hashes and subtree totals, filled bottom up
    f_hash, f_chash = [EMPTY_MD5] * n_folders, [EMPTY_MD5] * n_folders
    f_files, f_bytes = np.zeros(n_folders, np.int64), np.zeros(n_folders, np.int64)
    folder_of_row = np.full(table.num_rows, -1, np.int64)
    folder_of_row[folder_rows] = np.arange(n_folders)
    for i, k in enumerate(dir_keys.to_pylist() if seed else ()):
        if k in seed:
            f_hash[i], f_chash[i], f_files[i], f_bytes[i] = seed[k]

    size = table["size"].chunk(0).to_numpy()
    mtime_us = pc.cast(table["mtime"].chunk(0), pa.int64())
    name = table["name"].chunk(0)
    for level in range(int(depth.max()), -1, -1):
        rows = np.flatnonzero(depth == level)
        at_level = pa.array(rows)
        by_parent_name = pc.sort_indices(
            pa.table({"p": parent_key.take(at_level), "n": name.take(at_level)}),
            sort_keys=[("p", "ascending"), ("n", "ascending")],
        )
        rows = rows[by_parent_name.to_numpy()]
        take = pa.array(rows)
        child_dir = is_dir[rows]
        child_folder = folder_of_row[rows]
        sub_hash = pa.array([f_hash[i] if i >= 0 else "" for i in child_folder], pa.large_string())
        sub_chash = pa.array(
            [f_chash[i] if i >= 0 else "" for i in child_folder], pa.large_string()
        )
        n, s = name.take(take), _to_str(pa.array(size[rows]))
        dir_flag = pa.array(child_dir)
        with_times = pc.if_else(
            dir_flag,
            _join("d\x00", n, "\x00", sub_hash, "\n"),
            _join("f\x00", n, "\x00", s, "\x00", _to_str(mtime_us.take(take)), "\n"),
        )
        content = pc.if_else(
            dir_flag,
            _join("d\x00", n, "\x00", sub_chash, "\n"),
            _join("f\x00", n, "\x00", s, "\x000\n"),
        )
        parents, run_ends = _runs(parent_key.take(take))
        hashes, chashes = _digests(with_times, run_ends), _digests(content, run_ends)
        starts = np.concatenate([[0], run_ends[:-1]]).astype(np.int64)
        safe_folder = np.maximum(child_folder, 0)
        n_files = np.where(child_dir, f_files[safe_folder], 1)
        n_bytes = np.where(child_dir, f_bytes[safe_folder], size[rows])
        files_sum = np.add.reduceat(n_files, starts) if len(rows) else n_files
        bytes_sum = np.add.reduceat(n_bytes, starts) if len(rows) else n_bytes
        targets = pc.index_in(parents, value_set=dir_keys).to_numpy(zero_copy_only=False)
        for i, target in enumerate(targets.tolist()):
            if target is None or target != target:  # a parent that is no row of the part
                continue
            target = int(target)
            f_hash[target], f_chash[target] = hashes[i], chashes[i]
            f_files[target], f_bytes[target] = files_sum[i], bytes_sum[i]
    keys = [column.take(pa.array(folder_rows)) for column in (host, share, path)]
    summary = [pa.array(column) for column in (f_hash, f_chash, f_files, f_bytes)]
    return pa.table([*keys, *summary], names=FOLDERS.names).cast(FOLDERS)


def duplicate_folders_sql(source: str, min_files: int = 3) -> str:
    """One row a content hash that folders of `min_files` files or more share on two hosts or more,
    with every copy; `source` is a relation of FOLDERS rows."""
    return f"""
        SELECT content_hash, count(DISTINCT host) AS n_hosts, count(*) AS n_copies,
               any_value(n_files) AS n_files, any_value(bytes) AS bytes,
               list(DISTINCT host ORDER BY host) AS hosts,
               list(struct_pack(host, share, path) ORDER BY host, share, path) AS copies
        FROM {source}
        WHERE n_files >= {int(min_files)}
        GROUP BY content_hash
        HAVING count(DISTINCT host) >= 2
    """
