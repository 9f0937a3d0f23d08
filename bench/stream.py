"""Benchmark `GET /copy/{id}`: a 200 MB file on a real smbd on loopback, streamed through a
real `sharecrawl serve` (uvicorn) on 127.0.0.1.

Crawls the share (one file), starts the server, and measures over fresh connections: the
time to the first byte of the file (`--requests` GETs, 50) and to the first byte after a
seek to 90 % (`Range: bytes=<90%>-`, 50), and the time of a whole download against
`smbclient -c 'get FILE /dev/null'` of the same file in the same run (best of `--downloads`
each, 5, taken in turn). Needs root (smbd) and Samba's smbclient.

A download is read as smbclient writes to /dev/null: http.client's response read into one
1 MiB buffer, counted and dropped (curl -o /dev/null takes as long). One more download, not
timed, is hashed and compared with the file. The server's CPU time per download is its
process's (/proc/PID/stat, in clock ticks); the load average is printed with the figures.

    .venv/bin/python bench/stream.py [--mb 200] [--requests 50] [--downloads 5]

Goals: first byte and seek p95 <= 200 ms; download/smbclient time ratio <= 1.5. The last line
is `ratio download/smbclient: R`.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout

from sharecrawl.queries.search_results import copy_link  # noqa: E402
from tests.cliproc import cli_argv  # noqa: E402
from tests.media import make_media  # noqa: E402
from tests.smbd import make_base_dir, start_smbd  # noqa: E402
from tests.test_web_lan import Server  # noqa: E402


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def first_byte(address: str, path: str, headers: dict[str, str]) -> float:
    started = time.perf_counter()
    connection = http.client.HTTPConnection(address, timeout=60)
    connection.request("GET", path, headers=headers)
    response = connection.getresponse()
    assert response.status in (200, 206), (response.status, response.read())
    assert response.read(1)
    elapsed = time.perf_counter() - started
    connection.close()
    return elapsed


def download(
    address: str, path: str, size: int, update: Callable[[memoryview], object] | None = None
) -> float:
    """The time of a whole GET; each piece given to `update` too when there is one."""
    started = time.perf_counter()
    connection = http.client.HTTPConnection(address, timeout=600)
    connection.request("GET", path)
    response = connection.getresponse()
    assert response.status == 200, response.status
    got, buffer = 0, bytearray(1 << 20)  # into one buffer, as smbclient writes to /dev/null
    view = memoryview(buffer)
    while n := response.readinto(buffer):
        got += n
        if update is not None:
            update(view[:n])
    assert got == size, got
    connection.close()
    return time.perf_counter() - started


def cpu_s(pid: int) -> float:
    """A process's user and system CPU time so far (proc(5): fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--downloads", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-stream-"))
    root = make_base_dir() / "tree"
    big = make_media(root / "media" / "Big File.mp3", artist="Bench", title="Big")
    with big.open("ab") as f:
        for _ in range(args.mb):
            f.write(os.urandom(1 << 20))
    (root / "private").mkdir()
    size = big.stat().st_size
    smbd = start_smbd(make_base_dir(), root, audit=False)
    server = None
    try:
        hosts = work / "hosts.txt"
        hosts.write_text(f"{smbd.url}/media\n")
        crawl = work / "crawl"
        rest = ["--hosts-file", str(hosts), "--runner", "inline"]
        done = subprocess.run(
            cli_argv("crawl", "--crawl-dir", str(crawl), *rest),
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        server = Server(crawl)
        address = server.url.removeprefix("http://")
        link = copy_link(f"127.0.0.1:{smbd.port}", "media", "Big File.mp3", True)
        first_byte(address, link, {})  # the connection to the host, the index loaded
        starts = [first_byte(address, link, {}) for _ in range(args.requests)]
        seek = f"bytes={size * 9 // 10}-"
        seeks = [first_byte(address, link, {"range": seek}) for _ in range(args.requests)]
        print(f"file: {size / 1e6:.1f} MB on smbd 127.0.0.1:{smbd.port}")
        print(
            f"first byte: p50 {sorted(starts)[len(starts) // 2] * 1e3:.1f} ms, "
            f"p95 {p95(starts) * 1e3:.1f} ms over {len(starts)} requests"
        )
        print(
            f"first byte after a seek to 90 %: p50 {sorted(seeks)[len(seeks) // 2] * 1e3:.1f} "
            f"ms, p95 {p95(seeks) * 1e3:.1f} ms over {len(seeks)} requests"
        )
        digest = hashlib.sha256()
        download(address, link, size, digest.update)
        assert digest.digest() == hashlib.sha256(big.read_bytes()).digest(), "wrong bytes"
        smbclient = shutil.which("smbclient") or "/usr/bin/smbclient"
        command = [smbclient, "//127.0.0.1/media", "-p", str(smbd.port), "-N"]
        command += ["-c", 'get "Big File.mp3" /dev/null']
        ours_all, theirs, cpu = [], [], []
        pid = server.process.pid  # uvicorn runs in it (one worker)
        for _ in range(args.downloads):  # turn about, so that a busy moment hits both
            before = cpu_s(pid)
            ours_all.append(download(address, link, size))
            cpu.append(cpu_s(pid) - before)
            started = time.perf_counter()
            subprocess.run(command, check=True, capture_output=True)
            theirs.append(time.perf_counter() - started)
        ours = min(ours_all)
        print(
            f"download: {ours:.2f} s ({size / ours / 1e6:.0f} MB/s); smbclient get: "
            f"{min(theirs):.2f} s ({size / min(theirs) / 1e6:.0f} MB/s), best of {args.downloads}"
        )
        print(
            f"server CPU per download: {min(cpu):.2f}-{max(cpu):.2f} s; load average "
            + " ".join(f"{x:.2f}" for x in os.getloadavg())
        )
        print(f"ratio download/smbclient: {ours / min(theirs):.2f}")
    finally:
        if server is not None:
            server.stop()
        smbd.stop()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(root.parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
