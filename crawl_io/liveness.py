"""Is a host there? A cheap check per host per round, no session: an smb:// port accepting TCP
within a timeout, a file:// folder existing, each answer with a `hosts.status` code. Names are
resolved all at once under one deadline: getaddrinfo has no timeout and may wait seconds per
unknown name; one unanswered by the deadline is unknown, left to a daemon thread."""

from __future__ import annotations

import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sharecrawl.crawl_io.sources import HOST_OK, HostURL, is_ip_address

Resolver = Callable[..., list[tuple[Any, ...]]]  # socket.getaddrinfo's signature
RESOLVER_THREADS = 1024  # lookups at once; each mostly waits on the network
CONNECT_THREADS = 256  # connects at once (500 hosts off x 2 s / 256 = 4 s)


@dataclass(frozen=True)
class Liveness:
    status: str  # HOST_OK or one of UNREACHABLE_STATUSES
    error: str | None = None  # the reason in words, for `hosts.last_error`

    @property
    def online(self) -> bool:
        return self.status == HOST_OK


def resolve_names(
    names: Sequence[tuple[str, int]], deadline_s: float, resolver: Resolver = socket.getaddrinfo
) -> dict[tuple[str, int], list[tuple[Any, ...]] | Liveness]:
    """(name, port) -> getaddrinfo's addresses, or a Liveness saying why there are none
    (unknown_name when unanswered by `deadline_s`: the daemon threads are left to it)."""
    pending: queue.SimpleQueue[tuple[str, int]] = queue.SimpleQueue()
    todo = list(dict.fromkeys(names))
    for item in todo:
        pending.put(item)
    results: dict[tuple[str, int], list[tuple[Any, ...]] | Liveness] = {}
    done = threading.Condition()

    def work() -> None:
        while True:
            try:
                name, port = pending.get_nowait()
            except queue.Empty:
                return
            try:
                answer: list[tuple[Any, ...]] | Liveness = resolver(
                    name, port, type=socket.SOCK_STREAM
                )
            except (socket.gaierror, UnicodeError):
                answer = Liveness("unknown_name", "unknown host name")
            except OSError as e:
                answer = Liveness("unknown_name", f"name lookup failed: {_strerror(e)}")
            with done:
                results[(name, port)] = answer
                done.notify_all()

    for _ in range(min(RESOLVER_THREADS, len(todo))):
        threading.Thread(target=work, name="resolve", daemon=True).start()
    end = time.monotonic() + deadline_s
    with done:
        while len(results) < len(todo):
            remaining = end - time.monotonic()
            if remaining <= 0:
                break
            done.wait(remaining)
        answered = dict(results)
    late = Liveness("unknown_name", f"no answer from the name resolver within {deadline_s:g} s")
    return {item: answered.get(item, late) for item in todo}


def _strerror(e: OSError) -> str:
    return os.strerror(e.errno) if e.errno else str(e) or type(e).__name__


def _connect(addresses: list[tuple[Any, ...]], timeout_s: float) -> Liveness:
    """Try the resolved addresses in order within one timeout: the first that accepts wins."""
    end = time.monotonic() + timeout_s
    outcome = Liveness("offline", "no address")
    for family, kind, proto, _name, sockaddr in addresses:
        remaining = end - time.monotonic()
        if remaining <= 0:
            break
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.settimeout(remaining)
                sock.connect(sockaddr)
            return Liveness(HOST_OK)
        except TimeoutError:
            outcome = Liveness("timed_out", f"no answer within {timeout_s:g} s")
        except ConnectionRefusedError:
            outcome = Liveness("refused", "connection refused")
        except OSError as e:
            outcome = Liveness("offline", _strerror(e))
    if outcome.status == "offline" and time.monotonic() >= end:
        outcome = Liveness("timed_out", f"no answer within {timeout_s:g} s")
    return outcome


def check_hosts(
    hosts: Sequence[HostURL], timeout_s: float = 2.0, resolver: Resolver = socket.getaddrinfo
) -> list[Liveness]:
    """One Liveness per host: names resolved under one deadline, then ports tried, each within
    `timeout_s`."""
    smb = [(h.hostname, h.port or 445) for h in hosts if h.scheme != "file"]
    to_resolve = [item for item in smb if not is_ip_address(item[0])]
    resolved = resolve_names(to_resolve, timeout_s, resolver) if to_resolve else {}

    def check(host: HostURL) -> Liveness:
        if host.scheme == "file":
            there = os.path.isdir(host.hostname)
            return Liveness(HOST_OK) if there else Liveness("offline", "folder is not there")
        item = (host.hostname, host.port or 445)
        if item in resolved:
            addresses = resolved[item]
            if isinstance(addresses, Liveness):
                return addresses
        else:  # an IP address: nothing to resolve
            family = socket.AF_INET6 if ":" in host.hostname else socket.AF_INET
            addresses = [(family, socket.SOCK_STREAM, 0, "", (host.hostname, item[1]))]
        return _connect(addresses, timeout_s)

    # at night half of a thousand hosts are off, each costing a whole timeout: many at once
    with ThreadPoolExecutor(max_workers=max(1, min(CONNECT_THREADS, len(hosts)))) as pool:
        return list(pool.map(check, hosts))


def check_host(host: HostURL, timeout_s: float = 2.0) -> str | None:
    """None when the host is reachable, else a short reason for `hosts.last_error`."""
    return check_hosts([host], timeout_s)[0].error
