"""A crawl's settings travel as a task parameter: two crawls with different settings in one
process each use their own, every task of a round gets them from the one above, and the
defaults come from the package's own luigi.cfg, so the console script crawls and shows its
defaults from a folder with no config file at all."""

from __future__ import annotations

import configparser
import os
import re
import subprocess
import sys
from dataclasses import fields, replace
from pathlib import Path

import luigi
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import sharecrawl
from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.crawl_io.crawldb.lock import CrawlLock
from sharecrawl.pipeline.index import Index
from sharecrawl.pipeline.rounds import run_rounds
from sharecrawl.pipeline.settings import (
    LUIGI_OWN,
    PACKAGED_CONFIG,
    SettingError,
    Settings,
    SettingsParameter,
    job_runner,
    read_settings,
)
from tests.conftest import LAN

SCRIPT = Path(sys.executable).parent / "sharecrawl"


def rounds(settings: Settings, n: int = 1) -> None:
    """`n` more rounds through the pipeline's API, under the crawl's lock as `crawl` runs them."""
    crawl = CrawlDir(settings.crawl_dir)
    crawl.root.mkdir(parents=True, exist_ok=True)
    with CrawlLock(crawl.root).acquire():
        run_rounds(settings, n)


def fetched(crawl: CrawlDir, round_: int) -> list[tuple[str, str]]:
    """(host, status) of each partition a round's fetch log names (kept in
    segments/fetchlogs/ once its segment is removed), sorted."""
    kept = crawl.segments / "fetchlogs" / f"{crawl.segment_dir(round_).name}.parquet"
    log = pq.read_table(kept if kept.exists() else crawl.segment_dir(round_) / "fetchlog.parquet")
    return sorted(zip(log["host"].to_pylist(), log["status"].to_pylist(), strict=True))


def paths(crawl: CrawlDir) -> list[str]:
    files = crawl.read(crawl.current(), "files")
    return sorted(files.filter(pc.invert(files["is_dir"]))["path"].to_pylist())


def test_two_crawls_in_one_process_each_use_their_own_settings(tmp_path: Path) -> None:
    """Rounds of two LANs interleaved in one process, with their own hosts files, crawl dirs,
    rules files, statistics depths, retention and (one round) hinted-only: each round did
    what its own settings say, whatever the other crawl was given."""
    a, b = LAN(tmp_path / "a"), LAN(tmp_path / "b")
    for lan, host, artist in ((a, "alpha", "Kino"), (b, "beta", "Madonna")):
        lan.media(host, f"share/music/{artist}/Best/01 Song.mp3", artist=artist, title="Song")
        lan.media(host, "share/junk/x.mp3", artist="Nobody", title="Junk")
        lan.write_hosts(host)
    rules = tmp_path / "a.rules"
    rules.write_text("exclude host=alpha path=junk\n")
    sa = read_settings(
        hosts_file=a.hosts_file,
        crawl_dir=a.crawl_dir,
        rules_file=rules,
        runner="inline",
        stats_depth=1,
        keep_rounds=2,
    )
    sb = read_settings(
        hosts_file=b.hosts_file,
        crawl_dir=b.crawl_dir,
        rules_file=tmp_path / "none.rules",  # not there: no rules
        runner="inline",
        stats_depth=3,
        keep_rounds=0,
    )
    ca, cb = CrawlDir(a.crawl_dir), CrawlDir(b.crawl_dir)

    rounds(sa)
    rounds(sb)
    rounds(sa)
    rounds(replace(sb, hinted_only=True))  # no hints: a round that scans nothing
    rounds(sa)

    # each crawl listed its own hosts file's host
    assert {h for h, _ in fetched(ca, 1)} == {"alpha"}
    assert {h for h, _ in fetched(cb, 1)} == {"beta"}
    # its own rules, snapshot in its segment: A's excludes junk/, B had none
    assert "exclude host=alpha path=junk" in (ca.segment_dir(3) / "rules.txt").read_text()
    assert "exclude" not in (cb.segment_dir(2) / "rules.txt").read_text()
    assert paths(ca) == ["music/Kino/Best/01 Song.mp3"]
    assert paths(cb) == ["junk/x.mp3", "music/Madonna/Best/01 Song.mp3"]
    # its own statistics depth
    assert max(ca.read(3, "prefix_stats")["depth"].to_pylist()) == 1
    assert max(cb.read(2, "prefix_stats")["depth"].to_pylist()) == 3
    # B's second round took hinted partitions only (there were none); A's rounds scanned
    assert fetched(cb, 2) == []
    assert fetched(ca, 2) and all(h == "alpha" for h, _ in fetched(ca, 2))
    # A keeps two rounds, B every one
    assert sorted(p.name for p in ca.segments.glob("r*")) == ["r000002", "r000003"]
    assert sorted(p.name for p in cb.segments.glob("r*")) == ["r000001", "r000002"]


