"""A version's media changes (`media_changes.parquet`): what Update changed in the media
rows as the search index sees them, so that the index reads what changed rather than
compare every part (the thesis' promise that a round costs what changed, §3.2)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sharecrawl.crawl_io.crawldb.host_parts import PartsChange, parse_part_file, read_parquet
from sharecrawl.crawl_io.schema import MEDIA

FILE_NAME = "media_changes.parquet"
ACCOUNTS_KEY = b"sharecrawl.media_changes"
# The media columns the index depends on: a row that changed only in others (tagged_at,
# partition_id, tag_error ...) is the same row to the index.
PATH_COLUMNS = ["host", "share", "path"]
INDEXED_COLUMNS = (
    *PATH_COLUMNS,
    *"size mtime kind format artist title album albumartist genre year bitrate_kbps".split(),
    *("series", "season", "episode"),
)
SCHEMA = pa.schema(
    [MEDIA.field(name) for name in INDEXED_COLUMNS] + [pa.field("came", pa.bool_(), False)]
)


def host_changes(old_rows: pa.Table, came: pa.Table) -> pa.Table:
    """A host's rows of the record: each path changed or come once (`came` false: the index
    deletes its rows), with the stored row's values where there was one (`old_rows`, the
    stored rows not kept; nulls for a path that only came: the round's history tells added
    from changed by them), then the media rows `came` (`came` true: the index inserts them)."""
    new_paths = came.select(PATH_COLUMNS).join(
        old_rows.select(PATH_COLUMNS), keys=PATH_COLUMNS, join_type="left anti", use_threads=False
    )
    n = len(new_paths)
    only_came = pa.table(
        {
            f.name: new_paths[f.name] if f.name in PATH_COLUMNS else pa.nulls(n, f.type)
            for f in SCHEMA
        }
        | {"came": pa.repeat(False, n)},
        schema=SCHEMA,
    )
    rows = [(old_rows, False), (came, True)]
    old, new = (
        t.select(list(INDEXED_COLUMNS)).append_column("came", pa.repeat(c, len(t))) for t, c in rows
    )
    return pa.concat_tables([old.cast(SCHEMA), only_came, new.cast(SCHEMA)])


@dataclass
class ChangesRecord:
    """The record of the version being built, host by host."""

    tables: list[pa.Table] = field(default_factory=list)
    accounts: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def add(self, host: str, old_parts: list[str], new_parts: list[str], rows: pa.Table) -> None:
        """Record a host's changes (host_changes), covering its media parts `old_parts` of
        the base version and `new_parts` of the new one."""
        self.accounts[host] = {"old": sorted(old_parts), "new": sorted(new_parts)}
        self.tables.append(rows)

    def table(self) -> pa.Table:
        return pa.concat_tables([SCHEMA.empty_table(), *self.tables])

    def metadata(self, base: str) -> dict[bytes, bytes]:
        return {ACCOUNTS_KEY: json.dumps({"base": base, "hosts": self.accounts}).encode()}


@dataclass(frozen=True)
class Recorded:
    """The record's rows of the hosts it accounts for, and the differing parts of the others."""

    rows: pa.Table
    rest: PartsChange


def recorded_changes(old_dir: Path, new_dir: Path, diff: PartsChange) -> Recorded:
    """Split the media parts that differ between two versions into those the new version's
    record (made from `old_dir`) accounts for, read, and the rest."""
    none = Recorded(SCHEMA.empty_table(), diff)
    path = Path(new_dir) / FILE_NAME
    try:
        meta = pq.read_metadata(path).metadata or {}
        record = json.loads(meta[ACCOUNTS_KEY])
        if record["base"] != Path(old_dir).name:
            return none
        accounts = {host: (set(a["old"]), set(a["new"])) for host, a in record["hosts"].items()}
    except (OSError, AttributeError, KeyError, TypeError, ValueError, pa.ArrowException):
        return none
    removed, added = _by_host(diff.removed), _by_host(diff.added)
    covered = {
        host
        for host, (old, new) in accounts.items()
        if removed.get(host, set()) <= old and added.get(host, set()) <= new
    }
    if not covered:
        return none
    try:
        rows = read_parquet(path, SCHEMA)
    except (OSError, pa.ArrowException):
        return none
    if covered != set(accounts):
        rows = rows.filter(pc.is_in(rows["host"], pa.array(sorted(covered), pa.string())))
    rest = PartsChange(
        removed=[p for p in diff.removed if _host(p) not in covered],
        added=[p for p in diff.added if _host(p) not in covered],
    )
    return Recorded(rows, rest)


def _host(part: Path) -> str | None:
    return (parse_part_file(part.name) or (None,))[0]


def _by_host(parts: list[Path]) -> dict[str | None, set[str]]:
    out: dict[str | None, set[str]] = {}
    for part in parts:
        out.setdefault(_host(part), set()).add(f"{part.parent.name}/{part.name}")
    return out
