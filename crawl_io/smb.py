"""The smb:// source: one SMB2/3 connection per host, through smbprotocol's public API; the
crawler's listings, reads and tags, `watch`'s change notifications (crawl_io.notify) and
`serve`'s streams and covers (SMBFile) all go through it.

Messages are built with send=False and sent as related compounds; only QUERY_DIRECTORY's and
READ's answers are parsed by hand (crawl_io.smb_names). smbprotocol's `smbclient` is avoided: it
caches connections process-wide and waits ~20 minutes on a hung server. Where the public API
stops short (credits, whether an answer is in), crawl_io.smb_internals reaches past it.
- Listing: CREATE + QUERY_DIRECTORY (1 MiB) + CLOSE per folder; the subfolders just returned
  are what a depth-first walk asks for next, so a few are kept in flight. Reads: CREATE + READ +
  CLOSE. Shares: SRVSVC NetrShareEnum (impacket's NDR) over this connection's IPC$ pipe.
- A file opened (SMBFile): CREATE answered through smbprotocol's Open (its id, size and times),
  then READs of byte ranges, several in flight, then CLOSE.
- Credits: one ECHO asks for CREDIT_TARGET; a request waits for answers while the window is short.
- Time limit: one deadline per call; waits smbprotocol makes without a limit (session set-up,
  tree connect, an Open's answers) run under a timer that closes the connection. A connection
  that failed once (timeout, reset, bad signature) is retired: later calls raise the same
  error class at once.
- Guest sessions are unsigned; user sessions signed (Samba refuses unsigned 3.1.1 user sessions).
"""

from __future__ import annotations

import struct
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from smbprotocol.connection import Connection, Request
from smbprotocol.exceptions import SMBAuthenticationError, SMBResponseException
from smbprotocol.file_info import FileInformationClass
from smbprotocol.open import Open, SMB2CreateRequest
from smbprotocol.session import Session, SMB2Logoff
from smbprotocol.tree import TreeConnect

from sharecrawl.crawl_io.checked import EPOCH, clamped
from sharecrawl.crawl_io.smb_errors import (
    DENIED_STATUSES,
    STATUS_BUFFER_OVERFLOW,
    STATUS_END_OF_FILE,
    STATUS_NO_MORE_FILES,
    STATUS_SUCCESS,
    connect_error,
    status_error,
)
from sharecrawl.crawl_io.smb_internals import answered, connection_open, credits, whole_messages
from sharecrawl.crawl_io.smb_names import MAX_DIR_ENTRY, append_query_entries, smb_name
from sharecrawl.crawl_io.sources import (
    AuthFailed,
    Credentials,
    Entry,
    HostUnreachable,
    HostURL,
    SourceError,
    SourceTimeout,
)

T = TypeVar("T")
# CREATE fields (MS-SMB2 2.2.13): read-only opens, shared with everyone.
IMPERSONATION, SHARE_ALL, FILE_OPEN = 2, 0x7, 1
READ_ACCESS = 0x1 | 0x80 | 0x100000  # FILE_READ_DATA (LIST_DIRECTORY), READ_ATTRIBUTES, SYNCHRONIZE
PIPE_ACCESS = 0x1 | 0x2 | 0x100000  # READ_DATA, WRITE_DATA (the srvsvc pipe alone), SYNCHRONIZE
FILE_DIRECTORY_FILE, FILE_NON_DIRECTORY_FILE = 0x1, 0x40
ROOT_NAME = b"\x00\x00"  # a CREATE's name for the share's root
MAX_READ = 1024 * 1024  # bytes per READ request at most (16 credits), or the server's limit
LIST_BUFFER = 1024 * 1024  # bytes per QUERY_DIRECTORY answer: ~7000 entries
PAYLOAD_PER_CREDIT = 65536
CREDIT_TARGET = 512


def create_message(
    handle: Open, path: str, options: int, access: int = READ_ACCESS
) -> tuple[SMB2CreateRequest, Callable[[Request], Any]]:
    """A read-only CREATE of `path` for `handle` (MS-SMB2 2.2.13), and smbprotocol's handler of
    its answer (which files the handle's id, size and times)."""
    message, receive = handle.create(
        IMPERSONATION, access, 0, SHARE_ALL, FILE_OPEN, options, send=False
    )
    message["buffer_path"] = smb_name(path) or ROOT_NAME  # mapped characters, surrogates
    return message, receive


