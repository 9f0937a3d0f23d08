"""Crash consistency: a round killed with SIGKILL at any point, then run again, ends exactly
as the same round run without a kill: the same files, media, partitions and hosts (on their
content, not their times), the same scan history per partition, the same fetch log and
prefix statistics; the rerun finishes that round and starts no other; no temporary file is
left. The LAN has two file:// hosts and one smbd, a third file:// host is new in the round.

The round is killed at random moments (a seeded RNG over the measured length of an
uninterrupted round, from the moment its segment appears to its finished index, drawn again
earlier when the round ended first) and at moments found by watching its files: after the
first host's fetch, after the fetch, while the version is built, after publish before Index.
Each kill starts from a copy of the same prepared crawl directory.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.pipeline.targets import IndexedVersion
from tests.cliproc import cli_argv
from tests.conftest import LAN
from tests.media import make_media
from tests.smbd import SmbServer, chmod_tree, make_base_dir

pytestmark = [pytest.mark.slow, pytest.mark.smb]

SEED = 1307
RANDOM_KILLS = 24
AT_ONCE = 2  # kill points run side by side (two cores)
# Splits by the bytes of media paths only (seconds are measured, so not repeatable).
# Every host is up: a liveness or probe timeout could only be the machine's load, and a host
# judged offline (or unprobed) by one run and not the other would differ for no crash's sake.
CONFIG = """[sharecrawl]
partition_max_seconds = 1e9
partition_max_bytes = 100
host_timeout_s = 30
liveness_timeout_s = 10
"""
TIMES = {
    "first_seen",
    "last_seen",
    "tagged_at",
    "last_changed",
    "last_scan",
    "last_change",
    "started",
    "duration_s",
    "listing_s",
    "tags_s",
    "last_check",
    "checked_at",
    "rate_per_h",
    "est_scan_s",
    "list_s_per_folder",
    "tag_s_per_file",
    "history",
    "worker",  # which process fetched it: a rerun's are others
}
TEMP = re.compile(r"^\..+\.tmp")


# -- the LAN ---------------------------------------------------------------------------


def build(lan: LAN, smb_root: Path) -> None:
    for host, share in (("alpha", "music"), ("beta", "share")):
        for folder in ("Albums", "Jazz", "Live", "Misc", "Rock"):
            for t in range(3):
                lan.media(
                    host,
                    f"{share}/{folder}/{host} {folder} {t:02d}.mp3",
                    artist=f"{host} {folder}",
                    title=f"Song {t}",
                )
    (lan.host("beta") / "share/Misc/readme.txt").write_text("not media")
    for folder, fmt in (("Kino", "flac"), ("Madonna", "ogg"), ("Queen", "m4a")):
        for t in range(2):
            smb_media(smb_root, f"{folder}/{folder} {t:02d}.{fmt}", fmt, title=f"Track {t}")
    (smb_root / "private").mkdir(parents=True, exist_ok=True)


def smb_media(smb_root: Path, relpath: str, fmt: str = "mp3", **tags: object) -> None:
    path = make_media(smb_root / "media" / relpath, fmt, artist=relpath.split("/")[0], **tags)
    stamp = 1_600_000_000 + 100 * sum(1 for _ in smb_root.rglob("*.*"))
    os.utime(path, (stamp, stamp))
    chmod_tree(smb_root)


def change(lan: LAN, smb_root: Path) -> None:
    """Added, retagged and deleted files on every host; a new folder; a new host."""
    lan.media("alpha", "music/Rock/alpha Rock 03.mp3", artist="alpha Rock", title="Added")
    lan.media("alpha", "music/Live/alpha Live 01.mp3", artist="alpha Live", title="Retagged")
    os.remove(lan.host("alpha") / "music/Jazz/alpha Jazz 02.mp3")
    lan.tick(lan.host("alpha") / "music/Jazz")
    for t in range(4):
        lan.media("beta", f"share/New/beta New {t:02d}.mp3", artist="beta New", title=f"New {t}")
    os.remove(lan.host("beta") / "share/Misc/readme.txt")
    lan.tick(lan.host("beta") / "share/Misc")
    smb_media(smb_root, "Kino/Kino 02.flac", "flac", title="Track 2")
    os.remove(smb_root / "media/Queen/Queen 01.m4a")
    lan.media("gamma", "films/clip01.mp4", "mp4", title="Clip")
    lan.media("gamma", "films/song.mp3", artist="gamma", title="Song")


# -- what a crawl directory holds ------------------------------------------------------


def content(crawl_dir: Path) -> dict[str, list]:
    """The live version's tables on their content columns, sorted; each partition's
    history as its changed flags in order; the round's fetch log."""
    crawl = CrawlDir(crawl_dir)
    live = crawl.current()
    tables = {
        name: crawl.read(live, name)
        for name in ("files", "media", "partitions", "hosts", "prefix_stats")
    }
    tables["fetchlog"] = pq.read_table(crawl.segment_dir(live) / "fetchlog.parquet")
    out: dict[str, list] = {}
    for name, table in tables.items():
        columns = [c for c in table.column_names if c not in TIMES]
        rows = table.select(columns).to_pylist()
        out[name] = sorted((tuple(r.items()) for r in rows), key=repr)
    partitions = tables["partitions"].select(["partition_id", "history"]).to_pylist()
    out["history"] = sorted(
        (p["partition_id"], [e["changed"] for e in p["history"] or []]) for p in partitions
    )
    return out


