"""A cold `sharecrawl search`, as a terminal user or a script runs it, imports only what the
search needs: never the web, the crawl (pipeline, jobs, Luigi, mrjob), the SMB client or Arrow
(docs/DESIGN.md, Search), nor DuckDB while the index's arrays file matches it. A real
console-script process over a real index."""

from __future__ import annotations

import json
from pathlib import Path

from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.crawl_io.crawldb.version_manifest import write_manifest
from sharecrawl.queries.index import build_index
from tests.cliproc import run_cli
from tests.test_search import MEDIA_ROWS, write_version

# Top-level modules (or ours, by their package) a search must not import.
NOT_IMPORTED = (
    "sharecrawl.web",
    "sharecrawl.pipeline",
    "sharecrawl.jobs",
    "sharecrawl.sensors",
    "sharecrawl.simulator",
    "sharecrawl.demolan",
    "sharecrawl.cli.crawl",
    "sharecrawl.cli.services",
    "sharecrawl.crawl_io.sources",  # URL and credential parsing: tens of milliseconds
    "sharecrawl.crawl_io.crawldb.lock",  # a search takes no lock
    "luigi",
    "mrjob",
    "smbprotocol",
    "aiohttp",
    "rich",
    "pyarrow",  # the crawldb's tables: a search reads the index and CURRENT only
    "duckdb",  # the index's arrays file answers (queries.search_file)
    "numpy.ma",  # np.unique's import: tens of milliseconds
)


def imported(stderr: str) -> set[str]:
    """The modules a process imported, from its -X importtime lines on stderr."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }


def indexed_crawl(root: Path) -> CrawlDir:
    """A crawl directory at `root` whose live version v000001 holds MEDIA_ROWS, indexed."""
    crawl = CrawlDir(root)
    crawl.make()
    version = write_version(crawl.root, MEDIA_ROWS, name="v000001")
    write_manifest(version, {})
    (crawl.crawldb / "CURRENT").write_text("v000001\n")
    build_index(version, crawl.index)
    return crawl


def test_a_cold_search_imports_neither_the_web_nor_the_crawl(tmp_path: Path) -> None:
    crawl = indexed_crawl(tmp_path / "crawl")

    argv = ["search", "--json", "--crawl-dir", str(crawl.root), "madonna"]
    done = run_cli(*argv, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Madonna" in {r["artist"] for r in json.loads(done.stdout)}
    modules = imported(done.stderr)
    assert "sharecrawl.queries.search" in modules  # the lines were read
    wrong = sorted(m for m in modules if m.split(".")[0] in NOT_IMPORTED or m in NOT_IMPORTED)
    wrong += sorted(m for m in modules if any(m.startswith(f"{n}.") for n in NOT_IMPORTED))
    assert not wrong, f"a search imported {wrong}"
