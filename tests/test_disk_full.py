"""A real full disk (a small tmpfs, mounted for the test): a round that meets it stops with
one line that says to free space and run the crawl again, no traceback; the crawl directory
stays whole and readable (check, search), keeps no temporary file, and the next crawl, with
space again, finishes the round. Needs root, to mount; skipped otherwise, with why."""

from __future__ import annotations

import errno
import json
import subprocess
from pathlib import Path

import pytest

from sharecrawl.crawl_io.crawldb.disk_full import disk_full_line, is_disk_full
from sharecrawl.crawl_io.crawldb.tempfiles import TEMP_NAME
from tests.cliproc import run_cli
from tests.conftest import LAN
from tests.small_disk import free_all, leave_free


def cli(lan: LAN, *args: str) -> subprocess.CompletedProcess[str]:
    extra = ["--crawl-dir", str(lan.crawl_dir)]
    if args[0] == "crawl":
        extra += ["--hosts-file", str(lan.hosts_file), "--runner", "inline"]
    return run_cli(args[0], *extra, *args[1:])


def titles(lan: LAN, *words: str) -> list[str]:
    found = cli(lan, "search", "--json", *words)
    assert found.returncode == 0, found.stderr
    return [work["title"] for work in json.loads(found.stdout)]


def temp_files(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if TEMP_NAME.match(path.name)]


def test_a_full_disk_is_told_by_its_number_or_its_words_wherever_it_was_raised_from() -> None:
    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert is_disk_full(OSError(errno.EDQUOT, "over quota"))
    try:  # a library's own error, raised while handling the system's
        try:
            raise OSError(errno.ENOSPC, "write")
        except OSError:
            raise RuntimeError("the write failed") from None
    except RuntimeError as e:
        assert is_disk_full(e)
    # DuckDB says the system's words, not the number
    assert is_disk_full(Exception('Could not write file "x.wal": No space left on device'))
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))
    assert not is_disk_full(ValueError("space"))
    line = disk_full_line(OSError(errno.ENOSPC, "No space left on device", "/c/f"), "/c")
    assert line.startswith("a disk is full (No space left on device: /c/f): free space")


# No room: the crawl stops as it takes the lock (it writes who holds it). Little room: the
# round stops in its fetch. More: the fetch and the new version fit, the search index (a
# copy of the live one, updated) does not.
@pytest.mark.parametrize(("free_kib", "stopped_in"), [(0, "lock"), (8, "fetch"), (400, "index")])
def test_a_round_on_a_full_disk_stops_with_one_line_and_the_next_one_finishes_it(
    tmp_path: Path, small_disk: Path, free_kib: int, stopped_in: str
) -> None:
    lan = LAN(tmp_path)
    lan.crawl_dir = small_disk / "crawl"
    lan.media("alpha", "music/song.mp3", artist="Madonna", title="Music")
    lan.media("beta", "share/old.flac", "flac", artist="Kino", title="Kukushka")
    lan.write_hosts("alpha", "beta")
    first = cli(lan, "crawl")
    assert first.returncode == 0, first.stderr
    lan.media("beta", "share/late/track10.mp3", artist="Kino", title="Gruppa krovi")

    leave_free(small_disk, free_kib * 1024)
    stopped = cli(lan, "crawl")
    assert stopped.returncode == 1, stopped.stderr
    last = stopped.stderr.strip().splitlines()[-1]
    assert "No space left on device" in last
    if stopped_in == "lock":
        assert last.startswith("sharecrawl: error: a disk is full ("), stopped.stderr
        assert last.endswith("lives, then run the command again")
    else:
        assert last.startswith("sharecrawl: round 2 failed: a disk is full ("), stopped.stderr
        assert f"free space where the crawl directory ({lan.crawl_dir}; its versions" in last
        assert "run the crawl again: it goes on from where this round stopped" in last
    assert ("search.duckdb" in last) == (stopped_in == "index"), last
    for noise in ("Traceback", "Luigi Execution Summary", "a bug, please report it"):
        assert noise not in stopped.stderr, stopped.stderr
    # whole and readable: the live version checks out, search answers from round 1's index
    checked = cli(lan, "check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert titles(lan, "kino") == ["Kukushka"]
    assert temp_files(lan.crawl_dir) == []

    free_all(small_disk)
    again = cli(lan, "crawl")
    assert again.returncode == 0, again.stderr
    assert sorted(titles(lan, "kino")) == ["Gruppa krovi", "Kukushka"]
    assert json.loads(cli(lan, "status", "--json").stdout)["round"] == 2


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message")


def test_an_error_without_a_message_is_no_full_disk() -> None:
    assert not is_disk_full(Unprintable())  # asked from Luigi's logging: it must not raise
