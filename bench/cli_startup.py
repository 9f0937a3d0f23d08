"""How fast a second `sharecrawl crawl` on a locked crawl directory is refused (a cron
overlap): the median wall time of `--runs` refused crawls (exit 75, one line), against a bare
`python -c pass` timed in the same run. The holder is a real crawl lock taken by another
process, its pid and start time recorded. The last line is the ratio of the medians,
refused crawl / bare interpreter.

`--tree DIR` times another checkout of the code (e.g. one made with `git archive`), run as
`python -m cli.main` from DIR with this interpreter, to compare before and after. Where the
time goes: `python -X importtime -m cli.main crawl ...` in the same setting.

    .venv/bin/python bench/cli_startup.py [--runs 10] [--tree DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HOLD = """
import sys, time
from sharecrawl.crawl_io.crawldb.lock import CrawlLock
lock = CrawlLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(3600)
"""


def timed(command: list[str], cwd: Path, expect: int) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - started
    if done.returncode != expect:
        raise SystemExit(
            f"{' '.join(command)}: exit {done.returncode}, expected {expect}:\n{done.stderr}"
        )
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout to time")
    options = parser.parse_args()
    tree = options.tree.resolve()
    with tempfile.TemporaryDirectory(prefix="cli-startup-") as tmp:
        base = Path(tmp)
        (base / "lan" / "alpha" / "music").mkdir(parents=True)
        hosts = base / "hosts.txt"
        hosts.write_text(f"file://{base / 'lan' / 'alpha'}\n")
        crawl = base / "crawl"
        (crawl / "crawldb").mkdir(parents=True)
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(crawl)], cwd=REPO, stdout=subprocess.PIPE, text=True
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            refused = [
                sys.executable,
                "-m",
                "sharecrawl.cli.main",
                "crawl",
                "--hosts-file",
                str(hosts),
                "--crawl-dir",
                str(crawl),
            ]
            bare = [sys.executable, "-c", "pass"]
            timed(refused, tree, 75)  # warm the file cache for both
            timed(bare, tree, 0)
            crawl_s, bare_s = [], []
            for _ in range(options.runs):  # interleaved: load changes hit both alike
                crawl_s.append(timed(refused, tree, 75))
                bare_s.append(timed(bare, tree, 0))
        finally:
            holder.kill()
            holder.wait()
    crawl_median, bare_median = statistics.median(crawl_s), statistics.median(bare_s)
    print(f"tree: {tree}; {options.runs} runs each, load average {os.getloadavg()[0]:.2f}")
    print(f"refused crawl: median {crawl_median * 1000:.0f} ms (max {max(crawl_s) * 1000:.0f} ms)")
    print(f"python -c pass: median {bare_median * 1000:.0f} ms")
    print(f"ratio refused crawl / bare interpreter: {crawl_median / bare_median:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
