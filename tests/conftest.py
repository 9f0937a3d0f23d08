"""Shared fixtures: a small LAN of real tagged media as file:// hosts, and the console script
run on it (tests/cliproc.py). The smbd fixtures live in tests/smbd.py, the small disk in
tests/small_disk.py, the disk that clones files in tests/cloning_disk.py."""

from __future__ import annotations

import configparser
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import luigi.configuration
import pytest

from sharecrawl.pipeline.settings import load_defaults
from tests.cliproc import run_cli
from tests.media import make_media

pytest_plugins = ["tests.smbd", "tests.small_disk", "tests.cloning_disk"]


class LAN:
    """A LAN of file:// hosts under `root/hosts`, with a hosts file, and a crawl directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.hosts_dir = root / "hosts"
        self.hosts_file = root / "hosts.txt"
        self.crawl_dir = root / "crawl"
        self._clock = 1_600_000_000

    def host(self, name: str) -> Path:
        return self.hosts_dir / name

    def write_hosts(self, *names: str) -> None:
        self.hosts_file.write_text("".join(f"file://{self.host(n)}\n" for n in names))

    def tick(self, path: Path) -> None:
        """Give a file a new, distinct mtime: changes are never hidden by equal times."""
        self._clock += 100
        os.utime(path, (self._clock, self._clock))

    def media(self, host: str, relpath: str, fmt: str = "mp3", **tags: object) -> Path:
        path = make_media(self.host(host) / relpath, fmt, **tags)
        self.tick(path)
        return path

    def cli(self, *args: str, runner: str = "inline", stdin: str | None = None) -> int:
        """`sharecrawl COMMAND --crawl-dir ... ARGS` from this process's working directory;
        its output goes to this process's sys.stdout and sys.stderr (capsys reads them), its
        exit status back."""
        extra = ["--crawl-dir", str(self.crawl_dir)]
        if args[0] == "crawl":
            extra += ["--hosts-file", str(self.hosts_file), "--runner", runner]
        done = run_cli(args[0], *extra, *args[1:], cwd=Path.cwd(), stdin=stdin)
        sys.stdout.write(done.stdout)
        sys.stderr.write(done.stderr)
        return done.returncode

    def crawl(self, rounds: int = 1, runner: str = "inline") -> None:
        assert self.cli("crawl", "--rounds", str(rounds), runner=runner) == 0

    def crawl_here(self, rounds: int = 1, runner: str = "inline") -> None:
        """Rounds run by the pipeline's Python API in this process, as `crawl` runs them, for
        a test that moves a part of the pipeline (monkeypatch) where no child would see it."""
        from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
        from sharecrawl.crawl_io.crawldb.integrity import verify_round_start
        from sharecrawl.crawl_io.crawldb.lock import CrawlLock
        from sharecrawl.pipeline.rounds import run_rounds
        from sharecrawl.pipeline.settings import read_settings

        crawl = CrawlDir(self.crawl_dir)
        crawl.root.mkdir(parents=True, exist_ok=True)
        with CrawlLock(crawl.root).acquire():
            verify_round_start(crawl)
            crawl.make()
            given = {"crawl_dir": str(crawl.root), "hosts_file": str(self.hosts_file)}
            run_rounds(read_settings(**given, runner=runner), rounds)


@pytest.fixture
def lan(tmp_path: Path) -> LAN:
    return LAN(tmp_path)


@pytest.fixture
def luigi_cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """Add a config file on top of luigi.cfg, in this process and for the console script:
    Luigi reads one LUIGI_CONFIG_PATH file, so the child gets every added file (over one the
    environment named) merged into one. Removed after."""
    added: list[Path] = []
    merged_path = tmp_path / "luigi-merged.cfg"
    first = [os.environ["LUIGI_CONFIG_PATH"]] if "LUIGI_CONFIG_PATH" in os.environ else []

    def add(text: str) -> None:
        cfg = tmp_path / f"extra{len(added)}.cfg"
        cfg.write_text(text)
        luigi.configuration.add_config_path(str(cfg))
        added.append(cfg)
        merged = configparser.RawConfigParser()  # raw: Luigi interpolates in the child
        merged.read([*first, *map(str, added)])
        with merged_path.open("w") as out:
            merged.write(out)
        monkeypatch.setenv("LUIGI_CONFIG_PATH", str(merged_path))

    yield add
    for cfg in added:  # Luigi skips a config file that is gone
        cfg.unlink()
    load_defaults()


@pytest.fixture
def run_json(capsys: pytest.CaptureFixture[str]) -> Callable[..., object]:
    """Run a `--json` CLI command of a LAN and return its parsed output."""

    def run(lan: LAN, *args: str) -> object:
        capsys.readouterr()
        assert lan.cli(*args, "--json") == 0
        return json.loads(capsys.readouterr().out)

    return run
