"""The smb:// source: one SMB2/3 connection per host, owned here, with hard time limits.

Built on smbprotocol's low-level API (Connection, Session, TreeConnect and its message
structures); its high-level `smbclient` is avoided because it keeps a process-wide connection
cache and waits ~20 minutes on a hung server.

- Time limit: every wait for the server is watched by a per-source watchdog thread; when a
  wait exceeds `timeout_s` the socket is shut down, the wait ends and `SourceTimeout` is
  raised. A connection that failed once (timeout, reset, refused) is never used again: every
  later call raises the same error class at once.
- Listing: one compound request per folder (CREATE + QUERY_DIRECTORY + CLOSE) with a 1 MiB
  output buffer (a folder that may not fit is read on with its own handle), parsed with
  `struct`: FileDirectoryInformation carries size, last-write time and attributes, so there is
  no per-entry stat. `listdir` also guesses the folders a depth-first walk asks for next (the
  subfolders it just returned) and keeps a few of them in flight, so round trips overlap.
- Reads: CREATE + READ + CLOSE in one compound; opened for reading only.
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
from smbprotocol.header import NtStatus
from smbprotocol.open import (
    SMB2CloseRequest,
    SMB2CreateRequest,
    SMB2QueryDirectoryRequest,
    SMB2ReadRequest,
    SMB2WriteRequest,
)
from smbprotocol.session import Session
from smbprotocol.tree import TreeConnect

from crawl_io.sources import (
    AccessDenied,
    Credentials,
    Entry,
    HostUnreachable,
    HostURL,
    NotFound,
    SourceError,
    SourceTimeout,
)

# Access masks and options (MS-SMB2 2.2.13): read-only opens, shared with everyone.
FILE_READ_DATA = 0x1  # FILE_LIST_DIRECTORY for a folder
FILE_WRITE_DATA = 0x2  # only for the srvsvc pipe on IPC$, never on a disk share
FILE_READ_ATTRIBUTES = 0x80
SYNCHRONIZE = 0x100000
SHARE_ALL = 0x7  # FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE
FILE_OPEN = 1
FILE_DIRECTORY_FILE = 0x1
FILE_NON_DIRECTORY_FILE = 0x40
IMPERSONATION = 2
FILE_DIRECTORY_INFORMATION = 1
FILE_ATTRIBUTE_DIRECTORY = 0x10
FILE_ATTRIBUTE_REPARSE_POINT = 0x400
RELATED_FILE_ID = b"\xff" * 16

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
DENIED_STATUSES = {
    0xC0000022,  # ACCESS_DENIED
    0xC000006D,  # LOGON_FAILURE
    0xC000006A,  # WRONG_PASSWORD
    0xC0000072,  # ACCOUNT_DISABLED
    0xC0000071,  # PASSWORD_EXPIRED
    0xC000006E,  # ACCOUNT_RESTRICTION
    0xC00000CA,  # NETWORK_ACCESS_DENIED
    0xC0000043,  # SHARING_VIOLATION
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
        name = bytes(buffer[offset + 64 : offset + 64 + name_length]).decode(
            "utf-16-le", "surrogatepass"
        )
        if name not in (".", "..") and not attributes & FILE_ATTRIBUTE_REPARSE_POINT:
            is_dir = bool(attributes & FILE_ATTRIBUTE_DIRECTORY)
            mtime_us = (write_time - FILETIME_UNIX_EPOCH) // 10
            entries.append(Entry(name.translate(FROM_SFM), is_dir, 0 if is_dir else size, mtime_us))
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


class _Listing:
    """A folder's compound request in flight."""

    __slots__ = ("requests",)

    def __init__(self, requests: list) -> None:
        self.requests = requests


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
        self._session: Session | None = None
        self._trees: dict[str, TreeConnect] = {}
        self._failure: SourceError | None = None
        self._expired = False
        self._armed = False  # a bounded scope is open (nested scopes share its deadline)
        self._watchdog = _Watchdog(self._abort)
        # Read-ahead for depth-first walks: requests in flight, answers not yet asked for,
        # and a stack of folders the walk is expected to ask for next (top = last).
        self._inflight: OrderedDict[tuple[str, str], _Listing] = OrderedDict()
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
        with self._bounded("connect"):
            try:
                conn.connect(timeout=int(self.timeout_s) + 1)  # the watchdog comes first
            except ValueError as e:  # smbprotocol's wrapper around the socket error
                reason = "refused" if "refused" in str(e).lower() else "no connection"
                raise HostUnreachable(f"{self.host.host}: {reason}") from None
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
                raise AccessDenied(f"{self.host.host}: logon failure for {who}") from None
            except SMBResponseException as e:
                if e.status in DENIED_STATUSES:
                    raise AccessDenied(f"{self.host.host}: logon failure for {who}") from None
                raise
            self._session = session
            # Credits let several folder queries (each up to 16 + 16 + 2) be in flight at once.
            conn.echo(
                sid=session.session_id, timeout=max(1, int(self.timeout_s)), credit_request=512
            )

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
        if self._expired or "timeout" in str(error).lower():  # ours, or smbprotocol's own
            failure: SourceError = SourceTimeout(
                f"{self.host.host}: no answer within {self.timeout_s:g} s ({what})"
            )
        elif isinstance(error, SourceError):
            failure = error
        elif isinstance(error, SMBResponseException):
            return status_error(error.status, f"{self.host.host}: {what}")
        elif isinstance(error, OSError | ConnectionError | EOFError) or "closed" in str(error):
            failure = HostUnreachable(f"{self.host.host}: connection lost ({what})")
        else:
            failure = SourceError(f"{self.host.host}: {what}: {self._scrub(error)}")
        if isinstance(failure, HostUnreachable | SourceTimeout) or self._session is None:
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
        if self._conn is not None and self._conn.transport is not None:
            try:
                self._conn.disconnect(close=False)
            except Exception:  # the socket is already gone; nothing left to release
                pass

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise type(self._failure)(str(self._failure))

    def _receive(self, request) -> object:
        """The final response to a request; raises SMBResponseException on an error status."""
        return self._conn.receive(request, timeout=self.timeout_s + 1)

    def _send(self, messages: list, tree_id: int) -> list:
        conn = self._conn
        need = sum(conn._calculate_credit_charge(m) for m in messages)
        while conn.sequence_window["high"] - conn.sequence_window["low"] < need and self._inflight:
            self._settle_oldest()  # wait for credits to come back with earlier answers
        self.requests_sent += 1
        return conn.send_compound(messages, self._session.session_id, tree_id, related=True)

    def _tree(self, share: str) -> int:
        tree = self._trees.get(share)
        if tree is None:
            tree = TreeConnect(self._session, rf"\\{self.host.hostname}\{share}")
            with self._bounded(f"share {share!r}"):
                tree.connect(require_secure_negotiate=False)
            self._trees[share] = tree
        return tree.tree_connect_id

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
        if result is None:
            with self._bounded(f"list {share}/{path}"):
                if key not in self._inflight:
                    self._issue(key)
                self._top_up()
                result = self._settle(key)
        if isinstance(result, SourceError):
            raise result
        self._expect([(share, f"{path}/{e.name}" if path else e.name) for e in result if e.is_dir])
        return result

    def read(self, share: str, path: str, offset: int, length: int) -> bytes:
        self._check_usable()
        chunks: list[bytes] = []
        with self._bounded(f"read {share}/{path}"):
            tree_id = self._tree(share)
            max_read = self._conn.max_read_size
            while length > 0:
                piece = self._read_once(tree_id, path, offset, min(length, max_read))
                chunks.append(piece)
                if len(piece) < min(length, max_read):
                    break  # end of file
                offset += len(piece)
                length -= len(piece)
        return b"".join(chunks)

    def close(self) -> None:
        self._watchdog.stop()
        if self._failure is None and self._conn is not None:
            self._watchdog = _Watchdog(self._abort)
            try:
                with self._bounded("close"):
                    self._conn.disconnect(close=True, timeout=max(1, int(self.timeout_s)))
            except SourceError:
                pass
            self._watchdog.stop()
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
        create = _create_request(smb_path(path), directory=True)
        query = _query_request(self.list_buffer)
        close = SMB2CloseRequest()
        close["file_id"] = RELATED_FILE_ID
        self._inflight[key] = _Listing(self._send([create, query, close], tree_id))

    def _expect(self, folders: list[tuple[str, str]]) -> None:
        """Folders a depth-first walk will ask for next; keep some of them in flight."""
        self._ahead.extend(reversed(folders))
        if len(self._ahead) > 4096:
            del self._ahead[: len(self._ahead) - 4096]
        if self._ahead:
            with self._bounded("list ahead"):
                self._top_up()

    def _top_up(self) -> None:
        while len(self._inflight) < self._window and self._ahead:
            key = self._ahead.pop()
            if key in self._inflight or key in self._ready:
                continue
            self._issue(key)

    def _settle_oldest(self) -> None:
        key = next(iter(self._inflight))
        self._ready[key] = self._settle(key)
        while len(self._ready) > 4 * self._window + 64:
            self._ready.popitem(last=False)  # answers the walk never asked for

    def _settle(self, key: tuple[str, str]) -> list[Entry] | SourceError:
        """Collect one folder's answers: its entries, or a per-folder error (not found...)."""
        listing = self._inflight.pop(key)
        create, query, close = listing.requests
        entries: list[Entry] = []
        error: SourceError | None = None
        used = 0
        for request in (create, query, close):
            try:
                response = self._receive(request)
            except SMBResponseException as e:
                if e.status == NtStatus.STATUS_NO_MORE_FILES:
                    continue
                error = error or status_error(e.status, f"{self.host.host}: list {key[0]}/{key[1]}")
                continue
            if request is query:
                used = _append_query_entries(response["data"].get_value(), entries)
        if error is not None:
            return error
        if self.list_buffer - used < MAX_DIR_ENTRY:
            return self._list_large(key)  # the answer may be cut short: read on with a handle
        entries.sort()
        return entries

    def _list_large(self, key: tuple[str, str]) -> list[Entry]:
        share, path = key
        tree_id = self._tree(share)
        create = _create_request(smb_path(path), directory=True)
        create_req = self._send([create], tree_id)[0]
        try:
            response = self._receive(create_req)
        except SMBResponseException as e:
            raise status_error(e.status, f"{self.host.host}: list {share}/{path}") from None
        file_id = response["data"].get_value()[64:80]
        entries: list[Entry] = []
        try:
            while True:
                query = _query_request(self.list_buffer, file_id)
                request = self._send([query], tree_id)[0]
                try:
                    response = self._receive(request)
                except SMBResponseException as e:
                    if e.status == NtStatus.STATUS_NO_MORE_FILES:
                        break
                    raise status_error(e.status, f"{self.host.host}: list {share}/{path}") from None
                _append_query_entries(response["data"].get_value(), entries)
        finally:
            close = SMB2CloseRequest()
            close["file_id"] = file_id
            try:
                self._receive(self._send([close], tree_id)[0])
            except SMBResponseException:
                pass
        entries.sort()
        return entries

    # -- reads ---------------------------------------------------------------------------

    def _read_once(self, tree_id: int, path: str, offset: int, length: int) -> bytes:
        create = _create_request(smb_path(path), directory=False)
        read = SMB2ReadRequest()
        read["length"] = length
        read["offset"] = offset
        read["file_id"] = RELATED_FILE_ID
        close = SMB2CloseRequest()
        close["file_id"] = RELATED_FILE_ID
        requests = self._send([create, read, close], tree_id)
        data = b""
        error: SourceError | None = None
        for request in requests:
            try:
                response = self._receive(request)
            except SMBResponseException as e:
                if e.status != NtStatus.STATUS_END_OF_FILE:
                    error = error or status_error(e.status, f"{self.host.host}: read {path}")
                continue
            if request is requests[1]:
                body = response["data"].get_value()
                start = body[2] - 64
                data = body[start : start + struct.unpack_from("<I", body, 4)[0]]
        if error is not None:
            raise error
        return data

    # -- pipes (share enumeration) ---------------------------------------------------------

    def open_pipe(self, name: str) -> tuple[int, bytes]:
        """Open a named pipe on IPC$ for DCE/RPC; returns (tree id, file id)."""
        tree_id = self._tree("IPC$")
        create = SMB2CreateRequest()
        create["impersonation_level"] = IMPERSONATION
        create["desired_access"] = FILE_READ_DATA | FILE_WRITE_DATA | SYNCHRONIZE
        create["file_attributes"] = 0
        create["share_access"] = SHARE_ALL
        create["create_disposition"] = FILE_OPEN
        create["create_options"] = 0
        create["buffer_path"] = name.encode("utf-16-le")
        response = self._receive(self._send([create], tree_id)[0])
        return tree_id, response["data"].get_value()[64:80]

    def pipe_write(self, tree_id: int, file_id: bytes, data: bytes) -> None:
        write = SMB2WriteRequest()
        write["length"] = len(data)
        write["offset"] = 0
        write["file_id"] = file_id
        write["buffer"] = data
        self._receive(self._send([write], tree_id)[0])

    def pipe_read(self, tree_id: int, file_id: bytes, length: int = 65536) -> bytes:
        read = SMB2ReadRequest()
        read["length"] = length
        read["offset"] = 0
        read["file_id"] = file_id
        body = self._receive(self._send([read], tree_id)[0])["data"].get_value()
        start = body[2] - 64
        return body[start : start + struct.unpack_from("<I", body, 4)[0]]

    def pipe_close(self, tree_id: int, file_id: bytes) -> None:
        close = SMB2CloseRequest()
        close["file_id"] = file_id
        self._receive(self._send([close], tree_id)[0])


