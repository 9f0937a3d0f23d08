"""The address sweep against nmap: 127.0.0.0/16 (65,536 addresses) with 20 listeners among
them, everything else refusing at once; both must find the same addresses.

The sweep runs with the default concurrency and no rate cap (nmap's -sT has none either);
the default rate (crawl_io.discover.SWEEP_RATE) is timed too, for what a round spends. The
last line is the ratio of the times, sweep / nmap (goal: at most 3). Loopback only.

    .venv/bin/python bench/discover.py [--port 45123]
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sharecrawl.crawl_io.discover import SWEEP_CONCURRENCY, SWEEP_RATE, sweep
from sharecrawl.crawl_io.sources import parse_range_url

TIMEOUT_S = 2.0  # luigi.cfg liveness_timeout_s
LISTENERS = [f"127.0.{i * 13}.{i * 11 + 2}" for i in range(20)]


def nmap_sweep(port: int) -> list[str]:
    out = subprocess.run(
        ["nmap", "-sT", "-Pn", "-n", "-p", str(port), "--open", "-oG", "-", "127.0.0.0/16"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line.split()[1] for line in out.splitlines() if "/open/" in line]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=45123)
    args = parser.parse_args()
    if not shutil.which("nmap"):
        print("skipped: nmap is not installed (make test-deps installs it when root)")
        return 0
    listeners = []
    for address in LISTENERS:
        sock = socket.socket()
        sock.bind((address, args.port))
        sock.listen(128)
        listeners.append(sock)
    net = parse_range_url(f"smb://127.0.0.0:{args.port}/16")
    assert net is not None
    key = socket.inet_aton
    started = time.perf_counter()
    found = sweep(net.addresses(), args.port, TIMEOUT_S, SWEEP_CONCURRENCY, rate=0)
    ours = time.perf_counter() - started
    started = time.perf_counter()
    theirs = nmap_sweep(args.port)
    reference = time.perf_counter() - started
    started = time.perf_counter()
    capped = sweep(net.addresses(), args.port, TIMEOUT_S, SWEEP_CONCURRENCY, SWEEP_RATE)
    capped_s = time.perf_counter() - started
    for sock in listeners:
        sock.close()
    expected = sorted(LISTENERS, key=key)
    print(f"addresses: {net.size:,}, listeners: {len(LISTENERS)}")
    print(f"sweep (no rate cap):            {ours:6.2f} s, found {len(found)}")
    print(f"sweep (rate {SWEEP_RATE}/s, the default): {capped_s:6.2f} s, found {len(capped)}")
    print(f"nmap -sT -Pn -n:                {reference:6.2f} s, found {len(theirs)}")
    same = found == capped == sorted(theirs, key=key) == expected
    print(f"same addresses as nmap: {'yes' if same else 'NO'}")
    print(f"ratio sweep/nmap: {ours / reference:.2f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
