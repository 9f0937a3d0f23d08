"""Where things are in a crawl directory (docs/crawl-dir.md) and which version is live: what
every reader needs first, without Arrow, so a cold `sharecrawl search` does not load it."""

from __future__ import annotations

import os
import re
from pathlib import Path

from sharecrawl.crawl_io.config_error import ConfigError

LOCK_NAME = "LOCK"  # the crawl lock's file (crawl_io.crawldb.lock)
FORMAT = 1  # the on-disk format this sharecrawl reads and writes; crawldb/FORMAT records it
FORMAT_NAME = "FORMAT"
MANIFEST_NAME = "MANIFEST.json"  # written last: a version folder without it is unfinished
VERSION_NAME = re.compile(r"v(\d{6,})")
SEGMENT_NAME = re.compile(r"r(\d{6,})")  # segments/r000012: round 12


class CrawlDamaged(Exception):
    """The crawldb cannot be used as it is: one line naming what, and saying to repair it."""

    def __init__(self, root: Path, what: str) -> None:
        super().__init__(f"{what}; run `sharecrawl check --crawl-dir {root} --repair`")
        self.what = what


class CrawlLayout:
    """A crawl directory's paths, format and live version (CrawlDir adds its tables)."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.crawldb = self.root / "crawldb"
        self.segments = self.root / "segments"
        self.index = self.root / "index" / "search.duckdb"

    def check(self, *, create: bool) -> None:
        """Raise ConfigError unless this is a crawl directory (or, with create, can be one)."""
        if self.crawldb.is_dir():
            self.check_format()
            return
        if self.root.exists() and not self.root.is_dir():
            raise ConfigError(f"crawl directory {str(self.root)!r} is a file")
        # a first crawl creates the folder and its LOCK before crawldb/
        if self.root.is_dir() and any(p.name != LOCK_NAME for p in self.root.iterdir()):
            raise ConfigError(
                f"{str(self.root)!r} is not a crawl directory (no crawldb/) and is not empty"
            )
        if not create:
            raise ConfigError(f"{str(self.root)!r} is not a crawl directory: crawl it first")

    def check_format(self) -> None:
        """Raise ConfigError unless the crawldb is of FORMAT (or holds nothing yet)."""
        try:
            found = (self.crawldb / FORMAT_NAME).read_text().strip()
        except FileNotFoundError:
            if not any(not p.name.startswith(".") for p in self.crawldb.iterdir()):
                return  # made but never published into (watch, a first crawl killed early)
            found = "0"
        except (OSError, UnicodeDecodeError) as e:
            found = f"unreadable ({e})"
        if found != str(FORMAT):
            shown = found if found.isdigit() or found.startswith("unreadable") else repr(found[:20])
            raise ConfigError(
                f"crawl directory {str(self.root)!r} has format {shown}, this sharecrawl reads "
                f"format {FORMAT}: crawl again into a new directory (the hosts are listed again)"
            )

    def damaged(self, what: str) -> CrawlDamaged:
        return CrawlDamaged(self.root, what)

    def versions(self) -> list[int]:
        """Numbers of the version folders present (published or not), oldest first."""
        if not self.crawldb.is_dir():
            return []
        found = (VERSION_NAME.fullmatch(p.name) for p in self.crawldb.iterdir() if p.is_dir())
        return sorted(int(m[1]) for m in found if m)

    def current(self) -> int:
        """The live version, 0 before the first is published; CrawlDamaged when CURRENT is
        empty, garbled, names an incomplete version, or is missing after rounds were published."""
        path = self.crawldb / "CURRENT"
        try:
            text = path.read_text()
        except FileNotFoundError:
            # a first round killed between its rename and CURRENT leaves v000001 alone
            if any(v > 1 for v in self.versions()):
                raise self.damaged(f"{path} is missing but published versions exist") from None
            return 0
        except (OSError, UnicodeDecodeError) as e:
            raise self.damaged(f"{path} cannot be read ({e})") from None
        name = text.strip()
        if not name:
            raise self.damaged(f"{path} is empty")
        if (match := VERSION_NAME.fullmatch(name)) is None:
            raise self.damaged(f"{path} is garbled ({name[:40]!r})")
        version = int(match[1])
        if problem := self.incomplete(version):
            raise self.damaged(f"{path} names {name}, {problem}")
        return version

    def incomplete(self, version: int) -> str | None:
        """Why `version` is not a complete version, or None when it is."""
        vdir = self.version_dir(version)
        if not vdir.is_dir():
            return "which does not exist"
        if (vdir / MANIFEST_NAME).exists():
            return None
        return f"whose {MANIFEST_NAME} is missing (an unfinished or damaged version)"

    def version_dir(self, version: int) -> Path:
        return self.crawldb / f"v{version:06d}"

    def segment_dir(self, round_: int) -> Path:
        return self.segments / f"r{round_:06d}"