class _Bounded:
    """Context: arm the watchdog, and translate whatever escapes into a SourceError."""

    def __init__(self, source: SMBSource, what: str) -> None:
        self._source, self._what = source, what
        self._outer = False

    def __enter__(self) -> None:
        source = self._source
        source._check_usable()
        self._outer = not source._armed
        if self._outer:
            source._armed = True
            source._watchdog.arm(source.timeout_s)

    def __exit__(self, kind: type | None, error: BaseException | None, tb: object) -> bool:
        source = self._source
        if self._outer:
            source._watchdog.disarm()
            source._armed = False
        if error is None or not isinstance(error, Exception):
            return False
        raise source._fail(error, self._what) from None


def _create_request(name: str, directory: bool) -> SMB2CreateRequest:
    create = SMB2CreateRequest()
    create["impersonation_level"] = IMPERSONATION
    create["desired_access"] = FILE_READ_DATA | FILE_READ_ATTRIBUTES | SYNCHRONIZE
    create["file_attributes"] = 0
    create["share_access"] = SHARE_ALL
    create["create_disposition"] = FILE_OPEN
    create["create_options"] = FILE_DIRECTORY_FILE if directory else FILE_NON_DIRECTORY_FILE
    create["buffer_path"] = name.encode("utf-16-le") if name else b"\x00\x00"
    return create


def _query_request(
    buffer_length: int, file_id: bytes = RELATED_FILE_ID
) -> SMB2QueryDirectoryRequest:
    query = SMB2QueryDirectoryRequest()
    query["file_information_class"] = FILE_DIRECTORY_INFORMATION
    query["file_id"] = file_id
    query["output_buffer_length"] = buffer_length
    query["buffer"] = "*".encode("utf-16-le")
    return query


def _append_query_entries(body: bytes, entries: list[Entry]) -> int:
    """Parse one QUERY_DIRECTORY answer; returns the bytes of its buffer in use."""
    offset, length = struct.unpack_from("<HI", body, 2)
    if length:
        parse_directory(memoryview(body)[offset - 64 : offset - 64 + length], entries)
    return length


def status_error(status: int, what: str) -> SourceError:
    """The source error for an NTSTATUS answer to one request."""
    if status in NOT_FOUND_STATUSES:
        return NotFound(f"{what}: not found")
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
