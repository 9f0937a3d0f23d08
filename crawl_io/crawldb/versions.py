"""The kept versions of a crawl directory as analysts see them: the `versions` view's rows
(schema.VERSIONS, from each version's MANIFEST.json and hosts table) and the version that
`sql --at WHEN` names, by name or by the time at which it was live."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sharecrawl.crawl_io.crawldb import version_manifest as vm
from sharecrawl.crawl_io.crawldb.crawldir import VERSION_NAME, CrawlDir
from sharecrawl.crawl_io.schema import VERSIONS

AT_FORMS = "a kept version (v000002) or a UTC time (2026-11-20, 2026-11-20 18:00)"


def kept_versions(crawl: CrawlDir, up_to: int) -> list[int]:
    """The complete versions up to `up_to` (the live one: later ones are unpublished)."""
    return [v for v in crawl.versions() if v <= up_to and crawl.incomplete(v) is None]


def _counts(vdir: Path, parts: vm.Manifest) -> dict[str, int | None]:
    """files, bytes, media, media_bytes of a version, summed over its manifest's entries (a
    part an older manifest did not count is counted now; one that does not read: None)."""
    sums: dict[str, int | None] = dict.fromkeys(("files", "bytes", "media", "media_bytes"), 0)
    for rel, entry in parts.items():
        table = rel.partition("/")[0]
        if table not in ("files", "media") or not rel.endswith(".parquet"):
            continue
        if entry.rows is None:
            try:
                entry = vm.counted(rel, vdir / rel, entry)
            except (OSError, pa.ArrowException, KeyError):
                entry = vm.PartEntry(entry.size, entry.sha256)
        n = None if entry.rows is None else entry.rows - (entry.folders or 0)
        names = ("files", "bytes") if table == "files" else ("media", "media_bytes")
        for name, value in zip(names, (n, entry.bytes), strict=True):
            total = sums[name]
            sums[name] = None if total is None or value is None else total + value
    return sums


def _hosts(path: Path) -> tuple[int | None, int | None]:
    try:
        online = pq.read_table(path, columns=["online"])["online"]
    except (OSError, pa.ArrowException, KeyError):
        return None, None
    return len(online), pc.sum(online.cast(pa.int64())).as_py() or 0


def versions_table(crawl: CrawlDir, up_to: int) -> pa.Table:
    """One VERSIONS row per kept version up to `up_to`, oldest first."""
    rows = []
    for v in kept_versions(crawl, up_to):
        vdir = crawl.version_dir(v)
        try:
            counts = _counts(vdir, vm.kept_parts(vdir) or {})
        except vm.ManifestError:  # garbled: unknown (`check` names it)
            counts = {}
        hosts, online = _hosts(vdir / "hosts.parquet")
        row = {"version": vdir.name, "round": v, "published": vm.published_time(vdir)}
        rows.append(row | counts | {"hosts": hosts, "hosts_online": online})
    return pa.Table.from_pylist(rows, VERSIONS)


def parse_at(text: str) -> int | datetime:
    """A version number (`v000002`) or a time (naive: UTC); ValueError in one line."""
    given = text.strip()
    if match := VERSION_NAME.fullmatch(given):
        return int(match[1])
    try:
        when = datetime.fromisoformat(given)
    except ValueError:
        raise ValueError(f"--at takes {AT_FORMS}, not {text!r}") from None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _shown(t: datetime | None) -> str:
    return "an unknown time" if t is None else t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


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
    times = {v: vm.published_time(crawl.version_dir(v)) for v in kept}
    live = [v for v in kept if (t := times[v]) is not None and t <= wanted]
    if not live:
        oldest = f"v{kept[0]:06d}, was published at {_shown(times[kept[0]])}" if kept else "none"
        raise ValueError(f"no kept version was live at {_shown(wanted)}: the oldest kept, {oldest}")
    return max(live)
