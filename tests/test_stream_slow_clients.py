"""Clients that ask for a copy and never read it: each stream ends once a send has made no
progress for `stream_timeout_s`, and its slot comes back (web/stream.py), so that a few
such sockets cannot keep a host, or the whole server, at 503."""

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
SLOTS = 3  # stream_per_host and stream_total: every slot taken by a client that never reads


def streams_open(server: Server) -> float:
    status, _, body = request(server, "/metrics")
    assert status == 200
    found = re.search(rb"^sharecrawl_streams_open(?:\{[^}]*\})? (\S+)$", body, re.M)
    assert found, body[:500]
    return float(found[1])


def stuck_client(server: Server, link: str) -> socket.socket:
    """A socket that sends the request and reads nothing: a tiny receive window, set before
    connecting (no autotuning), so that the server's sends stop."""
    host, _, port = server.url.removeprefix("http://").rpartition(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
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
