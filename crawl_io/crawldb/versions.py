"""The kept versions of a crawl directory as analysts see them: the `versions` view's rows
(schema.VERSIONS, from each version's MANIFEST.json and hosts table) and the version that
`sql --at WHEN` names, by name or by the time at which it was live."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sharecrawl.crawl_io.crawldb import version_manifest as vm
from sharecrawl.crawl_io.crawldb.crawldir import VERSION_NAME, CrawlDir
from sharecrawl.crawl_io.crawldb.layout import MANIFEST_NAME
from sharecrawl.crawl_io.schema import VERSIONS

AT_FORMS = "a kept version (v000002) or a UTC time (2026-11-20, 2026-11-20 18:00)"


def kept_versions(crawl: CrawlDir, up_to: int) -> list[int]:
    """The complete versions up to `up_to` (the live one: later ones are unpublished)."""
    return [v for v in crawl.versions() if v <= up_to and crawl.incomplete(v) is None]


Warn = Callable[[str], None]
_NAMES = {"files": ("files", "bytes"), "media": ("media", "media_bytes")}


def _manifest(vdir: Path) -> tuple[dict | None, str | None]:
    """A version's manifest record parsed once, or (None, what is wrong)."""
    path = vdir / MANIFEST_NAME
    try:
        record = json.loads(path.read_bytes())
    except OSError as e:
        return None, f"cannot be read ({e.strerror})"
    except ValueError as e:
        return None, f"garbled ({type(e).__name__})"
    if not isinstance(record, dict) or not isinstance(record.get("parts"), dict):
        return None, "garbled (no parts)"
    return record, None


def _entry_counts(vdir: Path, rel: str, entry: object) -> tuple[int | None, int | None]:
    """(files, bytes) of a files or media part from its entry as the manifest holds it (a
    list, [size, sha256, rows, folders, bytes], or the previous release's object); one an
    older manifest did not count is counted now; one that does not read: (None, None)."""
    if isinstance(entry, list):
        rows, folders, total = [*entry[2:], None, None, None][:3]
    elif isinstance(entry, dict):
        rows, folders, total = (entry.get(k) for k in ("rows", "folders", "bytes"))
    else:
        return None, None
    if rows is None:
        try:
            done = vm.counted(rel, vdir / rel, vm.PartEntry(0, b""))
        except (OSError, pa.ArrowException, KeyError):
            return None, None
        rows, folders, total = done.rows, done.folders, done.bytes
    if not isinstance(rows, int) or not isinstance(total, int):
        return None, None
    return rows - (folders if isinstance(folders, int) else 0), total


def _counts(vdir: Path, parts: dict) -> dict[str, int | None]:
    """files, bytes, media, media_bytes of a version, summed over its manifest's entries
    (the parts `check --repair` dropped are apart: left out), straight from the parsed
    JSON: a 1,000-host version lists 4,000 parts, and `versions` reads every kept one."""
    sums: dict[str, int | None] = dict.fromkeys(("files", "bytes", "media", "media_bytes"), 0)
    for rel, entry in parts.items():
        table = rel.partition("/")[0]
        if table not in _NAMES or not rel.endswith(".parquet"):
            continue
        for name, value in zip(_NAMES[table], _entry_counts(vdir, rel, entry), strict=True):
            total = sums[name]
            sums[name] = None if total is None or value is None else total + value
    return sums


def _hosts(path: Path) -> tuple[int | None, int | None]:
    try:
        with pq.ParquetFile(path) as f:
            online = f.read(columns=["online"])["online"]
    except (OSError, pa.ArrowException, KeyError):
        return None, None
    return len(online), pc.sum(online.cast(pa.int64())).as_py() or 0


def versions_table(crawl: CrawlDir, up_to: int, warn: Warn | None = None) -> pa.Table:
    """One VERSIONS row per kept version up to `up_to`, oldest first; a manifest that does
    not read gives a row without counts or time, and one line to `warn`."""
    rows = []
    for v in kept_versions(crawl, up_to):
        vdir = crawl.version_dir(v)
        record, problem = _manifest(vdir)
        if problem is not None and warn is not None:
            warn(
                f"{vdir.name}/{MANIFEST_NAME}: {problem}; its row of versions has no "
                "counts nor time, and `sql --at` a time passes it over"
            )
        counts = _counts(vdir, record["parts"]) if record is not None else {}
        hosts, online = _hosts(vdir / "hosts.parquet")
        published = vm.record_published(record, vdir / MANIFEST_NAME)
        row = {"version": vdir.name, "round": v, "published": published}
        rows.append(row | counts | {"hosts": hosts, "hosts_online": online})
    return pa.Table.from_pylist(rows, VERSIONS)


def parse_at(text: str) -> int | datetime:
    """A version number (`v000002`) or a time (naive: UTC); ValueError in one line."""
    given = text.strip()
    if match := VERSION_NAME.fullmatch(given):
        return int(match[1])
    try:
        when = datetime.fromisoformat(given)
        return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    except (ValueError, OverflowError):  # OverflowError: a zone past year 1 or 9999
        raise ValueError(f"--at takes {AT_FORMS}, not {text!r}") from None


def _shown(t: datetime | None) -> str:
    if t is None:
        return "an unknown time"
    spec = "microseconds" if t.microsecond else "seconds"  # times within a second told apart
    return f"{t.astimezone(UTC).replace(tzinfo=None).isoformat(' ', spec)} UTC"


def version_at(crawl: CrawlDir, at: str) -> int:
    """The kept version `at` names, or the one live at time `at`: the newest kept version
    published by then. ValueError (one line) for a version not kept or a time before the
    oldest kept one."""
    wanted = parse_at(at)
    kept = kept_versions(crawl, crawl.current())
    span = f"v{kept[0]:06d} to v{kept[-1]:06d}" if kept else "none"
    if isinstance(wanted, int):
        if wanted not in kept:
            raise ValueError(
                f"v{wanted:06d} is not a kept version (kept: {span}; luigi.cfg keep_rounds "
                "says how many are)"
            )
        return wanted
    times: dict[int, datetime | None] = {}

    def time_of(i: int) -> datetime | None:
        if i not in times:
            times[i] = vm.published_time(crawl.version_dir(kept[i]))
        return times[i]

    # Versions go live one after another, so their times rise with their numbers: a
    # bisection reads a few manifests of a year of hourly rounds, not 8,760 (one of an
    # unknown time, its manifest unread, is passed over).
    lo, hi = 0, len(kept)
    while lo < hi:
        mid = (lo + hi) // 2
        known = next((j for j in range(mid, hi) if time_of(j) is not None), None)
        t = None if known is None else time_of(known)
        if known is None or t is None or t > wanted:
            hi = mid
        else:
            lo = known + 1
    live = next((i for i in range(lo - 1, -1, -1) if time_of(i) is not None), None)
    if live is None:
        oldest = f"v{kept[0]:06d}, was published at {_shown(time_of(0))}" if kept else "none"
        raise ValueError(f"no kept version was live at {_shown(wanted)}: the oldest kept, {oldest}")
    return kept[live]
