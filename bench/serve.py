"""Benchmark `sharecrawl serve`: concurrent clients against the real uvicorn server.

Writes the synthetic crawldb version of bench/search.py (default 2 M media files; its
generator, reused), builds the index, starts `sharecrawl serve` as a subprocess on a free
127.0.0.1 port and, after a warm-up, lets `--clients` threads (20) each send `--requests`
requests over their own keep-alive connection, first to /api/search, then to the HTML page,
with bench/search.py's 100 mixed queries. Two ways: as people use the page (each client
pauses between its requests, reading or typing the next words: exponentially distributed
pauses of `--think` seconds on average, 0.5 by default, clients starting at random moments
of the first pause) and as a closed loop (back to back, no pause: the server saturated).
The reference, in the same run: the same queries through queries.search.search() in this
process from as many threads, which is what the page adds its copies, facets and rendering
to.

    .venv/bin/python bench/serve.py [--rows 2000000] [--workdir DIR] [--clients 20]
                                    [--requests 40] [--think 0.5] [--workers CPUS]

Goals: p95 <= 50 ms for the API and <= 80 ms for the page, with people's pauses. Latency on
a shared machine depends on what else runs (the load average is printed with each figure);
the server's CPU time per request (its processes' utime + stime) does not. The last line
holds p50 and p95 of both, CPU per request, and the ratio API p95 / search() p95.
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlencode, urlsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout

from bench.search import (  # noqa: E402
    load_average,
    make_current,
    mixed_queries,
    percentile,
    write_version,
)
from sharecrawl.queries.index import build_index  # noqa: E402
from sharecrawl.queries.search import search  # noqa: E402
from tests.cliproc import cli_argv  # noqa: E402


def start_server(workdir: Path, workers: int) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        cli_argv("serve", "--crawl-dir", str(workdir), "--port", "0", "--workers", str(workers)),
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert process.stderr is not None
    line = process.stderr.readline()
    if " on http://" not in line:
        process.kill()
        raise SystemExit(f"serve did not start: {line}{process.stderr.read()}")
    threading.Thread(target=lambda: process.stderr.read(), daemon=True).start()  # drain
    return process, line.split(" on ", 1)[1].split()[0].rstrip("/")


def cpu_seconds(pid: int) -> float:
    """CPU time used so far by a process and its children (the worker processes): a figure
    that, unlike latency, does not depend on what else the machine is running."""
    pids = [pid]
    try:
        pids += [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return float("nan")
    total = 0
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def fetch(connection: http.client.HTTPConnection, path: str) -> tuple[int, int]:
    connection.request("GET", path)
    response = connection.getresponse()
    body = response.read()
    return response.status, len(body)


def run_clients(
    url: str, paths: list[str], clients: int, requests: int, think: float
) -> tuple[list[float], int]:
    """Seconds per request of every client, and how many answers were not 200."""
    address = urlsplit(url)
    timings: list[float] = []
    failures = 0
    lock = threading.Lock()
    start = threading.Barrier(clients)

    def client(n: int) -> None:
        nonlocal failures
        connection = http.client.HTTPConnection(address.hostname, address.port, timeout=60)
        mine, bad = [], 0
        rng = random.Random(n)  # pauses vary as people's do, the same in every run
        start.wait()
        if think:  # people do not all press Enter at the same moment
            time.sleep(rng.uniform(0, think))
        for i in range(requests):
            path = paths[(n * 7 + i) % len(paths)]
            began = time.perf_counter()
            status, _ = fetch(connection, path)
            mine.append(time.perf_counter() - began)
            bad += status != 200
            if think:
                time.sleep(rng.expovariate(1 / think))
        connection.close()
        with lock:
            timings.extend(mine)
            failures += bad

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return timings, failures


def direct_search(index: Path, queries: list[str], clients: int, requests: int) -> list[float]:
    """The reference: search() itself, from as many threads as there are clients."""
    timings: list[float] = []
    lock = threading.Lock()

    def client(n: int) -> None:
        mine = []
        for i in range(requests):
            query = queries[(n * 7 + i) % len(queries)]
            began = time.perf_counter()
            search(index, query, limit=100)  # what the page asks for: its facets' pool
            mine.append(time.perf_counter() - began)
        with lock:
            timings.extend(mine)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return timings


def summary(name: str, timings: list[float], wall: float, failures: int) -> tuple[float, float]:
    p50, p95 = percentile(timings, 50) * 1000, percentile(timings, 95) * 1000
    print(
        f"{name}: {len(timings)} requests in {wall:.1f} s ({len(timings) / wall:.0f}/s), "
        f"p50 {p50:.1f} ms, p95 {p95:.1f} ms, max {max(timings) * 1000:.0f} ms, "
        f"{failures} not 200; {load_average()}"
    )
    return p50, p95


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--workdir", type=Path, help="kept; its data is reused by later runs")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--requests", type=int, default=40, help="per client and phase")
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="serve --workers (default: one per core)",
    )
    parser.add_argument("--think", type=float, default=0.5, help="seconds between requests")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-serve-"))
    print(f"{os.cpu_count()} cpus, {load_average()}")
    server = None
    try:
        version = workdir / "crawldb" / "v000001"
        index = workdir / "index" / "search.duckdb"
        if (version / "media").is_dir() and index.exists():
            print(f"data and index: reusing {workdir}")
        else:
            started = time.perf_counter()
            if not (version / "media").is_dir():
                version = write_version(workdir, args.rows)
            build_index(version, index)
            print(f"data and index of {args.rows:,} media: {time.perf_counter() - started:.0f} s")
        make_current(workdir, version)
        queries = mixed_queries(version, random.Random(11))

        started = time.perf_counter()
        server, url = start_server(workdir, args.workers)
        # Every worker loads the version on its first requests (search arrays, copies,
        # facets): warm them all with as many connections, then touch every code path.
        address = urlsplit(url)
        warm = [
            http.client.HTTPConnection(address.hostname, address.port, timeout=300)
            for _ in range(4 * args.workers)
        ]
        for _ in range(3):
            threads = [threading.Thread(target=fetch, args=(c, "/api/search?q=warm")) for c in warm]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        print(
            f"{args.workers} server processes ready and warm in "
            f"{time.perf_counter() - started:.1f} s"
        )
        for i, query in enumerate(queries):
            fetch(warm[i % len(warm)], "/api/search?" + urlencode({"q": query}))
            fetch(warm[i % len(warm)], "/?" + urlencode({"q": query}))
        for connection in warm:
            connection.close()

        results = {}
        cpu_ms: dict[str, list[float]] = {"api": [], "page": []}
        for way, think in (("people", args.think), ("closed loop", 0.0)):
            for name, prefix in (("api", "/api/search?"), ("page", "/?")):
                paths = [prefix + urlencode({"q": q}) for q in queries]
                began, cpu = time.perf_counter(), cpu_seconds(server.pid)
                timings, failures = run_clients(url, paths, args.clients, args.requests, think)
                label = f"{name}, {args.clients} clients, {way} ({think:g} s between requests)"
                results[way, name] = summary(label, timings, time.perf_counter() - began, failures)
                cpu_ms[name].append((cpu_seconds(server.pid) - cpu) / len(timings) * 1000)
                print(f"  server CPU {cpu_ms[name][-1]:.1f} ms per request")

        search(index, queries[0])  # the reference's own warm-up: the arrays load on the 2nd
        search(index, queries[1])
        began = time.perf_counter()
        direct = direct_search(index, queries, args.clients, args.requests)
        _, direct_p95 = summary(
            f"search() in-process, {args.clients} threads", direct, time.perf_counter() - began, 0
        )
        (api_p50, api_p95), (page_p50, page_p95) = (
            results["people", "api"],
            results["people", "page"],
        )
        closed_api, closed_page = results["closed loop", "api"], results["closed loop", "page"]
        print(
            f"{args.clients} clients, {args.think:g} s pauses: api p50 {api_p50:.1f} ms "
            f"p95 {api_p95:.1f}/50 ms, page p50 {page_p50:.1f} ms p95 {page_p95:.1f}/80 ms; "
            f"closed loop p95 api {closed_api[1]:.0f} ms, page {closed_page[1]:.0f} ms; server "
            f"CPU per request api {min(cpu_ms['api']):.1f} ms, page {min(cpu_ms['page']):.1f} ms; "
            f"ratio closed-loop api p95 / search() p95: {closed_api[1] / direct_p95:.2f}x"
        )
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
