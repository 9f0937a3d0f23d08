"""Liveness of 1,000 hosts whose names do not resolve: Inject's check against the way it was
done before (a pool of 256 threads, each resolving and connecting in turn, with no deadline
on name resolution).

Two resolvers: the system's (getaddrinfo; names under .invalid, RFC 2606, which a working
resolver answers at once), and an unresponsive DNS server, emulated by a lookup that takes
`--resolver-s` seconds before failing (glibc's default is 5 s per try, resolv.conf(5)). The
timeout is the default liveness_timeout_s. The last line is the ratio of the times with the
unresponsive resolver, sharecrawl / reference (goal: well under 1; sharecrawl's time stays
about one timeout, at most 5 s).

    .venv/bin/python bench/liveness.py [--hosts 1000] [--resolver-s 5]
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sharecrawl.crawl_io.liveness import check_hosts
from sharecrawl.crawl_io.sources import HostURL, parse_host_url

TIMEOUT_S = 2.0  # luigi.cfg liveness_timeout_s


def reference(hosts: list[HostURL], resolver: Callable[..., list]) -> int:
    """Before: 256 threads, each host resolved then connected, each lookup unbounded."""

    def check(host: HostURL) -> bool:
        try:
            for family, kind, proto, _, addr in resolver(
                host.hostname, 445, type=socket.SOCK_STREAM
            ):
                with socket.socket(family, kind, proto) as sock:
                    sock.settimeout(TIMEOUT_S)
                    sock.connect(addr)
                    return True
        except OSError:
            return False
        return False

    with ThreadPoolExecutor(max_workers=256) as pool:
        return sum(pool.map(check, hosts))


def timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--resolver-s", type=float, default=5.0)
    args = parser.parse_args()
    hosts = [parse_host_url(f"smb://host-{i:04d}.invalid/music") for i in range(args.hosts)]

    def unresponsive(name: str, port: int, **_: object) -> list:
        time.sleep(args.resolver_s)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    results = {}
    silent = f"resolver silent for {args.resolver_s:g} s"
    for label, resolver in (("system resolver", socket.getaddrinfo), (silent, unresponsive)):
        ours = timed(lambda r=resolver: check_hosts(hosts, TIMEOUT_S, r))
        ref = timed(lambda r=resolver: reference(hosts, r))
        statuses = {c.status for c in check_hosts(hosts[:10], TIMEOUT_S, resolver)}
        print(
            f"{args.hosts} unresolvable names, {label}: sharecrawl {ours:.2f} s, "
            f"reference {ref:.2f} s; statuses {sorted(statuses)}"
        )
        results[label] = (ours, ref)
    ours, ref = list(results.values())[-1]
    print(f"ratio sharecrawl / reference, unresponsive resolver: {ours / ref:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
