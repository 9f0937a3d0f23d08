"""How fast a second `sharecrawl crawl` on a locked crawl directory is refused (a cron
overlap): the median wall time of `--runs` refused crawls (exit 75, one line), against a bare
`python -c pass` timed in the same run. The holder is a real crawl lock taken by another
process, its pid and start time recorded. The last line is the ratio of the medians,
refused crawl / bare interpreter.

`--script PATH` times another install's console script (a virtualenv with another checkout's
wheel), to compare before and after. Where the time goes: the same command with
PYTHONPROFILEIMPORTTIME=1 (python -X importtime).

    .venv/bin/python bench/cli_startup.py [--runs 10] [--script OTHER/bin/sharecrawl]
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
sys.path.insert(0, str(REPO))  # run from a checkout

from tests.cliproc import SCRIPT  # noqa: E402  # the console script beside this interpreter

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
    parser.add_argument("--script", type=Path, default=SCRIPT, help="the console script to time")
    options = parser.parse_args()
    if not options.script.exists():
        raise SystemExit(f"no console script {options.script}: `make install` installs it")
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
            refused = [str(options.script), "crawl", "--hosts-file", str(hosts)]
            refused += ["--crawl-dir", str(crawl)]
            bare = [sys.executable, "-c", "pass"]
            timed(refused, base, 75)  # warm the file cache for both
            timed(bare, base, 0)
            crawl_s, bare_s = [], []
            for _ in range(options.runs):  # interleaved: load changes hit both alike
                crawl_s.append(timed(refused, base, 75))
                bare_s.append(timed(bare, base, 0))
        finally:
            holder.kill()
            holder.wait()
    crawl_median, bare_median = statistics.median(crawl_s), statistics.median(bare_s)
    load = os.getloadavg()[0]
    print(f"script: {options.script}; {options.runs} runs each, load average {load:.2f}")
    print(f"refused crawl: median {crawl_median * 1000:.0f} ms (max {max(crawl_s) * 1000:.0f} ms)")
    print(f"python -c pass: median {bare_median * 1000:.0f} ms")
    print(f"ratio refused crawl / bare interpreter: {crawl_median / bare_median:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