def round_done(crawl_dir: Path, round_: int = 2) -> bool:
    crawl = CrawlDir(crawl_dir)
    try:
        return crawl.current() >= round_ and IndexedVersion(str(crawl_dir), round_).exists()
    except Exception:  # a half-written index while the round runs
        return False


def round_stage(crawl_dir: Path) -> str:
    """How far round 2 got: the last of its outputs that exists."""
    crawl = CrawlDir(crawl_dir)
    seg = crawl.segment_dir(2)
    if round_done(crawl_dir):
        return "done"
    if crawl.current() == 2:
        return "published"
    if (crawl.crawldb / ".v000002.tmp").exists() or crawl.version_dir(2).exists():
        return "building the version"
    for name in ("fetchlog.parquet", "fetchlog", "fetchlist.parquet", "inject.parquet"):
        if (seg / name).exists():
            return f"{name} written" if name != "fetchlog" else "fetching"
    return "begun" if seg.exists() else "not begun"


def temp_names(root: Path) -> list[str]:
    return [
        os.path.join(f, n)
        for f, dirs, files in os.walk(root)
        for n in dirs + files
        if TEMP.match(n)
    ]


# -- running crawls --------------------------------------------------------------------


@dataclass
class Setup:
    hosts_file: Path
    cfg: Path
    prepared: Path  # the crawl directory after round 1


