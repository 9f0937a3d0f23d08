"""Where smbprotocol's public API stops short of what the SMB source needs: the one module
that reads or changes smbprotocol's state past its documented calls, each reach with why.
tests/test_smb_internals.py holds each to a real smbd connection, so a smbprotocol release
that changes one fails there rather than in a crawl."""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from collections.abc import Callable

from smbprotocol.connection import Connection, Request
from smbprotocol.transport import Tcp

from sharecrawl.crawl_io.smb_errors import STATUS_PENDING


def credits(connection: Connection) -> int:
    """Credits the server granted that no request holds yet (MS-SMB2 3.2.4.1.1)."""
    # smbprotocol keeps the grant as its sequence window and raises past it; no call tells it
    window = connection.sequence_window
    return window["high"] - window["low"]


def answered(request: Request) -> bool:
    """Whether the final answer is in (not an interim STATUS_PENDING), without waiting."""
    # Connection.receive waits a second at least; its Request's `response` is what it waits on
    response = request.response
    return response is not None and response["status"].get_value() != STATUS_PENDING


def went_async(request: Request) -> bool:
    """Whether the server's interim answer (MS-SMB2 3.3.4.2) is in: it handles the request."""
    # the receive thread files the interim answer's AsyncId on the Request (for its cancel)
    return request.async_id is not None


def connection_open(connection: Connection) -> bool:
    """Whether the connection's socket is still up (nobody closed it)."""
    # smbprotocol tells of a closed connection only by raising at the next send or receive
    return connection.transport is not None and connection.transport.connected


class _WakingEvent(threading.Event):
    def __init__(self, wake: Callable[[], None]) -> None:
        super().__init__()
        self._wake = wake

    def set(self) -> None:
        super().set()
        self._wake()


def wake_on_answer(request: Request, wake: Callable[[], None]) -> None:
    """Have the receive thread call `wake` as each answer to `request` (interim or final) comes
    in, and once now if one already has."""
    # smbprotocol signals an answer only through the Request's threading.Event, and a select
    # loop waits on file descriptors: the event is swapped for one that also wakes the loop
    with request.response_event_lock:  # the receive thread sets the event under this lock
        event = _WakingEvent(wake)
        if request.response_event.is_set():
            event.set()
        request.response_event = event


def message_length(header: bytes) -> int:
    """A Direct TCP header's body length (MS-SMB2 2.1: a zero byte, then 3 bytes); ValueError
    for a header no SMB server sends, before anything is allocated for the body: smbprotocol
    reads 4 bytes as the length, so a listener of another protocol (`HTTP` is 1.2 GB) would
    make it zero that much memory, and a sweep probes 64 hosts at once."""
    length = struct.unpack(">L", header)[0]
    if length > Tcp.MAX_SIZE:
        raise ValueError(f"not a Direct TCP header ({header!r}): not SMB")
    return length


class _WholeMessages:
    """A transport's `recv` taking each message in one recv(MSG_WAITALL) into one bytes object
    (or, not waiting for all, in the socket's pieces: Tcp.recv bounded, below).
    smbprotocol's own takes it in the socket's pieces, each copied into a zeroed bytearray that
    is copied whole after: of MiBs a READ, a fifth of a streaming server's CPU under the GIL
    (docs/web.md, "Streaming a copy")."""

    def __init__(self, transport: Tcp, wait_all: bool = True) -> None:
        self._transport = transport
        self._flags = socket.MSG_WAITALL if wait_all else 0  # 0: as the socket gives them
        # the socket and the lock under which smbprotocol's close waits for a receive to end
        # (it shuts the socket down first, which wakes one): Tcp has no public name for them
        self._socket: socket.socket = transport._sock
        self._closing: threading.Lock = transport._close_lock

    def receive(self, timeout: float) -> bytes | None:
        """Tcp.recv's contract: a Direct TCP message's body; b"" or None once closed, and
        TimeoutError when no byte comes for `timeout` seconds (smbprotocol's keep-alive)."""
        length, timeout = self._exactly(4, timeout)
        if not length:
            return b""
        return self._exactly(message_length(length), timeout)[0]

    def _exactly(self, length: int, timeout: float) -> tuple[bytes | None, float]:
        parts: list[bytes] = []
        got = 0
        while got < length:
            with self._closing:
                if not self._transport.connected:
                    return None, timeout
                started = time.monotonic()
                ready = select.select([self._socket], [], [], max(timeout, 1))[0]
                timeout -= time.monotonic() - started
                if not ready:
                    raise TimeoutError(f"recv idle ({got}/{length} bytes)")
                try:  # MSG_WAITALL blocks until all is in, or the socket is shut down
                    data = self._socket.recv(length - got, self._flags)
                except OSError:  # reset or aborted by the peer: an end, as Tcp takes them
                    data = b""
            if not data:
                self._transport.close()
                return None, timeout
            parts.append(data)
            got += len(data)
        return (parts[0] if len(parts) == 1 else b"".join(parts)), timeout


def _bounded_recv(transport: Tcp, timeout: float) -> bytes | None:
    """Tcp.recv as smbprotocol's own (pieces as the socket gives them, each within `timeout`),
    the length checked first (message_length)."""
    return _WholeMessages(transport, wait_all=False).receive(timeout)


# Every connection of the process (the probe's, the crawl's, watch's, serve's) from its first
# message on: the negotiate's answer is read before a connection could be given another recv.
Tcp.recv = _bounded_recv


def whole_messages(connection: Connection) -> None:
    """Have the connection's receive thread take each message whole (_WholeMessages), from
    its next message on; once per connection."""
    # the receive thread looks `transport.recv` up for each message, so the swap is safe while
    # it waits in the old one
    transport = connection.transport
    if not isinstance(getattr(transport.recv, "__self__", None), _WholeMessages):
        transport.recv = _WholeMessages(transport).receive
