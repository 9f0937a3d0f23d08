"""Shared fixtures: a small LAN of real tagged media as file:// hosts, and the CLI run
in-process. The smbd fixtures live in tests/smbd.py, the small disk in tests/small_disk.py,
the disk that clones files in tests/cloning_disk.py."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import luigi.configuration
import pytest

from sharecrawl.cli.main import main
from sharecrawl.pipeline.settings import load_defaults
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

    def cli(self, *args: str, runner: str = "inline") -> int:
        extra = ["--crawl-dir", str(self.crawl_dir)]
        if args[0] == "crawl":
            extra += ["--hosts-file", str(self.hosts_file), "--runner", runner]
        return main([args[0], *extra, *args[1:]])

    def crawl(self, rounds: int = 1, runner: str = "inline") -> None:
        assert self.cli("crawl", "--rounds", str(rounds), runner=runner) == 0


@pytest.fixture
def lan(tmp_path: Path) -> LAN:
    return LAN(tmp_path)


@pytest.fixture
def luigi_cfg(tmp_path: Path) -> Iterator[Callable[[str], None]]:
    """Add a config file on top of luigi.cfg, as LUIGI_CONFIG_PATH would; removed after."""
    added: list[Path] = []

    def add(text: str) -> None:
        cfg = tmp_path / f"extra{len(added)}.cfg"
        cfg.write_text(text)
        luigi.configuration.add_config_path(str(cfg))
        added.append(cfg)

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