def tasks_below(task: luigi.Task) -> list[luigi.Task]:
    found = [task]
    for dep in luigi.task.flatten(task.requires()):
        found += tasks_below(dep)
    return found


def test_every_task_of_a_round_gets_the_settings_and_they_are_not_in_its_id() -> None:
    ours = read_settings(crawl_dir="/crawl", scheduler_url="http://127.0.0.1:8082/")
    other = replace(ours, policy="poisson", crawlers=9, fetch_shards=3)
    below = tasks_below(Index(crawl_dir="/crawl", round=2, settings=other))
    assert {type(t).__name__ for t in below} == {
        "Index",
        "Update",
        "Fetch",
        "FetchShard",
        "Generate",
        "Inject",
        "PublishedRound",
    }
    assert sum(type(t).__name__ == "FetchShard" for t in below) == 3  # other's fetch_shards
    assert {t.settings for t in below if hasattr(t, "settings")} == {other}
    # a rerun, or a --join worker, with other settings names the same tasks
    assert Index(crawl_dir="/crawl", round=2, settings=ours).task_id == below[0].task_id
    assert "poisson" not in below[0].task_id


def test_settings_go_through_luigi_as_json_and_back() -> None:
    ours = replace(read_settings(crawl_dir="/c d/é"), host_timeout_s=7.5, hinted_only=True)
    text = SettingsParameter().serialize(ours)
    assert SettingsParameter().parse(text) == ours
    assert '"host_timeout_s": 7.5' in text and '"crawl_dir": "/c d/\\u00e9"' in text
    with pytest.raises(ValueError, match="do not read here"):
        Settings.from_json(text.replace('"crawlers"', '"crawlerz"'))


def test_the_packaged_luigi_cfg_sets_every_setting_and_nothing_else() -> None:
    assert PACKAGED_CONFIG == Path(sharecrawl.__file__).resolve().parent / "luigi.cfg"
    packaged = configparser.RawConfigParser()
    assert packaged.read(PACKAGED_CONFIG) == [str(PACKAGED_CONFIG)]
    options = set(packaged.options("sharecrawl"))
    assert options == {f.name for f in fields(Settings)} - set(LUIGI_OWN)
    assert packaged.get("sharecrawl", "host_timeout_s") == "30"


def test_a_setting_that_does_not_parse_is_named(luigi_cfg) -> None:
    luigi_cfg("[sharecrawl]\ncrawlers = many\n")
    with pytest.raises(SettingError, match=r"\[sharecrawl\] crawlers 'many' is not a valid"):
        read_settings()
    assert read_settings(crawlers=3).crawlers == 3  # a flag over it needs no parse


def test_the_jobs_runner_sees_the_crawl_dir_where_the_settings_mount_it(tmp_path: Path) -> None:
    spark = replace(read_settings(), runner="spark", cluster_crawl_dir="/mnt/crawl")
    runner = job_runner(spark, tmp_path)
    assert runner.task_path(tmp_path / "segments" / "r000001") == "/mnt/crawl/segments/r000001"
    assert runner.task_path("/elsewhere/x") == "/elsewhere/x"  # outside the crawl dir
    local = job_runner(replace(spark, runner="local"), tmp_path)
    assert local.task_path(tmp_path / "segments") == str(tmp_path / "segments")


