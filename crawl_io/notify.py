"""SMB2 change notifications on the project's own SMB session (MS-SMB2 2.2.35, 2.2.36, 3.3.4.2).

`NotifySession` keeps a tree watch per share (`depth` CHANGE_NOTIFY requests outstanding), driven
by one caller's select loop (`fileno`, `take`, `keepalive`, `cancel`), not a thread per request;
not thread-safe. An answered request is re-armed before its answer is parsed, so no change falls
between two. STATUS_NOTIFY_ENUM_DIR, or a success with no entries (Samba's overflow), means "list
this share again". A share whose watch is refused (Samba's `change notify = no`) is given up as a
`Refusal`. A host switched off sends no FIN: an ECHO now and then finds out.
"""

from __future__ import annotations

import os
import select
import struct
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import NamedTuple

from smbprotocol.change_notify import SMB2ChangeNotifyRequest
from smbprotocol.connection import Request, SMB2Echo
from smbprotocol.exceptions import SMBResponseException
from smbprotocol.open import Open
from smbprotocol.session import SMB2Logoff

from sharecrawl.crawl_io.checked import safe_name
from sharecrawl.crawl_io.smb import FILE_DIRECTORY_FILE, SMBSource
from sharecrawl.crawl_io.smb_errors import DENIED_STATUSES, STATUS_SUCCESS
from sharecrawl.crawl_io.smb_internals import answered, connection_open, wake_on_answer, went_async
from sharecrawl.crawl_io.smb_names import FROM_SFM
from sharecrawl.crawl_io.sources import Credentials, HostUnreachable, HostURL, SourceError

WATCH_TREE = 0x1
# FILE_NOTIFY_CHANGE_FILE_NAME | DIR_NAME | SIZE | LAST_WRITE (MS-SMB2 2.2.35)
COMPLETION_FILTER = 0x1 | 0x2 | 0x8 | 0x10
NOTIFY_BUFFER = 65536  # bytes of entries per answer: one credit
STATUS_NOTIFY_CLEANUP = 0x0000010B
STATUS_NOTIFY_ENUM_DIR = 0x0000010C
STATUS_CANCELLED = 0xC0000120
REFUSAL_NAMES = {
    0xC0000002: "not implemented",  # Samba with `change notify = no`
    0xC00000BB: "not supported",
    0xC0000010: "invalid device request",
    0xC000000D: "invalid parameter",
    0xC0000022: "access denied",
}
REFUSALS = set(REFUSAL_NAMES) | DENIED_STATUSES
NOTIFY_ENTRY = struct.Struct("<III")  # NextEntryOffset, Action, FileNameLength; name follows
# FILE_NOTIFY_INFORMATION actions (MS-FSCC 2.7.1); any other (3; stream changes) is "modified"
ACTIONS = {1: "added", 2: "removed", 4: "renamed_from", 5: "renamed_to", 9: "removed"}
OVERFLOW = "overflow"


class Change(NamedTuple):
    share: str
    path: str  # share-relative, '/'-separated; '' (the share root) for an overflow
    action: str  # one of ACTIONS' values, 'modified' or 'overflow'
    overflow: bool  # the server lost count: anything below the share may have changed


class Refusal(NamedTuple):
    share: str
    reason: str


class Waker:
    """A pipe other threads (or a signal handler) write a byte to; a select loop reads its end."""

    def __init__(self) -> None:
        self.read_fd, self._write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self._write_fd, False)
        self._lock = threading.RLock()  # no write after close (the number may be reused)

    def wake(self) -> None:
        with self._lock:
            if self._write_fd >= 0:
                with suppress(BlockingIOError):  # full: the loop wakes anyway
                    os.write(self._write_fd, b"\0")

    def drain(self) -> None:
        with suppress(BlockingIOError):
            while os.read(self.read_fd, 4096):
                pass

    def close(self) -> None:
        with self._lock:
            if self._write_fd >= 0:
                write_fd, self._write_fd = self._write_fd, -1  # first: a signal may wake meanwhile
                os.close(self.read_fd)
                os.close(write_fd)


def share_path(name: str) -> str:
    """A notification's '\\'-separated name as a share path, mapped characters restored and
    each name as the listing stores it (`safe_name`), so that a hint names the stored file."""
    return "/".join(safe_name(part.translate(FROM_SFM)) for part in name.split("\\") if part)


def parse_notify(buffer: bytes | memoryview) -> list[tuple[str, str]]:
    """(action, path) of each FILE_NOTIFY_INFORMATION entry of one answer."""
    changes = []
    offset = 0
    while offset + NOTIFY_ENTRY.size <= len(buffer):
        next_offset, action, length = NOTIFY_ENTRY.unpack_from(buffer, offset)
        raw = bytes(buffer[offset + 12 : offset + 12 + length])
        name = raw.decode("utf-16-le", "surrogatepass")
        changes.append((ACTIONS.get(action, "modified"), share_path(name)))
        if not next_offset:
            break
        offset += next_offset
    return changes