def crawl_process(setup: Setup, crawl_dir: Path, tmpdir: Path) -> subprocess.Popen:
    cmd = cli_argv(
        "crawl",
        "--rounds",
        "1",
        "--crawl-dir",
        str(crawl_dir),
        "--hosts-file",
        str(setup.hosts_file),
        "--runner",
        "inline",
    )
    env = {**os.environ, "LUIGI_CONFIG_PATH": str(setup.cfg), "TMPDIR": str(tmpdir)}
    return subprocess.Popen(
        cmd,
        cwd=tmpdir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


@dataclass
class KillPoint:
    name: str
    delay_s: float | None = None  # kill this long after the round's segment appeared
    reached: Callable[[Path], bool] | None = None  # or as soon as this holds


@dataclass
class Outcome:
    point: KillPoint
    in_round: bool  # killed while the round ran (its segment begun, not finished)
    stage: str  # what the round had written when it was killed
    live_after_kill: int
    content_after_kill: dict[str, list]  # what readers saw between the kill and the rerun
    rerun_error: str
    content: dict[str, list] | None
    temp_files: list[str]
    job_dirs: list[str]
    next_segment: bool


def kill_and_rerun(setup: Setup, point: KillPoint, work: Path) -> Outcome:
    crawl_dir, tmpdir = work / "crawl", work / "tmp"
    shutil.copytree(setup.prepared, crawl_dir, symlinks=True)
    tmpdir.mkdir()
    seg = CrawlDir(crawl_dir).segment_dir(2)
    proc = crawl_process(setup, crawl_dir, tmpdir)
    began: float | None = None
    while proc.poll() is None:
        if began is None and seg.exists():
            began = time.monotonic()
        if point.delay_s is not None and began and time.monotonic() - began >= point.delay_s:
            break
        if point.reached is not None and point.reached(crawl_dir):
            break
        time.sleep(0.003)
    in_round = proc.poll() is None and seg.exists() and not round_done(crawl_dir)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate()
    stage = round_stage(crawl_dir)
    live = CrawlDir(crawl_dir).current()
    seen = content(crawl_dir)
    error = ""
    if not round_done(crawl_dir):
        rerun = crawl_process(setup, crawl_dir, tmpdir)
        _, stderr = rerun.communicate(timeout=300)
        if rerun.returncode:
            error = f"exit {rerun.returncode}: {stderr.decode(errors='replace')[-2000:]}"
    return Outcome(
        point,
        in_round,
        stage,
        live,
        seen,
        error,
        None if error else content(crawl_dir),
        temp_names(crawl_dir),
        [p.name for p in tmpdir.glob("sharecrawl-mrjob-*")],
        CrawlDir(crawl_dir).segment_dir(3).exists(),
    )


def current_is(version: int) -> Callable[[Path], bool]:
    def reached(crawl_dir: Path) -> bool:
        try:
            return CrawlDir(crawl_dir).current() == version
        except ValueError:
            return False

    return reached


def deterministic_points() -> list[KillPoint]:
    def seg(crawl_dir: Path) -> Path:
        return CrawlDir(crawl_dir).segment_dir(2)

    return [
        KillPoint("first host fetched", reached=lambda c: any((seg(c) / "fetchlog").glob("*"))),
        KillPoint("fetch done", reached=lambda c: (seg(c) / "fetchlog.parquet").exists()),
        KillPoint("version being built", reached=lambda c: (c / "crawldb/.v000002.tmp").exists()),
        KillPoint("published, before Index", reached=current_is(2)),
    ]


# -- the test --------------------------------------------------------------------------


@pytest.fixture
def setup(
    lan: LAN, smbd_factory: Callable[..., SmbServer], luigi_cfg: Callable[[str], None]
) -> Iterator[Setup]:
    smb_root = make_base_dir() / "tree"
    build(lan, smb_root)
    server = smbd_factory(root_dir=smb_root)
    lan.write_hosts("alpha", "beta")
    lan.hosts_file.write_text(lan.hosts_file.read_text() + f"{server.url}/media\n")
    luigi_cfg(CONFIG)
    lan.crawl()
    assert CrawlDir(lan.crawl_dir).read(1, "partitions").num_rows > 3  # split into ranges
    change(lan, smb_root)
    lan.hosts_file.write_text(lan.hosts_file.read_text() + f"file://{lan.host('gamma')}\n")
    cfg = lan.root / "crash.cfg"
    cfg.write_text(CONFIG)
    yield Setup(lan.hosts_file, cfg, lan.crawl_dir)
    shutil.rmtree(smb_root.parent, ignore_errors=True)


def test_a_round_killed_anywhere_and_rerun_equals_an_uninterrupted_round(setup: Setup) -> None:
    work = Path(tempfile.mkdtemp(prefix="sc-crash-"))
    try:
        _check(setup, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _check(setup: Setup, work: Path) -> None:
    # the uninterrupted round, timed from the start of its segment to its end
    reference, tmpdir = work / "reference" / "crawl", work / "reference" / "tmp"
    shutil.copytree(setup.prepared, reference, symlinks=True)
    tmpdir.mkdir()
    seg = CrawlDir(reference).segment_dir(2)
    began: list[float] = []  # when its segment appeared, and when its index was done
    proc = crawl_process(setup, reference, tmpdir)
    start = time.monotonic()

    def watch() -> None:
        while proc.poll() is None and not seg.exists():
            time.sleep(0.003)
        began.append(time.monotonic() - start)
        while proc.poll() is None and not round_done(reference):
            time.sleep(0.003)
        began.append(time.monotonic() - start)

    watcher = threading.Thread(target=watch)
    watcher.start()
    _, stderr = proc.communicate(timeout=300)
    watcher.join()
    window = began[1] - began[0]  # the round itself, not the process' exit after it
    assert proc.returncode == 0, stderr.decode(errors="replace")
    expected = content(reference)
    assert len(expected["history"]) > 6 and any(flags for _, flags in expected["history"])

    rng = random.Random(SEED)
    points = [
        KillPoint(f"random {i}", delay_s=rng.uniform(0, window)) for i in range(RANDOM_KILLS)
    ] + deterministic_points()

    def run(numbered: tuple[int, KillPoint]) -> list[Outcome]:
        i, point = numbered
        tries = [kill_and_rerun(setup, point, work / f"k{i}")]
        # A quieter machine than the reference's can end the round before a late kill: that
        # kill is drawn again, earlier, so the random kills still cover the round. Every try
        # is checked in full.
        while not tries[-1].in_round and point.delay_s is not None and len(tries) < 3:
            point = KillPoint(f"{point.name} redrawn", delay_s=point.delay_s / 2)
            tries.append(kill_and_rerun(setup, point, work / f"k{i}.{len(tries)}"))
        return tries

    with ThreadPoolExecutor(AT_ONCE) as pool:
        tried = list(pool.map(run, enumerate(points)))
    outcomes = [tries[-1] for tries in tried]

    before = content(setup.prepared)
    for o in (o for tries in tried for o in tries):
        where = f"killed at {o.point.name} ({o.point.delay_s})"
        assert o.live_after_kill in (1, 2), where
        assert o.content_after_kill == (before, expected)[o.live_after_kill - 1], where
        assert not o.rerun_error, f"{where}: {o.rerun_error}"
        assert o.temp_files == [], where
        assert o.job_dirs == [], where
        assert not o.next_segment, f"{where}: the rerun began round 3"
        assert o.content is not None
        for table, rows in expected.items():
            assert o.content[table] == rows, f"{where}: {table} differs"
    in_round = [o for o in outcomes if o.in_round]
    assert len(in_round) >= 20, [(o.point.name, o.stage) for o in outcomes]
    stages = {o.stage for o in in_round}
    assert {"fetching", "building the version", "published"} <= stages, stages
    for o in outcomes[RANDOM_KILLS:]:
        assert o.in_round, f"{o.point.name}: the round ended before the kill"
    published = outcomes[-1]
    assert published.live_after_kill == 2  # killed between publish and Index
