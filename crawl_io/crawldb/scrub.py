"""A round's scrub (docs/DESIGN.md, "Damage and repair"): the SHA-256 of a bounded slice of the
parts the round carries forward by hard link, which no one reads in full otherwise (a link
shares the damaged inode with the version it came from), and the mend of what is damaged as
`check --repair` mends it (integrity.repair_parts). The slice goes on in name order from the
part where the previous round's stopped, so that successive rounds cover every part; the
round's record (`segments/rNNNNNN/scrub.json`) says where, and what was verified and mended."""

from __future__ import annotations

import bisect
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from sharecrawl.crawl_io.crawldb import version_manifest as vm
from sharecrawl.crawl_io.crawldb.atomic import write_atomic
from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.crawl_io.crawldb.host_parts import PART_TABLES, ROW_TABLES, parse_part_file
from sharecrawl.crawl_io.crawldb.integrity import (
    PartRepair,
    aside_dir,
    dropped_effect,
    repair_parts,
    verify_version,
)
from sharecrawl.crawl_io.readable import plural

RECORD_NAME = "scrub.json"  # in the round's segment
MIB = 1 << 20

log = logging.getLogger("sharecrawl")


@dataclass
class ScrubRecord:
    """What a round's scrub did: the counts status and the round's metrics read, and the last
    part verified, after which the next round goes on."""

    parts_verified: int = 0
    bytes_verified: int = 0
    damaged: int = 0
    restored: int = 0
    dropped: int = 0
    seconds: float = 0.0
    budget_bytes: int = 0
    last: str | None = None  # relative to a version folder
    mended: list[dict] = field(default_factory=list)  # part, problem, restored_from / dropped

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ScrubRecord:
        values = json.loads(text)
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})

    def add(self, other: ScrubRecord | None) -> ScrubRecord:
        """This record with another of the same round's (a mend after a read failed) in it."""
        if other is not None:
            for name in ("parts_verified", "bytes_verified", "damaged", "restored", "dropped"):
                setattr(self, name, getattr(self, name) + getattr(other, name))
            self.seconds = round(self.seconds + other.seconds, 3)
            self.mended = other.mended + self.mended
        return self

    def report(self) -> dict:
        """What `status --json` says of it (key `scrub`)."""
        return asdict(self)


def read_record(segment: Path) -> ScrubRecord | None:
    """A round's scrub record; None when it has none (scrub off, an older round) or it does
    not parse (the next round then starts over from the first part)."""
    try:
        return ScrubRecord.from_json((segment / RECORD_NAME).read_text())
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def write_record(segment: Path, record: ScrubRecord) -> None:
    write_atomic(segment / RECORD_NAME, record.to_json(), durable=True)


def add_mend(segment: Path, round_: int, mended: ScrubRecord) -> None:
    """Add a mend made after a read failed to the round's record; say it in one line."""
    write_record(segment, (read_record(segment) or ScrubRecord()).add(mended))
    if line := scrub_line(round_, mended):
        log.warning("%s", line)


def scrub_slice(parts: Mapping[str, vm.PartEntry], after: str | None, budget: int) -> list[str]:
    """The parts to verify: in name order from the first after `after`, wrapping round, as
    many as fit in `budget` bytes (at least one: a part bigger than the budget is verified
    alone rather than never), each at most once. None when the budget is 0."""
    names = sorted(parts)
    if budget <= 0 or not names:
        return []
    start = bisect.bisect_right(names, after) if after is not None else 0
    chosen: list[str] = []
    total = 0
    for rel in names[start:] + names[:start]:
        size = parts[rel].size
        if chosen and total + size > budget:
            break
        chosen.append(rel)
        total += size
    return chosen


def scrub_carried(
    crawl: CrawlDir,
    version: int,
    carried: Mapping[str, vm.PartEntry],
    budget: int,
    after: str | None,
) -> tuple[ScrubRecord, list[PartRepair]]:
    """Verify the slice of `carried` (parts of published version `version` that the version
    being built links) against their manifest entries, and mend the damaged ones in `version`
    itself as `check --repair` does; the caller brings its links up to date."""
    start = time.monotonic()
    record = ScrubRecord(budget_bytes=budget, last=after)
    vdir = crawl.version_dir(version)
    problems: list[tuple[str, str]] = []
    for rel in scrub_slice(carried, after, budget):
        entry = carried[rel]
        if problem := vm.checksum_problem(vdir / rel, entry):
            problems.append((rel, problem))
        record.parts_verified += 1
        record.bytes_verified += entry.size
        record.last = rel
    repairs = _mend(crawl, version, problems, record)
    record.seconds = round(time.monotonic() - start, 3)
    return record, repairs


def mend_version(crawl: CrawlDir, version: int) -> ScrubRecord | None:
    """What a round does when a read of a part failed (one its scrub had not reached): verify
    every part of published `version` in full (`check`'s verify_version) and mend the damaged
    per-host ones in it as `check --repair` does. None when none was damaged: the failure is
    not theirs."""
    start = time.monotonic()
    report = verify_version(crawl, version)
    problems = [(r, what) for r, what in report.problems if r.partition("/")[0] in PART_TABLES]
    if not problems:
        return None
    manifest = crawl.manifest(version)
    record = ScrubRecord(parts_verified=report.parts)
    record.bytes_verified = sum(e.size for r, e in manifest.items() if r not in report.dropped)
    _mend(crawl, version, problems, record)
    record.seconds = round(time.monotonic() - start, 3)
    return record


def _mend(
    crawl: CrawlDir, version: int, problems: list[tuple[str, str]], record: ScrubRecord
) -> list[PartRepair]:
    """Mend the damaged parts in `version` (integrity.repair_parts), counted in `record`."""
    repairs = repair_parts(crawl, version, problems, aside_dir(crawl)) if problems else []
    record.damaged += len(problems)
    for r in repairs:
        record.restored += r.source is not None
        record.dropped += r.dropped
        mend = {"part": r.rel, "problem": r.what, "restored_from": r.restored_from}
        record.mended.append(mend | {"dropped": r.dropped})
    return repairs


def scrub_line(round_: int, record: ScrubRecord) -> str | None:
    """The round's one line when its scrub found damage, else None."""
    if not record.damaged:
        return None
    said = []
    restored = [m for m in record.mended if m["restored_from"]]
    if restored:
        sources = sorted({m["restored_from"] for m in restored})
        said.append(f"{len(restored)} restored from {' and '.join(sources)}")
    dropped = [m for m in record.mended if m["dropped"]]
    rows = [m for m in dropped if m["part"].partition("/")[0] in ROW_TABLES]
    if rows:
        hosts = sorted({_host(m["part"]) for m in rows})
        said.append(
            f"{len(rows)} dropped: {'its' if len(rows) == 1 else 'their'} partitions are listed "
            f"again when {' and '.join(hosts)} {'is' if len(hosts) == 1 else 'are'} next online"
        )
    said += [f"1 dropped: {dropped_effect(m['part'])}" for m in dropped if m not in rows]
    if stray := len(record.mended) - len(restored) - len(dropped):
        said.append(f"{stray} that no round wrote moved to damaged/")
    mended = (
        "mended" if len(record.mended) == record.damaged else f"found, {len(record.mended)} mended"
    )
    return (
        f"sharecrawl: round {round_}: scrub: {plural(record.damaged, 'damaged part')} {mended} "
        f"({', '.join(said)})"
    )


def _host(rel: str) -> str:
    """The host key of a per-host part's relative path."""
    name = rel.partition("/")[2]
    return (parse_part_file(name) or (name,))[0]
