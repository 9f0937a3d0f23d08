"""SMB2 change notifications on the project's own SMB session (MS-SMB2 2.2.35, 2.2.36, 3.3.4.2).

`NotifySession` is an `SMBSource` (the same negotiation, signing, encryption, time limits and
name mapping) that keeps one tree watch per share: the share root opened for listing, with
CHANGE_NOTIFY requests (WATCH_TREE; file name, folder name, size and last-write changes)
outstanding on it. It is driven by one caller's select loop, never by a thread of its own
(smbprotocol's FileSystemWatcher runs a thread per request): `fileno` to wait on, `receive` when
the socket is readable, `take` for what the answers say, `keepalive` now and then, `cancel` at
shutdown. Not thread-safe: one thread at a time (the one that connects, then the loop).

- Async answers: the server first answers STATUS_PENDING with an AsyncId (the wire keeps it for
  CANCEL), then, when something changes, the final answer with FILE_NOTIFY_INFORMATION entries.
- Re-arming: `depth` requests per share are outstanding; an answered one is replaced before its
  answer is parsed, so a change arriving meanwhile lands in the other (Samba and Windows also
  keep a handle's changes between requests).
- Overflow: STATUS_NOTIFY_ENUM_DIR, or a success with no entries (Samba's answer when the
  changes do not fit the buffer), means "something changed below this share, list it again".
- Refusal: a share whose root cannot be opened, or whose watch is answered NOT_IMPLEMENTED
  (Samba with `change notify = no`), NOT_SUPPORTED, ACCESS_DENIED and the like, is given up
  (its handle closed) and reported as a `Refusal`; the other shares go on.
- Keepalive: a host switched off sends no FIN; an ECHO now and then finds out.
- Names: '\\'-separated relative to the share root, private-use characters mapped back as the
  listing does (vfs_catia / Services for Mac), returned '/'-separated without a leading slash.
"""

from __future__ import annotations

import struct
import time
from typing import NamedTuple

from crawl_io import smb_wire
from crawl_io.smb import SMBSource
from crawl_io.smb_names import FROM_SFM
from crawl_io.smb_session import DENIED_STATUSES, FILE_DIRECTORY_FILE, READ_ACCESS
from crawl_io.smb_wire import STATUS_SUCCESS
from crawl_io.sources import Credentials, HostUnreachable, HostURL, SourceError

CANCEL, CHANGE_NOTIFY = 12, 15  # MS-SMB2 2.2.1 commands
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
NOTIFY_REQUEST = struct.Struct("<HHI16sII")  # 32 bytes
NOTIFY_ENTRY = struct.Struct("<III")  # NextEntryOffset, Action, FileNameLength; name follows
# FILE_NOTIFY_INFORMATION actions (MS-FSCC 2.7.1); stream changes count as the file's
ACTIONS = {
    1: "added",
    2: "removed",
    3: "modified",
    4: "renamed_from",
    5: "renamed_to",
    6: "modified",
    7: "modified",
    8: "modified",
    9: "removed",
}
OVERFLOW = "overflow"
ASYNC_HEADER = struct.Struct("<4sHHIHHIIQQQ16s")  # AsyncId where a sync header has TreeId


class Change(NamedTuple):
    share: str
    path: str  # share-relative, '/'-separated; '' (the share root) for an overflow
    action: str  # one of ACTIONS' values, or 'overflow'
    overflow: bool  # the server lost count: anything below the share may have changed


class Refusal(NamedTuple):
    share: str
    reason: str


class _Watch(NamedTuple):
    tree_id: int
    file_id: bytes


def share_path(name: str) -> str:
    """A notification's '\\'-separated name as a share path, mapped characters restored."""
    return "/".join(part.translate(FROM_SFM) for part in name.split("\\") if part)


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


def refusal_reason(status: int) -> str:
    return REFUSAL_NAMES.get(status, f"NTSTATUS 0x{status:08X}")


