"""docs/crawl-dir.md names every file and folder a crawl directory can hold: a LAN crawled
three times with the operator's rules and a disabled rule, keeping the last two rounds (the
first one's fetchlog kept), hints written as `watch` writes them (one part damaged and set
aside), a damaged part repaired by `check --repair` (which moves it under damaged/), and a
writer's temporary file left behind; then every name found must be in the page, with its
variable parts spelled as the page spells them."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from sharecrawl.crawl_io.crawldb.atomic import temp_name
from sharecrawl.crawl_io.crawldb.hints import HintsStore, part_name
from sharecrawl.crawl_io.crawldb.hints_writer import HintsWriter
from tests.conftest import LAN

DOC = Path(__file__).resolve().parents[1] / "docs" / "crawl-dir.md"
PER_HOST = {"files", "media", "folders", "prefix_stats", "listing", "fetchlog"}  # <host>.parquet

_RULES = [
    (re.compile(r"^v\d{6}$"), "vNNNNNN"),
    (re.compile(r"^\.v\d{6}\.tmp$"), ".vNNNNNN.tmp"),
    (re.compile(r"^r\d{6}$"), "rNNNNNN"),
    (re.compile(r"^r\d{6}\.parquet$"), "rNNNNNN.parquet"),
    (re.compile(r"^shard-\d{3}-of-\d{3}$"), "shard-<i>-of-<n>"),
    (re.compile(r"^h\d+-\d+\.parquet(?P<rest>.*)$"), "h<first>-<last>.parquet{rest}"),
    (re.compile(r"^\..+\.tmp\d+@[^/]+?(?:\.wal)?$"), ".<name>.tmp<pid>@<machine>"),
    (re.compile(r"^\d+-\d+-\d+\.duckdb$"), "<inode>-<mtime>-<size>.duckdb"),
]


def documented_name(rel: Path, is_dir: bool) -> str:
    """A path in the crawl directory as the page spells it: versions, rounds, hosts, times,
    hint ranges and temporary names by their placeholders; what a repair moved, by its
    folder (it keeps the relative place it had)."""
    parts = list(rel.parts)
    if parts[0] == "damaged" and len(parts) > 1:
        return "damaged/<time>/"
    out = []
    for i, part in enumerate(parts):
        for pattern, spelling in _RULES:
            match = pattern.match(part)
            if match:
                part = spelling.format(**match.groupdict())
                break
        else:
            if i and parts[i - 1] in PER_HOST and part.endswith(".parquet"):
                part = "<host>.parquet"
        if part.startswith(".<name>"):
            return part  # a temporary name, wherever it is
        out.append(part)
    return "/".join(out) + ("/" if is_dir else "")


def undocumented(crawl_dir: Path, doc: str) -> list[str]:
    names = {documented_name(p.relative_to(crawl_dir), p.is_dir()) for p in crawl_dir.rglob("*")}
    return sorted(name for name in names if f"`{name}`" not in doc)


def test_every_name_in_a_crawl_directory_is_documented(lan: LAN, capsys, luigi_cfg) -> None:
    luigi_cfg("[sharecrawl]\nkeep_rounds = 2\n")  # a third round removes the first
    for host in ("alpha", "beta"):
        lan.media(host, "music/Кино/song.mp3", artist="Кино", title="Кукушка")
        lan.media(host, "video/Lost.S01E01.mp4", fmt="mp4")
    lan.write_hosts("alpha", "beta")
    rules = lan.root / "sharecrawl.rules"
    rules.write_text("exclude path=**/cache/**\n")
    assert lan.cli("crawl", "--rules-file", str(rules)) == 0
    (lan.crawl_dir / "rules.disabled").write_text("auto-0123456789ab  # an operator's line\n")
    assert lan.cli("crawl", "--rules-file", str(rules)) == 0
    assert lan.cli("crawl", "--rules-file", str(rules)) == 0
    assert (lan.crawl_dir / "segments" / "fetchlogs" / "r000001.parquet").exists()

    writer = HintsWriter(lan.crawl_dir)  # as `sharecrawl watch` writes
    now = datetime.now(UTC)
    for path in ("a.mp3", "b.mp3"):
        writer.append(
            [
                {
                    "host": "alpha",
                    "share": "music",
                    "path": path,
                    "action": "added",
                    "overflow": False,
                    "seen_at": now,
                }
            ]
        )
    writer.write_watches(
        [
            {
                "host": "alpha",
                "share": "music",
                "state": "watching",
                "since": now,
                "alive_at": now,
                "detail": None,
            }
        ]
    )
    writer.close()
    (HintsStore(lan.crawl_dir).dir / part_name(1, 1)).write_bytes(b"PAR1 garbage")
    HintsWriter(lan.crawl_dir).close()  # the next watcher sets the damaged part aside

    live = sorted((lan.crawl_dir / "crawldb").glob("v*"))[-1]
    (live / "media" / "beta.parquet").write_bytes(b"PAR1 bit rot")
    capsys.readouterr()
    assert lan.cli("check") == 1
    assert lan.cli("check", "--repair") == 0
    segment = lan.crawl_dir / "segments" / "r000002" / "media"
    segment.mkdir(parents=True, exist_ok=True)
    (segment / temp_name(segment / "beta.parquet").name).write_bytes(b"")  # and one of now

    seen = {p.relative_to(lan.crawl_dir).parts[0] for p in lan.crawl_dir.iterdir()}
    assert {
        "LOCK",
        "crawldb",
        "segments",
        "index",
        "hints",
        "damaged",
        "rules.good",
        "rules.auto",
        "rules.disabled",
    } <= seen
    assert (lan.crawl_dir / "rules.good").read_text().strip()  # the operator's rules
    assert list((lan.crawl_dir / "hints").glob("*.damaged"))
    assert undocumented(lan.crawl_dir, DOC.read_text(encoding="utf-8")) == []


def test_an_undocumented_name_is_found(tmp_path: Path) -> None:
    crawl = tmp_path / "crawl"
    (crawl / "crawldb" / "v000003" / "files").mkdir(parents=True)
    (crawl / "crawldb" / "v000003" / "files" / "pc%3A445.parquet").write_bytes(b"")
    (crawl / "crawldb" / "v000003" / "stray.bin").write_bytes(b"")
    (crawl / "segments" / "r000004").mkdir(parents=True)
    doc = (
        "`crawldb/` `crawldb/vNNNNNN/` `crawldb/vNNNNNN/files/` `segments/`\n"
        "`crawldb/vNNNNNN/files/<host>.parquet` `segments/rNNNNNN/`"
    )
    assert undocumented(crawl, doc) == ["crawldb/vNNNNNN/stray.bin"]
    assert (
        documented_name(Path("damaged/20250101T000000Z/crawldb/v000002"), True) == "damaged/<time>/"
    )
    assert (
        documented_name(Path("hints/h3-9.parquet.damaged"), False)
        == "hints/h<first>-<last>.parquet.damaged"
    )
    assert (
        documented_name(Path("segments/r000002/media/.pc.parquet.tmp12@vm-1.lan"), False)
        == ".<name>.tmp<pid>@<machine>"
    )
