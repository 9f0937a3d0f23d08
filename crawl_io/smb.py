"""The smb:// source: one SMB2/3 connection per host, owned here, with hard time limits.

smbprotocol's low-level API (Connection, Session) negotiates and authenticates; then the
connection's socket is taken over by `crawl_io.smb_wire`, which builds every later request with
`struct` and reads the answers in the calling thread (smbprotocol's message objects and its
receive thread cost more CPU per folder than smbd spends answering it). Its high-level
`smbclient` is avoided because it keeps a process-wide connection cache and waits ~20 minutes
on a hung server.

- Time limit: each call has one deadline, `timeout_s` from its start. While smbprotocol sets
  up the session a watchdog thread shuts the socket down when it passes; afterwards every socket
  wait gets what remains of it. Past it `SourceTimeout` is raised. A connection that failed
  once (timeout, reset, refused) is never used again: every later call raises the same error
  class at once.
- Listing: one compound request per folder (CREATE + QUERY_DIRECTORY + CLOSE) with a 1 MiB
  output buffer (a folder that may not fit is read on with its own handle), parsed with
  `struct`: FileDirectoryInformation carries size, last-write time and attributes, so there is
  no per-entry stat. `listdir` also guesses the folders a depth-first walk asks for next (the
  subfolders it just returned) and keeps a few of them in flight, so round trips overlap.
- Reads: CREATE + READ + CLOSE in one compound; opened for reading only.
- Sessions: guest sessions are unsigned; user sessions are signed (and answers verified) with
  the keys smbprotocol derived; a share or session that demands encryption is encrypted.
- Names: characters Windows forbids (`"*:<>?\\|` and controls) arrive as the private-use
  code points U+F001..U+F027 when the server maps them the way macOS / Services for Mac do
  (Samba's `vfs_catia` or `vfs_fruit`); they are shown as the original characters and mapped
  back in requests. Without such a mapping Samba shows 8.3 mangled names (e.g. `A3KXQ~B`),
  which are listed and readable under that name.
- Share enumeration: SRVSVC NetrShareEnum through impacket's DCE/RPC and NDR code, carried over
  this connection's `IPC$` pipe (one connection, one time limit).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable

from smbprotocol.connection import Connection
from smbprotocol.exceptions import SMBAuthenticationError, SMBResponseException
from smbprotocol.session import Session

from crawl_io import smb_wire
from crawl_io.smb_wire import (
    STATUS_BUFFER_OVERFLOW,
    STATUS_END_OF_FILE,
    STATUS_NO_MORE_FILES,
    STATUS_SUCCESS,
    Message,
    Wire,
)
from crawl_io.sources import (
    AccessDenied,
    AuthFailed,
    ConnectionRefused,
    Credentials,
    Entry,
    HostUnreachable,
    HostURL,
    NotFound,
    SourceError,
    SourceTimeout,
    UnknownHostName,
)

# Access masks and options (MS-SMB2 2.2.13): read-only opens.
FILE_READ_DATA = 0x1  # FILE_LIST_DIRECTORY for a folder
FILE_WRITE_DATA = 0x2  # only for the srvsvc pipe on IPC$, never on a disk share
FILE_READ_ATTRIBUTES = 0x80
SYNCHRONIZE = 0x100000
READ_ACCESS = FILE_READ_DATA | FILE_READ_ATTRIBUTES | SYNCHRONIZE
PIPE_ACCESS = FILE_READ_DATA | FILE_WRITE_DATA | SYNCHRONIZE
FILE_DIRECTORY_FILE = 0x1
FILE_NON_DIRECTORY_FILE = 0x40
FILE_ATTRIBUTE_DIRECTORY = 0x10
FILE_ATTRIBUTE_REPARSE_POINT = 0x400
SHAREFLAG_ENCRYPT_DATA = 0x8000
MAX_READ = 1024 * 1024  # bytes per READ request at most (16 credits), or the server's limit

LIST_BUFFER = 1024 * 1024  # bytes per QUERY_DIRECTORY answer: ~7000 entries
# The largest entry: 64-byte header, a 255-unit UTF-16 name, 8-byte alignment. A server stops
# filling an answer when the next entry does not fit, so an answer with at least this much room
# left holds the whole folder and needs no second QUERY_DIRECTORY.
MAX_DIR_ENTRY = 64 + 2 * 255 + 8
FILETIME_UNIX_EPOCH = 116_444_736_000_000_000  # 1970-01-01 in 100 ns ticks since 1601
# NextEntryOffset, LastWriteTime, EndOfFile, FileAttributes, FileNameLength
DIR_ENTRY = struct.Struct("<I20xQ8xq8xII")

# Services for Mac mapping of the characters Windows forbids in names (as vfs_fruit/catia).
_SFM_CHARS = [chr(c) for c in range(1, 32)] + list('"*:<>?\\|')
FROM_SFM = {0xF001 + i: ch for i, ch in enumerate(_SFM_CHARS)}
TO_SFM = {ord(ch): chr(0xF001 + i) for i, ch in enumerate(_SFM_CHARS)}
NOT_FOUND_STATUSES = {
    0xC0000034,  # OBJECT_NAME_NOT_FOUND
    0xC000003A,  # OBJECT_PATH_NOT_FOUND
    0xC000000F,  # NO_SUCH_FILE
    0xC0000033,  # OBJECT_NAME_INVALID
    0xC00000CC,  # BAD_NETWORK_NAME (no such share)
    0xC0000103,  # NOT_A_DIRECTORY
    0xC00000BA,  # FILE_IS_A_DIRECTORY
    0xC0000056,  # DELETE_PENDING
    0xC0000123,  # FILE_DELETED
    0xC0000039,  # OBJECT_PATH_INVALID
}
# The session itself refused (MS-ERREF 2.3): wrong user or password, an account that may not
# log on. Not the same as a share or file refused to a session that logged on.
LOGON_STATUSES = {
    0xC000006D,  # LOGON_FAILURE
    0xC000006A,  # WRONG_PASSWORD
    0xC0000072,  # ACCOUNT_DISABLED
    0xC0000071,  # PASSWORD_EXPIRED
    0xC000006E,  # ACCOUNT_RESTRICTION
    0xC0000064,  # NO_SUCH_USER
    0xC0000234,  # ACCOUNT_LOCKED_OUT
    0xC000006F,  # INVALID_LOGON_HOURS
    0xC0000070,  # INVALID_WORKSTATION
    0xC0000193,  # ACCOUNT_EXPIRED
    0xC0000224,  # PASSWORD_MUST_CHANGE
}
DENIED_STATUSES = {
    0xC0000022,  # ACCESS_DENIED
    0xC00000CA,  # NETWORK_ACCESS_DENIED
    0xC0000043,  # SHARING_VIOLATION
    *LOGON_STATUSES,
}


def smb_path(path: str) -> str:
    """Share-relative '/' path -> SMB path, forbidden characters mapped to SFM code points."""
    return "\\".join(part.translate(TO_SFM) for part in path.split("/")) if path else ""


def parse_directory(buffer: bytes | memoryview, entries: list[Entry]) -> None:
    """Append the entries of one FileDirectoryInformation buffer, without '.' and '..'."""
    offset = 0
    unpack = DIR_ENTRY.unpack_from
    while True:
        next_offset, write_time, size, attributes, name_length = unpack(buffer, offset)
        raw = bytes(buffer[offset + 64 : offset + 64 + name_length])
        name = raw.decode("utf-16-le", "surrogatepass")
        if name not in (".", "..") and not attributes & FILE_ATTRIBUTE_REPARSE_POINT:
            if b"\xf0" in raw:  # perhaps a mapped character (U+F0xx); most names have none
                name = name.translate(FROM_SFM)
            is_dir = bool(attributes & FILE_ATTRIBUTE_DIRECTORY)
            mtime_us = (write_time - FILETIME_UNIX_EPOCH) // 10
            entries.append(Entry(name, is_dir, 0 if is_dir else size, mtime_us))
        if not next_offset:
            return
        offset += next_offset


class _Watchdog:
    """One thread per source; calls `on_expire` when an armed deadline passes."""

    def __init__(self, on_expire: Callable[[], None]) -> None:
        self._on_expire = on_expire
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="smb-watchdog", daemon=True)
        self._thread.start()

    def arm(self, seconds: float) -> None:
        with self._cond:
            self._deadline = time.monotonic() + seconds
            self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._deadline = None

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(5.0)

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                if self._deadline is None:
                    self._cond.wait()
                    continue
                remaining = self._deadline - time.monotonic()
                if remaining > 0:
                    self._cond.wait(remaining)
                    continue
                self._deadline = None
                self._on_expire()


class SMBSource:
    """Source protocol over one SMB connection. Not thread-safe: one caller at a time."""

    list_buffer = LIST_BUFFER  # bytes per directory answer (tests shrink it)

    def __init__(
        self,
        host: HostURL,
        credentials: Credentials,
        timeout_s: float = 30.0,
        window: int = 16,
    ) -> None:
        self.host = host
        self.timeout_s = timeout_s
        self._window = max(1, window)
        self._credentials = credentials
        self._conn: Connection | None = None
        self._wire: Wire | None = None
        self._encrypt_session = False
        self._max_read = MAX_READ
        self._trees: dict[str, int] = {}  # share -> tree id
        self._encrypted_trees: set[int] = set()
        self._failure: SourceError | None = None
        self._expired = False
        self._deadline = 0.0  # of the call in progress (nested scopes share it)
        self._armed = False
        self._watchdog: _Watchdog | None = None  # only while smbprotocol owns the socket
        # Read-ahead for depth-first walks: requests in flight (their message ids), answers
        # not yet asked for, and a stack of folders the walk is expected to ask for next.
        self._inflight: OrderedDict[tuple[str, str], list[int]] = OrderedDict()
        self._ready: OrderedDict[tuple[str, str], list[Entry] | SourceError] = OrderedDict()
        self._ahead: list[tuple[str, str]] = []
        self.requests_sent = 0  # compound requests, for benchmarks
        self._connect()

    # -- connection and failures -------------------------------------------------------

    def _connect(self) -> None:
        port = self.host.port or 445
        # Signed sessions for users (Samba rejects unsigned SMB 3.1.1 user sessions); a guest
        # session cannot sign.
        signed = bool(self._credentials.user)
        conn = Connection(uuid.uuid4(), self.host.hostname, port, require_signing=signed)
        self._conn = conn
        self._watchdog = _Watchdog(self._abort)
        try:
            with self._bounded("connect"):
                try:
                    conn.connect(timeout=int(self.timeout_s) + 1)  # the watchdog comes first
                except ValueError as e:  # smbprotocol's wrapper around the socket error
                    raise connect_error(self.host.host, e) from None
                request_handover = smb_wire.prepare_handover(conn)
                session = self._session_setup(conn)
                self._wire = smb_wire.take_over(conn, session, request_handover, self.timeout_s)
                self._encrypt_session = bool(session.encrypt_data)
                self._max_read = min(MAX_READ, conn.max_read_size or MAX_READ)
        finally:
            self._watchdog.stop()
            self._watchdog = None

    def _session_setup(self, conn: Connection) -> Session:
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
        except SMBAuthenticationError:
            raise AuthFailed(f"{self.host.host}: logon failure for {who}") from None
        except SMBResponseException as e:
            if e.status in DENIED_STATUSES:  # the session is refused: nothing is readable
                raise AuthFailed(f"{self.host.host}: logon failure for {who}") from None
            raise
        return session

    def _abort(self) -> None:
        """Watchdog: the server did not answer in time; wake every waiter by killing the socket."""
        self._expired = True
        transport = self._conn.transport if self._conn else None
        sock = getattr(transport, "_sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _bounded(self, what: str) -> _Bounded:
        return _Bounded(self, what)

    def _fail(self, error: BaseException, what: str) -> SourceError:
        """Turn any exception into a SourceError; connection-level ones retire the connection."""
        timeout = SourceTimeout(f"{self.host.host}: no answer within {self.timeout_s:g} s ({what})")
        if self._expired or isinstance(error, TimeoutError):
            failure: SourceError = timeout
        elif isinstance(error, SourceError):
            failure = error  # a per-request answer (not found, denied): the connection is fine
        elif "timeout" in str(error).lower():  # smbprotocol's own, while connecting
            failure = timeout
        elif isinstance(error, SMBResponseException):  # from smbprotocol while connecting
            failure = status_error(error.status, f"{self.host.host}: {what}")
        elif isinstance(error, OSError | ConnectionError | EOFError) or "closed" in str(error):
            failure = HostUnreachable(f"{self.host.host}: connection lost ({what})")
        else:
            failure = SourceError(f"{self.host.host}: {what}: {self._scrub(error)}")
        # Anything but a per-request answer leaves the connection in an unknown state.
        if failure is not error or isinstance(failure, HostUnreachable) or self._wire is None:
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
        if self._wire is not None:
            self._wire.close()
        elif self._conn is not None and self._conn.transport is not None:
            try:  # smbprotocol still owns the socket (and its receive thread)
                self._conn.disconnect(close=False)
            except Exception:  # the socket is already gone; nothing left to release
                pass

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise type(self._failure)(str(self._failure))

    def _send(self, messages: list[Message], tree_id: int) -> list[int]:
        """Queue a request (a related compound if several); returns the message ids."""
        self.requests_sent += 1
        encrypted = self._encrypt_session or tree_id in self._encrypted_trees
        return self._wire.send(messages, tree_id, self._deadline, encrypted)

    def _reply(self, message_id: int) -> smb_wire.Reply:
        return self._wire.reply(message_id, self._deadline)

    def _request(self, message: Message, tree_id: int, what: str) -> bytes:
        """One request and its answer; an error status raises the matching SourceError."""
        status, data = self._reply(self._send([message], tree_id)[0])
        if status not in (STATUS_SUCCESS, STATUS_BUFFER_OVERFLOW):
            raise status_error(status, f"{self.host.host}: {what}")
        return data

    def _tree(self, share: str) -> int:
        tree_id = self._trees.get(share)
        if tree_id is None:
            with self._bounded(f"share {share!r}"):
                unc = rf"\\{self.host.hostname}\{share}"
                data = self._request(smb_wire.tree_connect(unc), 0, f"share {share!r}")
            tree_id = smb_wire.tree_id_of(data)
            if smb_wire.share_flags_of(data) & SHAREFLAG_ENCRYPT_DATA:
                self._encrypted_trees.add(tree_id)
            self._trees[share] = tree_id
        return tree_id

    # -- Source protocol -----------------------------------------------------------------

    def shares(self) -> list[str]:
        """The host's disk shares (or the one its URL names), sorted; hidden ones ($) left out."""
        self._check_usable()
        if self.host.share is not None:
            return [self.host.share]
        with self._bounded("share enumeration"):
            names = _enumerate_disk_shares(self)
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
        self._expect([(share, f"{path}/{e.name}" if path else e.name) for e in result if e.is_dir])
        return result

    def read(self, share: str, path: str, offset: int, length: int) -> bytes:
        self._check_usable()
        chunks: list[bytes] = []
        with self._bounded(f"read {share}/{path}"):
            tree_id = self._tree(share)
            while length > 0:
                want = min(length, self._max_read)
                piece = self._read_once(tree_id, path, offset, want)
                chunks.append(piece)
                if len(piece) < want:
                    break  # end of file
                offset += len(piece)
                length -= len(piece)
        return b"".join(chunks)

    def close(self) -> None:
        if self._failure is None and self._wire is not None:
            try:
                with self._bounded("close"):
                    self._reply(self._send([smb_wire.logoff()], 0)[0])
            except SourceError:
                pass
        self._retire(SourceError(f"{self.host.host}: source is closed"))
        self._trees.clear()

    def __enter__(self) -> SMBSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- listing with read-ahead ---------------------------------------------------------

    def _issue(self, key: tuple[str, str]) -> None:
        share, path = key
        tree_id = self._tree(share)
        name = smb_path(path).encode("utf-16-le", "surrogatepass")
        compound = [
            smb_wire.create(name, READ_ACCESS, FILE_DIRECTORY_FILE),
            smb_wire.query_directory(self._list_buffer()),
            smb_wire.close(),
        ]
        self._inflight[key] = self._send(compound, tree_id)

    def _list_buffer(self) -> int:
        # Without multi-credit requests (SMB 2.0.2) an answer is at most 64 KiB.
        return self.list_buffer if self._wire.multi_credit else min(self.list_buffer, 65536)

    def _expect(self, folders: list[tuple[str, str]]) -> None:
        """Folders a depth-first walk will ask for next; keep some of them in flight."""
        self._ahead.extend(reversed(folders))
        if len(self._ahead) > 4096:
            del self._ahead[: len(self._ahead) - 4096]
        if self._ahead:
            with self._bounded("list ahead"):
                self._top_up()
                self._wire.flush(self._deadline)  # the server works while the caller does

    def _top_up(self) -> None:
        """File the folders whose answers have come in, then fill the window from the guesses.

        Answered folders leave the window even if the walk never asks for them (it skipped a
        subtree), so wrong guesses cannot block the read-ahead."""
        answered = self._wire.answered
        for key in [k for k, ids in self._inflight.items() if answered(ids[-1])]:
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
        create_id, query_id, close_id = self._inflight.pop(key)
        entries: list[Entry] = []
        error: SourceError | None = None
        used = 0
        for message_id in (create_id, query_id, close_id):
            status, data = self._reply(message_id)
            if status == STATUS_SUCCESS:
                if message_id == query_id:
                    used = _append_query_entries(data, entries)
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
        tree_id = self._tree(share)
        name = smb_path(path).encode("utf-16-le", "surrogatepass")
        opened = self._request(
            smb_wire.create(name, READ_ACCESS, FILE_DIRECTORY_FILE), tree_id, what
        )
        file_id = smb_wire.file_id_of(opened)
        entries: list[Entry] = []
        error: SourceError | None = None
        while error is None:
            query = smb_wire.query_directory(self._list_buffer(), file_id)
            status, data = self._reply(self._send([query], tree_id)[0])
            if status == STATUS_NO_MORE_FILES:
                break
            if status != STATUS_SUCCESS:
                error = status_error(status, f"{self.host.host}: {what}")
            else:
                _append_query_entries(data, entries)
        self._reply(self._send([smb_wire.close(file_id)], tree_id)[0])
        if error is not None:
            raise error
        entries.sort()
        return entries

    # -- reads ---------------------------------------------------------------------------

    def _read_once(self, tree_id: int, path: str, offset: int, length: int) -> bytes:
        name = smb_path(path).encode("utf-16-le", "surrogatepass")
        compound = [
            smb_wire.create(name, READ_ACCESS, FILE_NON_DIRECTORY_FILE),
            smb_wire.read(offset, length),
            smb_wire.close(),
        ]
        ids = self._send(compound, tree_id)
        data = b""
        error: SourceError | None = None
        for message_id in ids:
            status, reply = self._reply(message_id)
            if status == STATUS_SUCCESS:
                if message_id == ids[1]:
                    data = smb_wire.read_data(reply)
            elif status != STATUS_END_OF_FILE and error is None:
                error = status_error(status, f"{self.host.host}: read {path}")
        if error is not None:
            raise error
        return data

    # -- pipes (share enumeration) ---------------------------------------------------------

    def open_pipe(self, name: str) -> tuple[int, bytes]:
        """Open a named pipe on IPC$ for DCE/RPC; returns (tree id, file id)."""
        tree_id = self._tree("IPC$")
        message = smb_wire.create(name.encode("utf-16-le"), PIPE_ACCESS, 0)
        return tree_id, smb_wire.file_id_of(self._request(message, tree_id, f"pipe {name}"))

    def pipe_write(self, tree_id: int, file_id: bytes, data: bytes) -> None:
        self._request(smb_wire.write(data, file_id), tree_id, "pipe write")

    def pipe_read(self, tree_id: int, file_id: bytes, length: int = 65536) -> bytes:
        return smb_wire.read_data(
            self._request(smb_wire.read(0, length, file_id), tree_id, "pipe read")
        )

    def pipe_close(self, tree_id: int, file_id: bytes) -> None:
        self._request(smb_wire.close(file_id), tree_id, "pipe close")


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
            if source._watchdog is not None:
                source._watchdog.arm(source.timeout_s)

    def __exit__(self, kind: type | None, error: BaseException | None, tb: object) -> bool:
        source = self._source
        if self._outer:
            if source._watchdog is not None:
                source._watchdog.disarm()
            source._armed = False
        if error is None or not isinstance(error, Exception):
            return False
        raise source._fail(error, self._what) from None


