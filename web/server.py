"""`sharecrawl serve`: the search page under uvicorn, on a socket we open ourselves so that
a port in use is one clear line, not a log of tracebacks."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import ipaddress
import os
import signal
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from sharecrawl.web.serve_metrics import start_counting, stop_counting

if TYPE_CHECKING:
    from sharecrawl.web.copy_source import StreamSettings


SEND_BUFFER = 512 * 1024  # Linux doubles it (its bookkeeping): 1 MiB a connection


class ListenError(OSError):
    """The address cannot be listened on; the message says which and why."""


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0: any free port)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ListenError(errno.EINVAL, f"cannot listen on {host}: {e.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # every accepted socket's, fixed: Linux wakes a writer once a third of its send
        # buffer is free, so a buffer autotuned to 4 MiB would make a client taking 40 KB/s
        # seem to take nothing for 30 s (stream_timeout_s); 1 MiB still fills a LAN's pipe
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        sock.bind(address)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        raise ListenError(e.errno, f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock.set_inheritable(True)
    return sock


def _run_one(crawl_dir: Path, sock: socket.socket, stream: StreamSettings | None) -> None:
    """One uvicorn server on the listening socket, until SIGTERM or SIGINT."""
    import uvicorn

    from sharecrawl.web.app import create_app

    address = ipaddress.ip_address(sock.getsockname()[0])
    config = uvicorn.Config(
        create_app(crawl_dir, loopback_only=address.is_loopback, stream=stream),
        log_level="warning",
        access_log=False,
        server_header=False,
        proxy_headers=False,
        date_header=False,
        timeout_graceful_shutdown=5,
    )
    # uvicorn raises a stop signal again once stopped, to the handler it found: a stop asked
    # for is a clean exit, so that handler does nothing
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: None)
    uvicorn.Server(config).run(sockets=[sock])


def _run_workers(
    crawl_dir: Path, sock: socket.socket, workers: int, stream: StreamSettings | None
) -> int:
    """`workers` processes accepting on one socket (a request is CPU work under one GIL per
    process); this one only waits for them and passes a stop on. Its handler is set before the
    first fork, and each fork runs with the stop signals blocked: a stop at any moment reaches
    every worker forked, and no more are (a stop just after the last fork once exited 143)."""
    children: list[int] = []
    stopped: list[int] = []

    def stop(sig: int, frame: object) -> None:
        stopped.append(sig)
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGTERM)

    stop_signals = {signal.SIGTERM, signal.SIGINT}
    for sig in stop_signals:
        signal.signal(sig, stop)
    for _ in range(workers):
        if stopped:
            break
        unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
        pid = os.fork()  # before any thread or database exists in this process
        if pid == 0:
            code = 1
            try:
                for sig in stop_signals:
                    signal.signal(sig, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)
                _run_one(crawl_dir, sock, stream)
                code = 0
            finally:
                os._exit(code)
        children.append(pid)
        signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)  # a stop meanwhile: handled now
    codes = [os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) for child in children]
    # a stop that reached a worker before its server's handlers (the whole group is signalled:
    # Ctrl-C, systemd's control group) ends it by the signal itself: stopped, not failed
    clean = {0, -signal.SIGTERM, -signal.SIGINT} if stopped else {0}
    return 0 if set(codes) <= clean else 1


def serve(
    crawl_dir: Path,
    host: str,
    port: int,
    workers: int = 1,
    stream: StreamSettings | None = None,
) -> int:
    """Serve the search page of `crawl_dir` until interrupted; 0 on a clean stop."""
    sock = listen(host, port)
    counting = start_counting()  # before the app (and prometheus-client) is imported
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    print(
        f"sharecrawl: serving {crawl_dir} on http://{shown}:{bound_port}/ (Ctrl-C stops)",
        file=sys.stderr,
        flush=True,
    )
    try:
        if workers > 1:
            if stream is not None:  # each process counts its own streams: the caps shared out
                per_host, total = -(-stream.per_host // workers), -(-stream.total // workers)
                stream = dataclasses.replace(stream, per_host=per_host, total=total)
            code = _run_workers(crawl_dir, sock, workers, stream)
        else:
            _run_one(crawl_dir, sock, stream)
            code = 0
    finally:
        stop_counting(counting)
    print("sharecrawl: stopped", file=sys.stderr)
    return code
