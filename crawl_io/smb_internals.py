"""Where smbprotocol's public API stops short of what the SMB source needs: the one module
that reads or changes smbprotocol's state past its documented calls, each reach with why.
tests/test_smb_internals.py holds each to a real smbd connection, so a smbprotocol release
that changes one fails there rather than in a crawl."""

from __future__ import annotations

import threading
from collections.abc import Callable

from smbprotocol.connection import Connection, Request

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
