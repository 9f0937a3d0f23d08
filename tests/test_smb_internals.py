"""crawl_io.smb_internals, each reach past smbprotocol's public API held to a real connection
to smbd (tests/smbd.py): a smbprotocol release that renames or changes what one reads or sets
fails here. A paused server is how a request stays unanswered for as long as a test needs."""

from __future__ import annotations

import os
import threading

import pytest
from smbprotocol.connection import SMB2Echo

from sharecrawl.crawl_io.notify import NotifySession
from sharecrawl.crawl_io.smb import SMBSource
from sharecrawl.crawl_io.smb_internals import (
    _WholeMessages,
    answered,
    connection_open,
    credits,
    wake_on_answer,
    went_async,
    whole_messages,
)
from sharecrawl.crawl_io.sources import Credentials, parse_host_url
from tests.smbd import SmbServer, make_base_dir

pytestmark = pytest.mark.smb


@pytest.fixture
def server(smbd_factory) -> SmbServer:
    root = make_base_dir() / "tree"
    (root / "media").mkdir(parents=True)
    (root / "private").mkdir()
    return smbd_factory(root_dir=root)


def test_credits_answered_and_wake_follow_a_request(server: SmbServer) -> None:
    source = SMBSource(parse_host_url(server.url), Credentials(None), timeout_s=10)
    conn = source._conn
    session_id = source._session.session_id if source._session else None
    granted = credits(conn)
    assert isinstance(granted, int) and granted > 16  # the ECHO at connect asked for 512
    woken = threading.Event()
    server.pause()  # no answer until it resumes
    try:
        request = conn.send(SMB2Echo(), session_id, credit_request=1)
        assert credits(conn) == granted - 1  # an ECHO holds one credit until its answer
        assert not answered(request) and not went_async(request)
        wake_on_answer(request, woken.set)
        assert not woken.is_set()
    finally:
        server.resume()
    assert woken.wait(30), "the receive thread set the swapped event"
    response = conn.receive(request, timeout=30)  # smbprotocol's own wait honours it
    assert answered(request) and response["status"].get_value() == 0
    assert credits(conn) >= granted  # the answer gave the credit back (or more)
    late = threading.Event()
    echo = conn.send(SMB2Echo(), session_id)
    conn.receive(echo, timeout=30)
    wake_on_answer(echo, late.set)  # answered already: woken at once
    assert late.is_set()
    assert connection_open(conn)
    source.close()
    assert not connection_open(conn)


def test_a_change_notify_goes_async(server: SmbServer) -> None:
    with NotifySession(parse_host_url(server.url), Credentials(None), timeout_s=10) as source:
        source.watch("media")
        assert source.confirm() == ["media"]
        pending = list(source._pending)
        assert len(pending) == 2
        assert all(went_async(r) and not answered(r) for r in pending)  # held by the server


def test_whole_messages_takes_each_answer_in_one_piece(server: SmbServer, monkeypatch) -> None:
    data = os.urandom(9 << 20)  # READs of 4 MiB: far more than a socket buffer holds
    (server.root_dir / "media" / "big.bin").write_bytes(data)
    pieces: list[int] = []
    exactly = _WholeMessages._exactly

    def counted(self: _WholeMessages, length: int, timeout: float) -> tuple[bytes | None, float]:
        got = exactly(self, length, timeout)
        pieces.append(len(got[0] or b""))
        return got

    monkeypatch.setattr(_WholeMessages, "_exactly", counted)
    source = SMBSource(parse_host_url(server.url), Credentials(None), timeout_s=10)
    conn = source._conn
    file = source.open_file("media", "big.bin", block=4 << 20, depth=2)  # swaps the receive
    swapped = conn.transport.recv
    whole_messages(conn)
    assert conn.transport.recv == swapped  # once per connection
    assert file.read(0, len(data)) == data  # the receive thread used it: the answers came
    assert max(pieces) > 4 << 20  # a READ's answer, header and all, in one piece
    file.close()
    echo = conn.send(SMB2Echo(), source._session.session_id if source._session else None)
    assert conn.receive(echo, timeout=30)["status"].get_value() == 0
    source.close()  # smbprotocol's close wakes the receive thread and takes the socket
    assert not connection_open(conn)


def test_whole_messages_ends_when_the_connection_is_cut_mid_wait(server: SmbServer) -> None:
    source = SMBSource(parse_host_url(server.url), Credentials(None), timeout_s=10)
    conn = source._conn
    whole_messages(conn)
    session_id = source._session.session_id if source._session else None
    echo = conn.send(SMB2Echo(), session_id)
    conn.receive(echo, timeout=30)  # the old receive's last message: the swap's waits next
    server.pause()  # the receive thread waits in its select for an answer
    try:
        request = conn.send(SMB2Echo(), session_id)
        conn.disconnect(close=False)  # as a stream's deadline does, from another thread
    finally:
        server.resume()
    assert not connection_open(conn)
    with pytest.raises(Exception, match=r"(?i)closed|connection"):
        conn.receive(request, timeout=30)
