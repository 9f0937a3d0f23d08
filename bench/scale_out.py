"""Benchmark: a round's fetch by one crawl process against two sharing it through luigid.

    .venv/bin/python bench/scale_out.py [--hosts 16] [--delay-ms 20] [--crawlers 2] [--runs 2]
                                        [--workers 1,2,4]

One real smbd serves a generated share (folders of small files and tagged media); `--hosts`
delaying TCP proxies in front of it, one loopback port each, make as many SMB hosts whose
every request waits `--delay-ms` (tc netem is not available: the proxy adds the latency a
busy LAN host has). A real `luigid` on a loopback port schedules the rounds. Alternately, in
the same run, a fresh crawl of all hosts runs with the fetch split into as many shards as
the most workers measured:
- 1 worker: the round's driver (`sharecrawl crawl`) alone, its shards one after the other;
- N workers: the driver and N - 1 fetch workers that join its round (`sharecrawl crawl
  --join`), sharing the shards;
each process fetching `--crawlers` hosts at once. It prints each run's fetch time (from the
fetch list written to the last shard done) and round time, checks every crawl found the same
files, and, last, the fetch speed-up at each worker count over 1 (goals 1.8x at 2 and 3.2x
at 4 when host latency bounds the fetch; on a shared 2-core machine the CPU of tag reading
can bound it first).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.progress import track
from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from tests.cliproc import cli_argv
from tests.luigid import running_luigid
from tests.smbd import (
    _make_media,
    make_base_dir,
    remove_tree,
    smbd_skip_reason,
    start_smbd,
)

REPO = Path(__file__).resolve().parent.parent


# -- hosts with latency --------------------------------------------------------------------
class DelayProxies:
    """TCP proxies on loopback ports, each forwarding to `target_port`; every chunk a client
    sends waits `delay_s` before it goes on (in order), so every SMB request does."""

    def __init__(self, n: int, target_port: int, delay_s: float) -> None:
        self.target_port, self.delay_s, self.n = target_port, delay_s, n
        self.ports: list[int] = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        for _ in range(self.n):  # port 0: the kernel picks a free one, no race
            server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
            self.ports.append(server.sockets[0].getsockname()[1])
        self.ready.set()
        self.loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, delay: float) -> None:
            try:
                while data := await src.read(65536):
                    if delay:
                        await asyncio.sleep(delay)
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_w, self.delay_s), pipe(up_r, writer, 0.0))

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def make_share(root: Path, folders: int, files: int) -> int:
    share = root / "media"
    for f in range(folders):
        folder = share / f"Artist {f:03d}" / "Album"
        folder.mkdir(parents=True)
        for i in range(files):
            (folder / f"{i:02d} notes.txt").write_text("x" * i)
    return folders * (files + 2) + _make_media(share / "Music") + 1


# -- one crawl -------------------------------------------------------------------------------
def crawl(
    work: Path, name: str, hosts_file: Path, config: Path, env: dict[str, str], workers: int
) -> dict[str, float]:
    crawl_dir = work / name
    crawl_dir.mkdir()
    env = {**env, "LUIGI_CONFIG_PATH": str(config)}
    procs = [
        subprocess.Popen(
            cli_argv("crawl", "--join", "--crawl-dir", str(crawl_dir)),
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for _ in range(workers - 1)
    ]
    start = time.perf_counter()
    driver = subprocess.run(
        cli_argv(
            "crawl",
            "--crawl-dir",
            str(crawl_dir),
            "--hosts-file",
            str(hosts_file),
            "--rounds",
            "1",
            "--runner",
            "inline",
        ),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        start_new_session=True,
    )
    round_s = time.perf_counter() - start
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        if proc.returncode:
            raise RuntimeError(f"fetch worker failed: {err[-2000:]}")
    if driver.returncode:
        raise RuntimeError(f"crawl failed: {driver.stderr[-3000:]}")
    seg = crawl_dir / "segments" / "r000001"
    markers = list((seg / "fetch").iterdir())
    fetch_s = max(m.stat().st_mtime for m in markers) - (seg / "fetchlist.parquet").stat().st_mtime
    pids = {m.read_text().split("pid ")[1].strip() for m in markers}
    c = CrawlDir(crawl_dir)
    files = c.read(c.current(), "files").num_rows
    return {"fetch": fetch_s, "round": round_s, "processes": len(pids), "files": files}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--workers", default="1,2,4", help="worker counts to compare with 1")
    parser.add_argument("--crawlers", type=int, default=2, help="hosts a process fetches at once")
    parser.add_argument("--folders", type=int, default=40, help="folders per host")
    parser.add_argument("--runs", type=int, default=2, help="runs of each, alternately")
    args = parser.parse_args()
    counts = sorted({1, *(int(w) for w in args.workers.split(","))})
    if reason := smbd_skip_reason():
        sys.exit(f"bench/scale_out.py: {reason}")
    base = make_base_dir()
    work = Path(tempfile.mkdtemp(prefix="bench-scale-out-"))
    server = proxies = None
    luigid = ExitStack()
    try:
        root = base / "root"
        entries = make_share(root, args.folders, 10)
        server = start_smbd(base / "server", root, audit=False)
        proxies = DelayProxies(args.hosts, server.port, args.delay_ms / 1000)
        hosts_file = work / "hosts.txt"
        hosts_file.write_text("".join(f"smb://127.0.0.1:{p}/media\n" for p in proxies.ports))
        cap = counts[-1] * args.crawlers
        port = luigid.enter_context(
            running_luigid(work / "luigid", f"[resources]\nsmb_connections = {cap}\n")
        )
        config = work / "central.cfg"
        config.write_text(
            f"[core]\ndefault_scheduler_host = 127.0.0.1\ndefault_scheduler_port = {port}\n"
            f"[sharecrawl]\nfetch_shards = {counts[-1]}\ncrawlers = {args.crawlers}\n"
        )
        env = {
            **os.environ,
            "SHARECRAWL_SMB_USER": server.user,
            "SHARECRAWL_SMB_PASSWORD": server.password,
        }
        print(
            f"{args.hosts} SMB hosts of about {entries} entries, {args.delay_ms:g} ms a "
            f"request, {args.crawlers} hosts at once a process, {counts[-1]} fetch shards; "
            f"load average {os.getloadavg()[0]:.1f}"
        )
        best: dict[int, dict[str, float]] = {}
        for run in track(range(args.runs), "runs"):
            for workers in counts:
                r = crawl(work, f"crawl-{workers}-{run}", hosts_file, config, env, workers)
                print(
                    f"{workers} worker(s), run {run + 1}: fetch {r['fetch']:6.2f} s, round "
                    f"{r['round']:6.2f} s, shards run by {r['processes']:.0f} process(es), "
                    f"{r['files']:.0f} files"
                )
                if workers not in best or r["fetch"] < best[workers]["fetch"]:
                    best[workers] = r
        assert len({r["files"] for r in best.values()}) == 1, "the crawls found different files"
        print(json.dumps({w: {k: round(v, 3) for k, v in r.items()} for w, r in best.items()}))
        goals = {2: 1.8, 4: 3.2}
        ups = [
            f"{w} workers {best[1]['fetch'] / best[w]['fetch']:.2f}x"
            + (f" (goal >= {goals[w]})" if w in goals else "")
            for w in counts[1:]
        ]
        print(f"speed-up of the fetch over 1 worker (best of {args.runs}): {', '.join(ups)}")
    finally:
        luigid.close()
        if proxies is not None:
            proxies.stop()
        if server is not None:
            server.stop()
        remove_tree(base)
        remove_tree(work)


if __name__ == "__main__":
    main()