class NotifySession(SMBSource):
    """One host's connection with a tree watch per share (see the module's notes)."""

    depth = 2  # requests outstanding per share
    buffer = NOTIFY_BUFFER

    def __init__(self, host: HostURL, credentials: Credentials, timeout_s: float = 10.0) -> None:
        self._watches: dict[str, Open] = {}  # share -> its root, opened
        self._pending: dict[Request, str] = {}  # watch request -> its share
        self._cancelling: dict[Request, str] = {}
        # requests whose answers nobody needs (ECHOs; closes, with smbprotocol's handler)
        self._dropped: dict[Request, Callable[[Request], object] | None] = {}
        self._echo: Request | None = None
        self._echo_sent = time.monotonic()
        self.cancels_confirmed = 0  # watch requests the server answered STATUS_CANCELLED
        self._waker = Waker()
        super().__init__(host, credentials, timeout_s=timeout_s, window=1)

    def watch(self, share: str) -> None:
        """Open the share's root and arm its tree watch. A refused open raises its SourceError
        (the connection stays usable); a refused watch comes later, as a Refusal from `take`."""
        with self._bounded(f"watch {share}"):
            self._watches[share] = self._open(self._tree(share), "", FILE_DIRECTORY_FILE)
            for _ in range(self.depth):
                self._arm(share)

    def confirm(self) -> list[str]:
        """Wait until the server has taken every watch (an interim or final answer) and return
        the shares watched: a change before that may go unreported."""
        with self._bounded("confirm watches"):
            while any(not went_async(r) and not answered(r) for r in self._pending):
                select.select([self._waker.read_fd], [], [], self._remaining())
                self._drain()
        return self.watched

    @property
    def watched(self) -> list[str]:
        return sorted(self._watches)

    @property
    def outstanding(self) -> int:
        """Watch requests not answered yet, cancelled ones included."""
        return len(self._pending) + len(self._cancelling)

    def _arm(self, share: str) -> None:
        root = self._watches[share]
        message = SMB2ChangeNotifyRequest()
        message["flags"] = WATCH_TREE
        message["output_buffer_length"] = self.buffer
        message["file_id"] = root.file_id
        message["completion_filter"] = COMPLETION_FILTER
        request = self._send([message], root.tree_connect, self.buffer)[0]
        self._pending[self._wake_on(request)] = share

    def _wake_on(self, request: Request) -> Request:
        """Have the request's answers wake the select loop."""
        wake_on_answer(request, self._waker.wake)
        return request

    def _drain(self) -> None:
        self._waker.drain()
        if not connection_open(self._conn):
            raise ConnectionError("the server closed the connection")

    def fileno(self) -> int:
        """Readable when an answer has come in; call `take` then."""
        self._check_usable()
        return self._waker.read_fd

    def take(self) -> list[Change | Refusal]:
        """What the answers so far say, answered watches re-armed first (it does not block);
        HostUnreachable when a watch ends for another reason."""
        events: list[Change | Refusal] = []
        with self._bounded("watch"):
            self._drain()
            for request in [r for r in self._dropped if answered(r)]:
                handler = self._dropped.pop(request)
                if handler is None:
                    self._answer(request)
                else:
                    with suppress(SMBResponseException):  # a close refused: the handle is gone
                        handler(request)
            for request in [r for r in self._cancelling if answered(r)]:
                del self._cancelling[request]
                self.cancels_confirmed += self._answer(request)[0] == STATUS_CANCELLED
            for request in [r for r in self._pending if answered(r)]:
                share = self._pending.pop(request)
                status, body = self._answer(request)
                if share not in self._watches:
                    continue  # the share was refused meanwhile
                if status in (STATUS_SUCCESS, STATUS_NOTIFY_ENUM_DIR):
                    self._arm(share)
                    events.extend(self._changes(share, status, body))
                elif status in REFUSALS:
                    events.append(self._refuse(share, status))
                else:
                    what = "closed by the server" if status == STATUS_NOTIFY_CLEANUP else "ended"
                    raise HostUnreachable(
                        f"{self.host.host}: the watch of {share!r} {what} (NTSTATUS 0x{status:08X})"
                    )
        return events

    def _changes(self, share: str, status: int, body: bytes) -> list[Change]:
        offset, length = struct.unpack_from("<HI", body, 2)  # the offset counts the header
        if status == STATUS_NOTIFY_ENUM_DIR or not length:
            return [Change(share, "", OVERFLOW, True)]
        entries = parse_notify(memoryview(body)[offset - 64 : offset - 64 + length])
        return [Change(share, path, action, False) for action, path in entries]

    def _refuse(self, share: str, status: int) -> Refusal:
        root = self._watches.pop(share)
        for request in [r for r, s in self._pending.items() if s == share]:
            del self._pending[request]
            self._dropped[request] = None  # fails the same way; nothing to learn from it
        message, receive = root.close(send=False)
        self._dropped[self._send([message], root.tree_connect)[0]] = receive
        return Refusal(share, REFUSAL_NAMES.get(status, f"NTSTATUS 0x{status:08X}"))

    def keepalive(self, every_s: float) -> None:
        """An ECHO every `every_s`; SourceTimeout when one has gone unanswered for timeout_s."""
        self._check_usable()
        now = time.monotonic()
        if self._echo is not None and not answered(self._echo):
            if now - self._echo_sent > self.timeout_s:
                raise self._fail(TimeoutError("no answer to ECHO"), "keepalive")
        elif now - self._echo_sent >= every_s:
            with self._bounded("keepalive"):
                self._echo = self._wake_on(self._send([SMB2Echo()], None)[0])
            self._dropped[self._echo] = None
            self._echo_sent = now

    def cancel(self) -> None:
        """SMB2 CANCEL every watch request (MS-SMB2 3.2.4.24); `take` files the answers."""
        if not self.usable:
            return
        with self._bounded("cancel"):
            for request in self._pending:
                request.cancel()
            self._cancelling.update(self._pending)
            self._pending.clear()
            self._watches.clear()

    def abandon(self) -> None:
        """Log off without waiting for the answer and close the connection."""
        if self.usable:
            with suppress(SourceError), self._bounded("log off"):  # it is closed next anyway
                self._send([SMB2Logoff()], None)
        self._retire(HostUnreachable(f"{self.host.host}: the watch was stopped"))

    def _retire(self, failure: SourceError) -> None:
        super()._retire(failure)
        self._waker.close()