def _append_query_entries(data: bytes, entries: list[Entry]) -> int:
    """Parse one QUERY_DIRECTORY answer; returns the bytes of its buffer in use."""
    offset, length = smb_wire.query_buffer(data)
    if length:
        parse_directory(memoryview(data)[offset : offset + length], entries)
    return length


def connect_error(host: str, error: ValueError) -> SourceError:
    """The source error for smbprotocol's ValueError around a failed TCP connect."""
    cause = error.__cause__
    if isinstance(cause, socket.gaierror):
        return UnknownHostName(f"{host}: unknown host name")
    if isinstance(cause, ConnectionRefusedError) or "refused" in str(error).lower():
        return ConnectionRefused(f"{host}: connection refused")
    if isinstance(cause, TimeoutError):
        return SourceTimeout(f"{host}: no answer to the connection")
    return HostUnreachable(f"{host}: no connection")


def status_error(status: int, what: str) -> SourceError:
    """The source error for an NTSTATUS answer to one request."""
    if status in NOT_FOUND_STATUSES:
        return NotFound(f"{what}: not found")
    if status in LOGON_STATUSES:
        return AuthFailed(f"{what}: logon failure")
    if status in DENIED_STATUSES:
        return AccessDenied(f"{what}: access denied")
    return SourceError(f"{what}: NTSTATUS 0x{status:08X}")