# -- the console script, from a folder with no luigi.cfg and no LUIGI_CONFIG_PATH -------------


def bare_run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if not SCRIPT.exists():
        pytest.skip(f"no console script {SCRIPT}: `make install` installs it")
    if Path("/etc/luigi/luigi.cfg").exists() or Path("/etc/luigi/client.cfg").exists():
        pytest.skip("/etc/luigi holds a config file: the packaged defaults are not alone")
    env = {k: v for k, v in os.environ.items() if k != "LUIGI_CONFIG_PATH"}
    return subprocess.run(
        [str(SCRIPT), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
        start_new_session=True,
    )


def option_help(help_text: str, flag: str) -> str:
    """The help of one option, its lines joined."""
    found = re.search(rf"^ +{re.escape(flag)}\b(.*?)(?=^ +-|\Z)", help_text, re.M | re.S)
    assert found, f"{flag} is not in the help"
    return " ".join(found[1].split())


@pytest.mark.parametrize(
    ("command", "flag", "default"),
    [
        ("crawl", "--crawlers", "4"),
        ("crawl", "--round-seconds", "3600"),
        ("crawl", "--policy", "optimal"),
        ("crawl", "--crawl-dir", "crawl"),
        ("sql", "--timeout", "300"),
        ("serve", "--crawl-dir", "crawl"),
        ("watch", "--hosts-file", "hosts.txt"),
    ],
)
def test_help_shows_the_packaged_defaults(
    tmp_path: Path, command: str, flag: str, default: str
) -> None:
    done = bare_run(tmp_path, command, "--help")
    assert done.returncode == 0, done.stderr
    text = option_help(done.stdout, flag)
    assert re.search(rf"default\W+{re.escape(default)}\b", text), text


COMMANDS = "crawl search sql status check serve watch demo simulate".split()


def test_the_whole_command_line_where_no_one_command_is_named(tmp_path: Path) -> None:
    """A command's own run builds only its options (cli.parser); the top help, a mistyped
    command and a command's help after the global flag still see them all."""
    top = bare_run(tmp_path, "--help")
    assert top.returncode == 0, top.stderr
    assert all(re.search(rf"^    {name} +\S", top.stdout, re.M) for name in COMMANDS), top.stdout
    typo = bare_run(tmp_path, "serch", "madonna")
    assert typo.returncode == 2 and typo.stdout == ""
    assert "invalid choice: 'serch' (choose from " + ", ".join(map(repr, COMMANDS)) in typo.stderr
    serve = bare_run(tmp_path, "--verbose", "serve", "--help")
    assert serve.returncode == 0 and "--port" in serve.stdout, serve.stderr
    wrong = bare_run(tmp_path, "search", "--port", "1", "madonna")  # serve's option, not search's
    assert wrong.returncode == 2 and "unrecognized arguments: --port (" in wrong.stderr


def test_a_crawl_needs_no_config_file_but_the_packaged_one(tmp_path: Path) -> None:
    """Every setting a round reads (host_timeout_s, liveness_timeout_s, partition limits...)
    comes from the package's luigi.cfg when no other config file exists."""
    lan = LAN(tmp_path)
    lan.media("alpha", "music/song.mp3", artist="Madonna", title="Music")
    lan.write_hosts("alpha")
    empty = tmp_path / "empty"
    empty.mkdir()
    done = bare_run(empty, "crawl", "--hosts-file", str(lan.hosts_file), "--runner", "inline")
    assert done.returncode == 0, done.stderr[-3000:]
    crawl = CrawlDir(empty / "crawl")  # the packaged crawl_dir, in the working folder
    assert crawl.current() == 1
    assert fetched(crawl, 1) == [("alpha", "new")]
    assert sorted(p.name for p in empty.iterdir()) == ["crawl"]  # no config file appeared