def epoch_us(moment: datetime) -> int:
    """A FILETIME as smbprotocol gives it, in microseconds since 1970 as a listing has it."""
    aware = moment if moment.tzinfo else moment.replace(tzinfo=UTC)  # its datetime.max: past 9999
    return (aware - EPOCH) // timedelta(microseconds=1)


class SMBSource:
    """Source protocol over one SMB connection. Not thread-safe: one caller at a time."""

    list_buffer = LIST_BUFFER  # bytes per directory answer (tests shrink it)

    def __init__(
        self, host: HostURL, credentials: Credentials, timeout_s: float = 30.0, window: int = 16
    ) -> None:
        self.host = host
        self.timeout_s = timeout_s
        self._credentials = credentials
        self._window = max(1, window)
        # Read-ahead: requests in flight, answers not asked for yet, folders expected next.
        self._inflight: OrderedDict[tuple[str, str], list[Request]] = OrderedDict()
        self._ready: OrderedDict[tuple[str, str], list[Entry] | SourceError] = OrderedDict()
        self._ahead: list[tuple[str, str]] = []
        self._told = False
        self._compound: tuple[SMB2CreateRequest, Any, Any] | None = None  # see _issue
        self._trees: dict[str, TreeConnect] = {}
        self._failure: SourceError | None = None
        self._expired = False
        self._deadline = 0.0  # of the call in progress (nested scopes share it)
        self._armed = False
        self._max_read = MAX_READ
        self._conn = Connection(
            uuid.uuid4(), host.hostname, host.port or 445, require_signing=bool(credentials.user)
        )
        self._session: Session | None = None
        with self._bounded("connect"):
            self._guarded(self._connect)

    def _connect(self) -> None:
        conn = self._conn
        try:
            conn.connect(timeout=int(self.timeout_s) + 1)  # the timer comes first
        except ValueError as e:  # smbprotocol's wrapper around the socket error
            raise connect_error(self.host.host, e) from None
        user = self._credentials.user
        session = Session(
            conn,
            username=user or "guest",  # unknown users map to guest (Samba, Windows)
            password=self._credentials.password or "",
            require_encryption=False,
            auth_protocol="ntlm",
        )
        who = f"user {user!r}" if user else "guest"
        try:
            session.connect()
        except (SMBAuthenticationError, SMBResponseException) as e:
            if isinstance(e, SMBResponseException) and e.status not in DENIED_STATUSES:
                raise
            raise AuthFailed(f"{self.host.host}: logon failure for {who}") from None
        conn.echo(
            sid=session.session_id, timeout=int(self.timeout_s) + 1, credit_request=CREDIT_TARGET
        )
        self._session = session
        self._max_read = min(MAX_READ, conn.max_read_size or MAX_READ)

    def _guarded(self, call: Callable[[], T]) -> T:
        """Run a call smbprotocol waits on without a limit; the transport closes at the deadline."""
        done = threading.Event()
        delay = max(0.0, self._deadline - time.monotonic())
        # a daemon: a process that exits mid-call is not held until the deadline
        threading.Thread(target=lambda: done.wait(delay) or self._abort(), daemon=True).start()
        try:
            return call()
        finally:
            done.set()

    def _abort(self) -> None:
        self._expired = True
        with suppress(Exception):  # wakes every waiter: the receive thread sees the socket end
            self._conn.disconnect(close=False)

    def _bounded(self, what: str) -> _Bounded:
        return _Bounded(self, what)

    def _fail(self, error: BaseException, what: str) -> SourceError:
        """Turn any exception into a SourceError; connection-level ones retire the connection."""
        timeout = SourceTimeout(f"{self.host.host}: no answer within {self.timeout_s:g} s ({what})")
        if self._expired or isinstance(error, TimeoutError):
            failure: SourceError = timeout
        elif isinstance(error, SourceError):
            failure = error  # a per-request answer (not found, denied): the connection is fine
        elif "timeout" in str(error).lower():  # smbprotocol's, waiting for an answer
            failure = timeout
        elif isinstance(error, SMBResponseException):  # from smbprotocol while connecting
            failure = status_error(error.status, f"{self.host.host}: {what}")
        elif (
            isinstance(error, OSError | ConnectionError | EOFError)
            or "closed" in str(error)
            or not connection_open(self._conn)  # e.g. an answer's signature did not verify
        ):
            failure = HostUnreachable(f"{self.host.host}: connection lost ({what})")
        else:
            failure = SourceError(f"{self.host.host}: {what}: {self._scrub(error)}")
        # Anything but a per-request answer leaves the connection in an unknown state.
        if failure is not error or self._session is None:
            self._retire(failure)
        return failure

    def _scrub(self, error: BaseException) -> str:
        """An exception's text, never with the password in it (it ends up in tables)."""
        text = f"{type(error).__name__}: {error}"[:200]
        password = self._credentials.password
        return text.replace(password, "***") if password else text

    def _retire(self, failure: SourceError) -> None:
        self._failure = failure
        self._inflight.clear()
        self._ready.clear()
        self._ahead.clear()
        with suppress(Exception):  # the socket may be gone already: nothing left to release
            self._conn.disconnect(close=False)

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise type(self._failure)(str(self._failure))

    def _remaining(self) -> float:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no answer in time")
        return remaining

    def _send(
        self, messages: list[Any], tree: TreeConnect | None, payload: int = 1
    ) -> list[Request]:
        """Send related messages; waits while the credit window is short for `payload` bytes."""
        conn = self._conn
        charge = 1 + max(0, payload - 1) // PAYLOAD_PER_CREDIT if conn.supports_multi_credit else 1
        need = len(messages) - 1 + charge
        while credits(conn) < need:
            if not self._inflight:
                raise ConnectionError(f"the server granted too few credits ({need} needed)")
            key = next(iter(self._inflight))
            self._ready[key] = self._settle(key)
        sid = self._session.session_id if self._session else None
        tid = tree.tree_connect_id if tree else None
        if len(messages) == 1:
            return [conn.send(messages[0], sid, tid)]
        return conn.send_compound(messages, sid, tid, related=True)

    def _answer(self, request: Request) -> tuple[int, bytes]:
        """The final answer's status and body (after the 64-byte header)."""
        try:
            response = self._conn.receive(request, timeout=self._remaining())
        except SMBResponseException as e:
            return e.status, e.header["data"].get_value()
        return response["status"].get_value(), response["data"].get_value()

    def _request(
        self, message: Any, tree: TreeConnect | None, what: str, payload: int = 1
    ) -> bytes:
        """One request and its answer's body; an error status raises the matching SourceError."""
        status, body = self._answer(self._send([message], tree, payload)[0])
        if status not in (STATUS_SUCCESS, STATUS_BUFFER_OVERFLOW):
            raise status_error(status, f"{self.host.host}: {what}")
        return body

    def _tree(self, share: str) -> TreeConnect:
        tree = self._trees.get(share)
        if tree is None:
            tree = TreeConnect(self._session, rf"\\{self.host.hostname}\{share}")
            try:
                # Validating the negotiation needs signing keys, which a guest session lacks.
                signed = bool(self._credentials.user)
                self._guarded(lambda: tree.connect(require_secure_negotiate=signed))
            except SMBResponseException as e:
                raise status_error(e.status, f"{self.host.host}: share {share!r}") from None
            self._trees[share] = tree
        return tree

    def _open(self, tree: TreeConnect, path: str, options: int, access: int = READ_ACCESS) -> Open:
        """CREATE `path` and take its answer through smbprotocol's Open, which files the file's
        id, size and times; a refusal raises its SourceError."""
        handle = Open(tree, "")
        message, receive = create_message(handle, path, options, access)
        request = self._send([message], tree)[0]
        try:
            self._guarded(lambda: receive(request))
        except SMBResponseException as e:
            raise status_error(e.status, f"{self.host.host}: open {path}") from None
        return handle

    def _close(self, handle: Open) -> None:
        """CLOSE an Open (smbprotocol forgets it then); a refusal changes nothing: it is gone."""
        message, receive = handle.close(send=False)
        request = self._send([message], handle.tree_connect)[0]
        with suppress(SMBResponseException):
            self._guarded(lambda: receive(request))

    @property
    def usable(self) -> bool:
        """False once the connection failed or was closed (every later call raises)."""
        return self._failure is None and connection_open(self._conn)

    def open_file(self, share: str, path: str, block: int = MAX_READ, depth: int = 3) -> SMBFile:
        """The file at `path` opened for reading (NotFound when it is not there or a folder);
        its reads ask `block` bytes at a time, up to `depth` READs ahead."""
        with self._bounded(f"open {share}/{path}"):
            handle = self._open(self._tree(share), path, FILE_NON_DIRECTORY_FILE)
        return SMBFile(self, share, path, handle, block, depth)

    def close(self) -> None:
        if self._failure is None and self._session is not None:
            with suppress(SourceError), self._bounded("close"):
                self._answer(self._send([SMB2Logoff()], None)[0])
        self._retire(SourceError(f"{self.host.host}: source is closed"))
        self._trees.clear()

    def __enter__(self) -> SMBSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def shares(self) -> list[str]:
        """The host's disk shares (or the one its URL names), sorted, without hidden ($) ones."""
        self._check_usable()
        if self.host.share is not None:
            return [self.host.share]
        with self._bounded("share enumeration"):
            names = self._share_names()
        return sorted(n for n in names if not n.endswith("$"))

    def listdir(self, share: str, path: str) -> list[Entry]:
        self._check_usable()
        key = (share, path)
        result = self._ready.pop(key, None)
        with self._bounded(f"list {share}/{path}"):
            if result is None and key not in self._inflight:
                self._issue(key)
            self._top_up()  # may file this folder's answer in _ready
            if result is None:
                result = self._ready.pop(key) if key in self._ready else self._settle(key)
        if isinstance(result, SourceError):
            raise result
        if not self._told:  # a guess: a depth-first walk lists the subfolders next
            prefix = f"{path}/" if path else ""
            self._expect(share, [prefix + e.name for e in result if e.is_dir])
        return result

    def expect(self, share: str, paths: list[str]) -> None:
        """Folders the caller lists next, in order, before those said earlier: no more guesses."""
        self._told = True
        self._expect(share, paths)

    def read(self, share: str, path: str, offset: int, length: int) -> bytes:
        self._check_usable()
        chunks: list[bytes] = []
        with self._bounded(f"read {share}/{path}"):
            tree = self._tree(share)
            while length > 0:
                want = min(length, self._max_read)
                piece = self._read_once(tree, path, offset, want)
                chunks.append(piece)
                if len(piece) < want:
                    break  # end of file
                offset += len(piece)
                length -= len(piece)
        return b"".join(chunks)

    def _share_names(self) -> list[str]:
        from sharecrawl.crawl_io.smb_shares import disk_shares  # impacket loads only for this

        tree = self._tree("IPC$")
        pipe = self._open(tree, "srvsvc", 0, PIPE_ACCESS)

        def write(data: bytes) -> None:
            self._request(pipe.write(data, send=False)[0], tree, "pipe write", len(data))

        def read() -> bytes:
            message = pipe.read(0, 65536, send=False)[0]
            return read_data(self._request(message, tree, "pipe read", 65536))

        try:
            return disk_shares(self.host, write, read)
        finally:
            self._close(pipe)

    def _issue(self, key: tuple[str, str]) -> None:
        tree = self._tree(key[0])
        size = self._list_buffer()
        # One set of messages serves every folder (only the name changes): building them costs
        # more than sending them.
        if self._compound is None or self._compound[1]["output_buffer_length"].get_value() != size:
            folder = Open(tree, "")  # its file id: the CREATE's before it in the compound
            create = create_message(folder, "", FILE_DIRECTORY_FILE)[0]
            self._compound = (create, self._query(folder, size), folder.close(send=False)[0])
        self._compound[0]["buffer_path"] = smb_name(key[1]) or ROOT_NAME
        self._inflight[key] = self._send(list(self._compound), tree, size)

    @staticmethod
    def _query(folder: Open, size: int) -> Any:
        every = FileInformationClass.FILE_DIRECTORY_INFORMATION
        return folder.query_directory("*", every, max_output=size, send=False)[0]

    def _list_buffer(self) -> int:
        # Without multi-credit requests (SMB 2.0.2) an answer is at most 64 KiB.
        if self._conn.supports_multi_credit:
            return self.list_buffer
        return min(self.list_buffer, PAYLOAD_PER_CREDIT)

    def _expect(self, share: str, folders: list[str]) -> None:
        """Folders a depth-first walk will ask for next; keep some of them in flight."""
        self._ahead.extend((share, folder) for folder in reversed(folders))
        if len(self._ahead) > 4096:
            del self._ahead[: len(self._ahead) - 4096]
        if self._ahead:
            with self._bounded("list ahead"):
                self._top_up()

    def _top_up(self) -> None:
        """File the answered folders (wrong guesses must not block the window), then fill it."""
        for key in [k for k, requests in self._inflight.items() if answered(requests[-1])]:
            self._ready[key] = self._settle(key)
        while len(self._inflight) < self._window and self._ahead:
            key = self._ahead.pop()
            if key in self._inflight or key in self._ready:
                continue
            self._issue(key)
        while len(self._ready) > 4 * self._window + 64:
            self._ready.popitem(last=False)  # answers the walk never asked for

    def _settle(self, key: tuple[str, str]) -> list[Entry] | SourceError:
        """Collect one folder's answers: its entries, or a per-folder error (not found...)."""
        requests = self._inflight.pop(key)
        entries: list[Entry] = []
        error: SourceError | None = None
        used = 0
        for i, request in enumerate(requests):
            status, body = self._answer(request)
            if status == STATUS_SUCCESS:
                if i == 1:
                    used = append_query_entries(body, entries)
            elif status != STATUS_NO_MORE_FILES and error is None:
                error = status_error(status, f"{self.host.host}: list {key[0]}/{key[1]}")
        if error is not None:
            return error
        if self._list_buffer() - used < MAX_DIR_ENTRY:
            return self._list_large(key)  # the answer may be cut short: read on with a handle
        entries.sort()
        return entries

    def _list_large(self, key: tuple[str, str]) -> list[Entry]:
        share, path = key
        what = f"list {share}/{path}"
        tree = self._tree(share)
        folder = self._open(tree, path, FILE_DIRECTORY_FILE)
        entries: list[Entry] = []
        error: SourceError | None = None
        size = self._list_buffer()
        while error is None:
            status, body = self._answer(self._send([self._query(folder, size)], tree, size)[0])
            if status == STATUS_NO_MORE_FILES:
                break
            if status != STATUS_SUCCESS:
                error = status_error(status, f"{self.host.host}: {what}")
            else:
                append_query_entries(body, entries)
        self._close(folder)
        if error is not None:
            raise error
        entries.sort()
        return entries

    def _read_once(self, tree: TreeConnect, path: str, offset: int, length: int) -> bytes:
        handle = Open(tree, "")
        compound = [
            create_message(handle, path, FILE_NON_DIRECTORY_FILE)[0],
            handle.read(offset, length, send=False)[0],
            handle.close(send=False)[0],
        ]
        data = b""
        error: SourceError | None = None
        for i, request in enumerate(self._send(compound, tree, length)):
            status, body = self._answer(request)
            if status == STATUS_SUCCESS:
                if i == 1:
                    data = read_data(body)
            elif status != STATUS_END_OF_FILE and error is None:
                error = status_error(status, f"{self.host.host}: read {path}")
        if error is not None:
            raise error
        return data