class NotifySession(SMBSource):
    """One host's connection with a tree watch per share (see the module's notes)."""

    depth = 2  # requests outstanding per share
    buffer = NOTIFY_BUFFER

    def __init__(self, host: HostURL, credentials: Credentials, timeout_s: float = 10.0) -> None:
        self._watches: dict[str, _Watch] = {}
        self._pending: dict[int, str] = {}  # message id of a watch request -> its share
        self._cancelling: dict[int, str] = {}
        self._dropped: set[int] = set()  # requests whose answers nobody needs (closes)
        self._echo_id: int | None = None
        self.cancels_confirmed = 0  # watch requests the server answered STATUS_CANCELLED
        self._echo_sent = self._last_echo = time.monotonic()
        super().__init__(host, credentials, timeout_s=timeout_s, window=1)

    # -- setting up -----------------------------------------------------------------------

    def watch(self, share: str) -> None:
        """Open the share's root and arm its tree watch. A refused open raises that request's
        SourceError (AccessDenied, NotFound...) and leaves the connection usable; a refused
        watch comes later, as a Refusal from `take`."""
        with self._bounded(f"watch {share}"):
            tree_id = self._tree(share)
            opened = self._request(
                smb_wire.create(b"", READ_ACCESS, FILE_DIRECTORY_FILE), tree_id, f"open {share}"
            )
            self._watches[share] = _Watch(tree_id, smb_wire.file_id_of(opened))
            for _ in range(self.depth):
                self._arm(share)
            self._wire.flush(self._deadline)

    def confirm(self) -> list[str]:
        """Wait (within the time limit) until the server has taken every share's watch: an
        interim answer (it went async) or a final one. Returns the shares confirmed; a change
        before that may not be reported, so a watch counts from here."""
        wire = self._wire
        with self._bounded("confirm watches"):
            while True:
                waiting = {
                    s
                    for i, s in self._pending.items()
                    if i not in wire.async_ids and not wire.answered(i)
                }
                if not waiting:
                    break
                wire.receive(self._deadline)
        return self.watched

    @property
    def usable(self) -> bool:
        """False once the connection failed (every later call raises the same error)."""
        return self._failure is None

    @property
    def watched(self) -> list[str]:
        return sorted(self._watches)

    @property
    def outstanding(self) -> int:
        """Watch requests not answered yet, cancelled ones included."""
        return len(self._pending) + len(self._cancelling)

    def _arm(self, share: str) -> None:
        watch = self._watches[share]
        body = NOTIFY_REQUEST.pack(32, WATCH_TREE, self.buffer, watch.file_id, COMPLETION_FILTER, 0)
        message = smb_wire.Message(CHANGE_NOTIFY, body, self.buffer)
        self._pending[self._send([message], watch.tree_id)[0]] = share

    # -- the select loop's calls ----------------------------------------------------------

    def fileno(self) -> int:
        self._check_usable()
        return self._wire.fileno()

    def receive(self) -> None:
        """Read what the server sent; call when the socket is readable (it does not block then)."""
        with self._bounded("watch"):
            self._wire.receive(self._deadline)

    def take(self) -> list[Change | Refusal]:
        """What the answers read so far say; every answered watch is re-armed first. Raises
        HostUnreachable (the connection retired) when a watch ends for another reason."""
        events: list[Change | Refusal] = []
        with self._bounded("watch"):
            wire = self._wire
            for message_id in [i for i in self._dropped if wire.answered(i)]:
                self._dropped.discard(message_id)
                self._reply(message_id)
            if self._echo_id is not None and wire.answered(self._echo_id):
                self._reply(self._echo_id)
                self._echo_id = None
            for message_id in [i for i in self._cancelling if wire.answered(i)]:
                del self._cancelling[message_id]
                self.cancels_confirmed += self._reply(message_id).status == STATUS_CANCELLED
            for message_id in [i for i in self._pending if wire.answered(i)]:
                share = self._pending.pop(message_id)
                status, data = self._reply(message_id)
                if share not in self._watches:
                    continue  # the share was refused meanwhile
                if status in (STATUS_SUCCESS, STATUS_NOTIFY_ENUM_DIR):
                    self._arm(share)
                    events.extend(self._changes(share, status, data))
                elif status in REFUSALS:
                    events.append(self._refuse(share, status))
                else:
                    what = "closed by the server" if status == STATUS_NOTIFY_CLEANUP else "ended"
                    raise HostUnreachable(
                        f"{self.host.host}: the watch of {share!r} {what} (NTSTATUS 0x{status:08X})"
                    )
            wire.flush(self._deadline)
        return events

    def _changes(self, share: str, status: int, data: bytes) -> list[Change]:
        offset, length = struct.unpack_from("<HI", data, 66)
        if status == STATUS_NOTIFY_ENUM_DIR or not length:
            return [Change(share, "", OVERFLOW, True)]
        entries = parse_notify(memoryview(data)[offset : offset + length])
        return [Change(share, path, action, False) for action, path in entries]

    def _refuse(self, share: str, status: int) -> Refusal:
        watch = self._watches.pop(share)
        for message_id in [i for i, s in self._pending.items() if s == share]:
            del self._pending[message_id]
            self._dropped.add(message_id)  # fails the same way; nothing to learn from it
        self._dropped.update(self._send([smb_wire.close(watch.file_id)], watch.tree_id))
        return Refusal(share, refusal_reason(status))

    def keepalive(self, every_s: float) -> None:
        """An ECHO every `every_s`; SourceTimeout (the connection retired) when one has gone
        unanswered for timeout_s."""
        self._check_usable()
        now = time.monotonic()
        if self._echo_id is not None:
            if now - self._echo_sent > self.timeout_s:
                raise self._fail(TimeoutError("no answer to ECHO"), "keepalive")
            return
        if now - self._last_echo >= every_s:
            with self._bounded("keepalive"):
                echo = smb_wire.Message(smb_wire.ECHO, smb_wire.EMPTY_REQUEST.pack(4, 0), 1)
                self._echo_id = self._send([echo], 0)[0]
                self._wire.flush(self._deadline)
            self._echo_sent = self._last_echo = now

    # -- shutdown -------------------------------------------------------------------------

    def cancel(self) -> None:
        """SMB2 CANCEL every outstanding watch request (MS-SMB2 3.2.4.24); their answers
        (STATUS_CANCELLED) are taken by `take`. Nothing is waited for here."""
        if not self.usable:
            return
        with self._bounded("cancel"):
            for message_id, share in self._pending.items():
                watch = self._watches.get(share)
                self._queue_cancel(message_id, watch.tree_id if watch else 0)
            self._cancelling.update(self._pending)
            self._pending.clear()
            self._watches.clear()
            self._wire.flush(self._deadline)

    def _queue_cancel(self, message_id: int, tree_id: int) -> None:
        # A CANCEL reuses the request's message id and takes no credit, which `Wire.send` (a new
        # id per message) does not do, so it is framed here with the session's keys.
        wire = self._wire
        async_id = wire.async_ids.get(message_id)
        encrypted = wire._encrypt is not None and (
            self._encrypt_session or tree_id in self._encrypted_trees
        )
        sign = None if encrypted else wire._sign
        flags = (smb_wire.FLAG_SIGNED if sign else 0) | (smb_wire.FLAG_ASYNC if async_id else 0)
        fields = (b"\xfeSMB", 64, 0, 0, CANCEL, 0, flags, 0, message_id)
        if async_id:
            header = ASYNC_HEADER.pack(*fields, async_id, wire._session_id, smb_wire.NO_SIGNATURE)
        else:
            header = smb_wire.REQUEST_HEADER.pack(
                *fields, 0, tree_id, wire._session_id, smb_wire.NO_SIGNATURE
            )
        raw = header + smb_wire.EMPTY_REQUEST.pack(4, 0)
        if sign is not None:
            raw = raw[:48] + sign(raw, message_id, CANCEL, False) + raw[64:]
        if encrypted:
            raw = wire._encrypt(raw)
        wire._outgoing.append(len(raw).to_bytes(4, "big") + raw)

    def abandon(self) -> None:
        """Log off without waiting for the answer and close the socket."""
        if self.usable:
            try:
                with self._bounded("log off"):
                    self._send([smb_wire.logoff()], 0)
                    self._wire.flush(self._deadline)
            except SourceError:
                pass  # the socket is closed next in any case
        self._retire(HostUnreachable(f"{self.host.host}: the watch was stopped"))
