"""One on-disk format: a new crawl directory records it (crawldb/FORMAT), and every command
refuses a crawl directory of another format, or one holding a crawldb without the file, in
one line with exit 2, writing nothing. Real crawls of a file:// host."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from sharecrawl.crawl_io.crawldb.crawldir import FORMAT, CrawlDir
from tests.conftest import LAN

COMMANDS = [
    ("crawl",),
    ("search", "madonna"),
    ("sql", "SELECT count(*) FROM files"),
    ("status",),
    # a port out of range: were the crawl dir taken, the refusal would name the port instead
    ("serve", "--port", "70000"),
    ("check",),
    ("check", "--repair"),
    ("watch", "--seconds", "0.2"),
]


def crawled(lan: LAN) -> CrawlDir:
    lan.media("alpha", "music/track01.mp3", artist="Madonna", title="Music")
    lan.write_hosts("alpha")
    lan.crawl()
    return CrawlDir(lan.crawl_dir)


def snapshot(root: Path) -> dict[str, tuple[int, str]]:
    """Every name under `root` with its mtime and its bytes' digest (folders: '')."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            digest = "" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
            found[str(path.relative_to(root))] = (path.stat().st_mtime_ns, digest)
    return found


def test_a_new_crawl_dir_records_the_current_format(lan: LAN) -> None:
    crawl = crawled(lan)
    assert FORMAT == 1
    assert (crawl.crawldb / "FORMAT").read_text() == "1\n"
    assert lan.cli("check") == 0
    lan.crawl()  # a crawl dir of this format is crawled on
    assert crawl.current() == 2


@pytest.mark.parametrize("found", ["0", "7"])
def test_every_command_refuses_another_format_in_one_line_writing_nothing(
    lan: LAN, capsys: pytest.CaptureFixture[str], found: str
) -> None:
    crawl = crawled(lan)
    if found == "0":  # a crawldb without the file: the format before it was recorded
        (crawl.crawldb / "FORMAT").unlink()
    else:
        (crawl.crawldb / "FORMAT").write_text(f"{found}\n")
    before = snapshot(lan.root)
    expected = (
        f"sharecrawl: error: crawl directory {str(lan.crawl_dir)!r} has format {found}, this "
        "sharecrawl reads format 1: crawl again into a new directory (the hosts are listed again)"
    )
    for command in COMMANDS:
        capsys.readouterr()
        extra = ["--hosts-file", str(lan.hosts_file)] if command[0] == "watch" else []
        assert lan.cli(*command, *extra) == 2, command
        out, err = capsys.readouterr()
        assert (out, err.splitlines()) == ("", [expected]), command
    assert snapshot(lan.root) == before