class SMBFile:
    """A file opened for reading on a source's connection, used as the source is (one caller at
    a time): its size and mtime as the listing stores them, and byte ranges read with up to
    `depth` READs in flight, each call under the source's deadline."""

    def __init__(
        self, source: SMBSource, share: str, path: str, handle: Open, block: int, depth: int
    ) -> None:
        self.source, self.share, self.path = source, share, path
        self._handle, self._block, self._depth = handle, max(1, block), max(1, depth)
        name = path.rpartition("/")[2]
        entry = Entry(name, False, handle.end_of_file, epoch_us(handle.last_write_time))
        _, _, self.size, self.mtime_us = clamped(entry)
        self._closed, self._pending = False, deque[tuple[int, int, Request]]()  # READs: from, to
        whole_messages(source._conn)  # each READ's MiBs in one piece, copied fewer times

    def read(self, offset: int, length: int, ahead: int = 0) -> bytes:
        """`length` bytes at `offset` (fewer at the end); `ahead` more bytes will be asked for
        next, which are read ahead now."""
        end = min(offset + length, self.size)
        if offset >= end:
            return b""
        chunks: list[bytes] = []
        with self.source._bounded(f"read {self.share}/{self.path}"):
            pending = self._pending
            if pending and pending[0][0] != offset:
                self._drain()  # not the bytes read ahead: a seek
            while offset < end:
                if pending and pending[0][1] > end:
                    self._drain()  # read ahead in other pieces than these
                if not pending:
                    self._ask(offset, end - offset)
                self._ask_ahead(end + ahead)
                start, stop, request = pending.popleft()
                chunks.append(self._data(request))
                offset += len(chunks[-1])
                if len(chunks[-1]) < stop - start:  # shorter than it was when opened
                    self._drain()
                    break
        return b"".join(chunks)

    def _ask(self, offset: int, length: int) -> bool:
        """Send a READ of these bytes unless the credits do not cover it now; the first READ in
        flight is of as many bytes as they cover."""
        conn = self.source._conn
        available = credits(conn)
        length = min(length, conn.max_read_size)
        if not self._pending:
            length = min(length, max(1, available) * PAYLOAD_PER_CREDIT)
        charge = 1 + (length - 1) // PAYLOAD_PER_CREDIT if conn.supports_multi_credit else 1
        if charge > available:
            if self._pending:
                return False  # the READs in flight bring credits back
            raise ConnectionError(f"the server granted too few credits ({charge} needed)")
        message = self._handle.read(offset, length, send=False)[0]
        tree = self._handle.tree_connect
        sid = tree.session.session_id
        request = conn.send(message, sid, tree.tree_connect_id, credit_request=charge * 2)
        self._pending.append((offset, offset + length, request))
        return True

    def _ask_ahead(self, end: int) -> None:
        at = self._pending[-1][1] if self._pending else end
        end = min(end, self.size)
        while at < end and len(self._pending) < self._depth:
            if not self._ask(at, min(self._block, end - at)):
                return
            at = self._pending[-1][1]

    def _data(self, request: Request) -> bytes:
        status, body = self.source._answer(request)
        if status == STATUS_SUCCESS:
            return read_data(body)
        if status == STATUS_END_OF_FILE:
            return b""
        raise status_error(status, f"{self.source.host.host}: read {self.share}/{self.path}")

    def _drain(self) -> None:
        while self._pending:
            self.source._answer(self._pending.popleft()[2])

    def close(self) -> None:
        """Close the file (the reads in flight answered first); on a failed connection there is
        nothing left to close."""
        if self._closed:
            return
        self._closed = True
        with suppress(SourceError), self.source._bounded(f"close {self.share}/{self.path}"):
            self._drain()
            self.source._close(self._handle)


def read_data(read_body: bytes) -> bytes:
    """A READ answer's data (MS-SMB2 2.2.20: its offset counts from the header's start)."""
    offset, length = struct.unpack_from("<BxI", read_body, 2)
    return read_body[offset - 64 : offset - 64 + length]


class _Bounded:
    """Context: start the call's deadline, and translate whatever escapes into a SourceError."""

    def __init__(self, source: SMBSource, what: str) -> None:
        self._source, self._what = source, what
        self._outer = False

    def __enter__(self) -> None:
        source = self._source
        source._check_usable()
        self._outer = not source._armed
        if self._outer:
            source._armed = True
            source._deadline = time.monotonic() + source.timeout_s

    def __exit__(self, kind: type | None, error: BaseException | None, tb: object) -> bool:
        if self._outer:
            self._source._armed = False
        if error is None or not isinstance(error, Exception):
            return False
        raise self._source._fail(error, self._what) from None