def _enumerate_disk_shares(source: SMBSource) -> list[str]:
    """SRVSVC NetrShareEnum (level 1) with impacket's DCE/RPC over this connection's pipe."""
    from impacket.dcerpc.v5 import rpcrt, srvs, transport  # loads only when shares are listed

    tree_id, file_id = source.open_pipe("srvsvc")

    class PipeTransport(transport.DCERPCTransport):
        def __init__(self) -> None:
            super().__init__(source.host.hostname, source.host.port or 445)

        def connect(self) -> int:
            return 1

        def disconnect(self) -> int:
            return 1

        def send(self, data: bytes, forceWriteAndx: int = 0, forceRecv: int = 0) -> None:
            source.pipe_write(tree_id, file_id, data)

        def recv(self, forceRecv: int = 0, count: int = 0) -> bytes:
            return source.pipe_read(tree_id, file_id)

    try:
        dce = rpcrt.DCERPC_v5(PipeTransport())
        dce.bind(srvs.MSRPC_UUID_SRVS)
        answer = srvs.hNetrShareEnum(dce, 1, serverName=f"\\\\{source.host.hostname}\x00")
    except rpcrt.DCERPCException as e:
        raise SourceError(f"{source.host.host}: share enumeration failed ({e})") from None
    finally:
        source.pipe_close(tree_id, file_id)
    shares = answer["InfoStruct"]["ShareInfo"]["Level1"]["Buffer"]
    return [
        share["shi1_netname"][:-1]
        for share in shares
        if share["shi1_type"] & 0xFFFF == srvs.STYPE_DISKTREE
        and not share["shi1_type"] & srvs.STYPE_SPECIAL
    ]
