"""`sharecrawl check`: verify the live version against its manifest part by part; `--repair`
restores or drops damaged host parts and points CURRENT at the newest usable version,
moving what is newer aside under crawl/damaged/ (docs/crawl-dir.md)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from sharecrawl.crawl_io.crawldb import version_manifest as vm
from sharecrawl.crawl_io.crawldb.atomic import rename_into_place, temp_name
from sharecrawl.crawl_io.crawldb.crawldir import SEGMENT_NAME, STATE_TABLES, CrawlDamaged, CrawlDir
from sharecrawl.crawl_io.crawldb.fetchlogs import damaged_fetchlogs
from sharecrawl.crawl_io.crawldb.history import damaged_changes
from sharecrawl.crawl_io.crawldb.host_parts import ROW_TABLES, parse_part_file
from sharecrawl.crawl_io.crawldb.media_changes import FILE_NAME as MEDIA_CHANGES_FILE

DAMAGED_DIR = "damaged"  # where --repair moves what it takes out of the crawldb


@dataclass
class VersionReport:
    version: int
    parts: int = 0  # parts verified
    dropped: list[str] = field(default_factory=list)  # by `check --repair`: not problems
    problems: list[tuple[str, str]] = field(default_factory=list)  # (relative path, what)

    @property
    def name(self) -> str:
        return f"v{self.version:06d}"

    @property
    def usable(self) -> bool:
        """Can a round go on from it? Only per-host parts may be damaged."""
        fatal = {vm.MANIFEST_NAME, *(f"{t}.parquet" for t in STATE_TABLES)}
        return not any(rel in fatal for rel, _ in self.problems)

    def lines(self, vdir: Path) -> list[str]:
        return [f"{vdir / rel}: {what}" for rel, what in self.problems]


def verify_version(crawl: CrawlDir, version: int) -> VersionReport:
    """Read every part of a version in full and compare it with the manifest."""
    vdir = crawl.version_dir(version)
    report = VersionReport(version)
    if problem := crawl.incomplete(version):
        report.problems.append((vm.MANIFEST_NAME, f"{report.name} is not complete: {problem}"))
        return report
    try:
        manifest = vm.read_manifest(vdir) or {}  # there: the version is complete
    except vm.ManifestError as e:
        report.problems.append(
            (vm.MANIFEST_NAME, str(e).removeprefix(f"{vdir / vm.MANIFEST_NAME}: "))
        )
        return report
    report.dropped = vm.dropped_parts(vdir)
    listed = sorted(set(manifest) - set(report.dropped))
    missing = [rel for rel in (f"{t}.parquet" for t in STATE_TABLES) if rel not in listed]
    report.problems += [(rel, f"missing from {vm.MANIFEST_NAME}") for rel in missing]
    for rel in listed:
        path = vdir / rel
        if problem := vm.checksum_problem(path, manifest[rel]) or vm.read_problem(path):
            report.problems.append((rel, problem))
        report.parts += 1
    for rel in sorted(set(vm.version_parts(vdir)) - set(listed)):
        report.problems.append((rel, f"not in {vm.MANIFEST_NAME} (not written by a round)"))
    return report


def index_state(crawl: CrawlDir) -> tuple[str | None, str | None]:
    """(problem, version): does the search index open and name the version it was built from?"""
    if not crawl.index.exists():
        return f"{crawl.index}: missing", None
    path = "'" + str(crawl.index).replace("'", "''") + "'"
    try:
        # ATTACH in a new in-memory database reads the file as it is now; connect() would
        # hand back a database this process already has open under that path
        with duckdb.connect(":memory:") as con:
            con.execute(f"ATTACH {path} AS search_index (READ_ONLY)")
            row = con.execute(
                "SELECT value FROM search_index.meta WHERE key = 'version'"
            ).fetchone()
    except duckdb.Error as e:
        return f"{crawl.index}: does not open as a search index ({vm.first_line(e)})", None
    if not row:
        return f"{crawl.index}: names no crawldb version", None
    return None, str(row[0])


def verify_round_start(crawl: CrawlDir) -> None:
    """Raise CrawlDamaged unless a round can start from the live version: CURRENT names a
    complete version whose manifest parses and whose state tables match it."""
    live = crawl.current()
    if live == 0:
        return
    vdir = crawl.version_dir(live)
    manifest = crawl.manifest(live)
    for rel in (f"{t}.parquet" for t in STATE_TABLES):
        path, entry = vdir / rel, manifest.get(rel)
        problem = vm.checksum_problem(path, entry) if entry else f"missing from {vm.MANIFEST_NAME}"
        if problem:
            raise crawl.damaged(f"{path}: {problem}; a round would start its history over")


def check_crawl(crawl: CrawlDir) -> tuple[list[str], bool]:
    """`sharecrawl check`: one line per problem, or one saying how many parts are intact;
    True when there is no problem."""
    live = crawl.current()
    if live == 0:
        return ["no round published yet: nothing to check"], True
    report = verify_version(crawl, live)
    lines = report.lines(crawl.version_dir(live))
    lines += [f"{path}: {what}" for path, what in damaged_fetchlogs(crawl.segments)]
    lines += [f"{path}: {what}" for path, what in damaged_changes(crawl.crawldb)]
    index, _ = index_state(crawl)
    if index:
        lines.append(index)
    if lines:
        return lines, False
    dropped = f"; {len(report.dropped)} dropped by check --repair" if report.dropped else ""
    return [f"{report.name}: {report.parts} parts intact{dropped}"], True


@dataclass
class Repair:
    lines: list[str]
    ok: bool
    rebuild_index: bool = False
    live: int = 0


def repair_crawl(crawl: CrawlDir) -> Repair:
    """Point CURRENT at the newest usable version, moving what is newer aside, and repair
    its parts. Run under the crawl lock."""
    try:
        live: int | None = crawl.current()
        was = f"v{live:06d}"
    except CrawlDamaged as e:
        live, was = None, e.what
    if live == 0 and not crawl.versions():
        return Repair(["no round published yet: nothing to repair"], True)
    lines: list[str] = []
    chosen: VersionReport | None = None
    # with CURRENT readable, versions newer than it are unpublished leftovers: never them
    candidates = [v for v in crawl.versions() if live is None or v <= live]
    for version in sorted(candidates, reverse=True):
        report = verify_version(crawl, version)
        if report.usable:
            chosen = report
            break
        lines += report.lines(crawl.version_dir(version))
    if chosen is None:
        lines.append(
            f"{crawl.crawldb}: no usable version (every one has damaged state tables or "
            "is unfinished); restore it from a backup, or move it aside to start over"
        )
        return Repair(lines, False)
    aside = aside_dir(crawl)
    if chosen.version != live:
        newer = [crawl.version_dir(v) for v in crawl.versions() if v > chosen.version]
        newer += [
            p
            for p in sorted(crawl.segments.glob("r*"))
            if (number := SEGMENT_NAME.fullmatch(p.name)) and int(number[1]) > chosen.version
        ]
        moved = _move_aside(crawl, newer, aside)
        crawl.publish(chosen.version)
        lines.append(f"{crawl.crawldb / 'CURRENT'} now names {chosen.name} (was: {was})")
        if moved:
            lines.append(
                f"moved {', '.join(p.name for p in moved)} to {aside}: what those rounds "
                "found is lost, and the next crawl fetches it again"
            )
    else:
        lines.append(f"{chosen.name}: CURRENT already names the newest usable version")
    lines += [r.line for r in repair_parts(crawl, chosen.version, chosen.problems, aside)]
    fetchlogs = [path for path, _ in damaged_fetchlogs(crawl.segments)]
    for path in _move_aside(crawl, fetchlogs, aside):
        lines.append(
            f"moved damaged {path.relative_to(aside)} to {aside}: its round's scans are lost"
        )
    history = [path for path, _ in damaged_changes(crawl.crawldb)]
    for path in _move_aside(crawl, history, aside):
        lines.append(
            f"moved damaged {path.relative_to(aside)} to {aside}: its round's media changes "
            "are lost to the `changes` view"
        )
    index, indexed = index_state(crawl)
    return Repair(lines, True, index is not None or indexed != chosen.name, chosen.version)


@dataclass(frozen=True)
class PartRepair:
    """What mending one part of a version did (`check --repair`, a round's scrub)."""

    rel: str  # relative to the version
    what: str  # what was wrong with it
    line: str  # one line for people, naming the part
    source: Path | None = None  # the other version's intact copy it was restored from
    dropped: bool = False  # dropped from the manifest: read as a missing part

    @property
    def restored_from(self) -> str | None:
        return None if self.source is None else self.source.parent.parent.name


def repair_parts(
    crawl: CrawlDir, version: int, problems: list[tuple[str, str]], aside: Path
) -> list[PartRepair]:
    """Mend each (relative path, what is wrong) part of a published version in place, so that
    `check` passes: restore it from another version's separate, intact copy, else move it to
    `aside` and drop it from the manifest (readers take it for a missing part). A part the
    manifest does not list goes aside. Run under the crawl lock."""
    vdir = crawl.version_dir(version)
    manifest = vm.read_manifest(vdir)
    repairs: list[PartRepair] = []
    dropped: list[str] = []
    for rel, what in problems:
        path = vdir / rel
        entry = None if manifest is None else manifest.get(rel)
        source = None if entry is None else _intact_copy(crawl, version, rel, entry)
        if source is not None:
            tmp = temp_name(path)
            os.link(source, tmp)
            if path.exists():
                _move_aside(crawl, [path], aside, keep=True)
            rename_into_place(tmp, path)
            line = f"{path}: restored from {source.parent.parent.name} ({what})"
            repairs.append(PartRepair(rel, what, line, source=source))
            continue
        moved = _move_aside(crawl, [path] if path.exists() else [], aside)
        where = f"; moved to {aside}" if moved else ""
        if entry is None:  # a part no round wrote
            repairs.append(PartRepair(rel, what, f"{path}: {what}{where}"))
            continue
        dropped.append(rel)
        line = f"{path}: dropped from {vm.MANIFEST_NAME} ({what}{where}): {dropped_effect(rel)}"
        repairs.append(PartRepair(rel, what, line, dropped=True))
    if dropped:
        vm.drop_parts(vdir, dropped)
    return repairs


def aside_dir(crawl: CrawlDir) -> Path:
    """Where one repair moves what it takes out of the crawldb: damaged/<UTC time>/."""
    return crawl.root / DAMAGED_DIR / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def _intact_copy(crawl: CrawlDir, version: int, rel: str, entry: vm.PartEntry) -> Path | None:
    """Another version's file with the part's size and SHA-256 that reads, newest first (not
    a hard link to the damaged file)."""
    try:
        damaged = (crawl.version_dir(version) / rel).stat()
    except OSError:
        damaged = None
    for other in sorted((v for v in crawl.versions() if v != version), reverse=True):
        vdir = crawl.version_dir(other)
        try:
            manifest = vm.read_manifest(vdir) or {}
        except vm.ManifestError:
            continue
        for name, found in manifest.items():
            path = vdir / name
            if found != entry or not path.exists():
                continue
            if damaged is not None and path.stat().st_ino == damaged.st_ino:
                continue
            if vm.checksum_problem(path, entry) is None and vm.read_problem(path) is None:
                return path
    return None


def dropped_effect(rel: str) -> str:
    """What a part dropped by `check --repair` costs, and when it comes back."""
    table, _, name = rel.partition("/")
    host = (parse_part_file(name) or (name, 0))[0]
    if table == "prefix_stats":
        return f"host {host}'s statistics are computed again by the next round"
    if table in ROW_TABLES:
        return f"host {host}'s partitions are listed again when it is next online"
    if table == MEDIA_CHANGES_FILE:  # only the index's update reads it
        return "the next crawl updates the search index by comparing the media parts instead"
    return "the next crawl lists its partitions again as new"


def _move_aside(crawl: CrawlDir, paths: list[Path], target: Path, keep: bool = False) -> list[Path]:
    """Move paths inside the crawl dir to the same relative place under `target` (`keep`:
    link, leaving the file for a rename to replace)."""
    moved = []
    for path in paths:
        dest = target / path.relative_to(crawl.root)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if keep:
            dest.unlink(missing_ok=True)  # as os.replace would: the latest copy set aside
            os.link(path, dest)
        else:
            os.replace(path, dest)
        moved.append(dest)
    return moved
