"""Clients that ask for a copy and never read it: each stream ends once a send has made no
progress for `stream_timeout_s`, and its slot comes back (web/stream.py), so that a few
such sockets cannot keep a host, or the whole server, at 503; one that reads slowly but
steadily gets the whole copy, however long a block takes it."""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path

from sharecrawl.queries.search_results import copy_link
from tests.conftest import LAN
from tests.test_stream import big_mp3, request
from tests.test_web_lan import Server

HELD = 24_000_000  # far more than the socket buffers and the server's read-ahead hold
STEADY = 12_000_000  # 4 MiB blocks, 4 s each at 1 MB/s: more than the kernel buffers
SLOTS = 3  # stream_per_host and stream_total: every slot taken by a client that never reads


def streams_open(server: Server) -> float:
    status, _, body = request(server, "/metrics")
    assert status == 200
    found = re.search(rb"^sharecrawl_streams_open(?:\{[^}]*\})? (\S+)$", body, re.M)
    assert found, body[:500]
    return float(found[1])


def stuck_client(server: Server, link: str, window: int = 4096) -> socket.socket:
    """A socket that sends the request and reads nothing: a tiny receive window, set before
    connecting (no autotuning), so that the server's sends stop."""
    host, _, port = server.url.removeprefix("http://").rpartition(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, window)
    sock.settimeout(30)
    sock.connect((host, int(port)))
    sock.sendall(f"GET {link} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    return sock


def test_clients_that_take_no_bytes_give_their_slots_back(tmp_path: Path, monkeypatch) -> None:
    lan = LAN(tmp_path / "lan")
    big_mp3(lan.host("lab") / "Music" / "Held.mp3", lan, HELD, "Held")
    lan.write_hosts("lab")
    lan.crawl()
    config = tmp_path / "slow.cfg"
    config.write_text(
        f"[sharecrawl]\nstream_per_host = {SLOTS}\nstream_total = {SLOTS}\nstream_timeout_s = 2\n"
    )
    monkeypatch.setenv("LUIGI_CONFIG_PATH", str(config))
    served = Server(lan.crawl_dir)
    link = copy_link("lab", "Music", "Held.mp3", True)
    stuck = []
    try:
        stuck = [stuck_client(served, link) for _ in range(SLOTS)]
        for _ in range(200):  # each request taken and its stream started
            if streams_open(served) == SLOTS:
                break
            time.sleep(0.1)
        assert streams_open(served) == SLOTS
        assert request(served, link, {"range": "bytes=0-9"})[0] == 503  # every slot held
        answers = []
        for _ in range(240):  # past stream_timeout_s the stuck streams end
            answers.append(request(served, link, {"range": "bytes=0-9"})[0])
            if answers[-1] == 206:
                break
            time.sleep(0.25)
        assert answers[-1] == 206, answers
        assert set(answers) <= {503, 206}
        for _ in range(200):  # the stuck streams are all closed, not only one of them
            if streams_open(served) == 0:
                break
            time.sleep(0.1)
        assert streams_open(served) == 0
        status, _, body = request(served, link)
        assert (status, len(body)) == (200, HELD)  # and a whole download still runs
        gave_up = [line for line in served.log if "the client took no bytes for 2 s" in line]
        assert len(gave_up) == SLOTS, served.log
    finally:
        for sock in stuck:
            sock.close()
        served.stop()


def test_a_client_reading_slowly_but_steadily_gets_the_whole_copy(
    tmp_path: Path, monkeypatch
) -> None:
    """1 MB/s, a send timeout of 2 s: each 4 MiB block takes the client 4 s, yet it takes
    bytes all along, so the stream must not end."""
    lan = LAN(tmp_path / "lan")
    song = big_mp3(lan.host("lab") / "Music" / "Steady.mp3", lan, STEADY, "Steady")
    lan.write_hosts("lab")
    lan.crawl()
    config = tmp_path / "steady.cfg"
    config.write_text("[sharecrawl]\nstream_timeout_s = 2\n")
    monkeypatch.setenv("LUIGI_CONFIG_PATH", str(config))
    served = Server(lan.crawl_dir)
    # a slow link's window: the kernel's buffers hold far less than the copy
    sock = stuck_client(served, copy_link("lab", "Music", "Steady.mp3", True), 65536)
    received = bytearray()
    try:
        started = time.monotonic()
        while data := sock.recv(16384):
            received += data
            ahead = len(received) / 1_000_000 - (time.monotonic() - started)
            if ahead > 0:  # the pace of a slow link
                time.sleep(ahead)
            if received.endswith(song.read_bytes()[-64:]):
                break
    finally:
        sock.close()
        served.stop()
    head, _, body = bytes(received).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert (len(body), body) == (STEADY, song.read_bytes()), served.log[-3:]
    assert not [line for line in served.log if "the client took no bytes" in line]
