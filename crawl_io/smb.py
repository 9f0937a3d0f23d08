"""The smb:// source: one SMB2/3 connection per host, through smbprotocol's public API.

Messages are built with send=False and sent as related compounds; only QUERY_DIRECTORY's and
READ's answers are parsed by hand (crawl_io.smb_names). smbprotocol's `smbclient` is avoided: it
caches connections process-wide and waits ~20 minutes on a hung server.
- Listing: CREATE + QUERY_DIRECTORY (1 MiB) + CLOSE per folder; the subfolders just returned
  are what a depth-first walk asks for next, so a few are kept in flight. Reads: CREATE + READ +
  CLOSE. Shares: SRVSVC NetrShareEnum (impacket's NDR) over this connection's IPC$ pipe.
- Credits: one ECHO asks for CREDIT_TARGET; a request waits for answers while the window is short.
- Time limit: one deadline per call; waits smbprotocol makes without a limit (session set-up,
  tree connect) run under a timer that closes the transport. A connection that failed once
  (timeout, reset, bad signature) is retired: later calls raise the same error class at once.
- Guest sessions are unsigned; user sessions signed (Samba refuses unsigned 3.1.1 user sessions).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar

from smbprotocol.connection import Connection, Request
from smbprotocol.exceptions import SMBAuthenticationError, SMBResponseException
from smbprotocol.file_info import FileInformationClass
from smbprotocol.open import Open, SMB2CreateRequest
from smbprotocol.session import Session, SMB2Logoff
from smbprotocol.tree import TreeConnect

from sharecrawl.crawl_io.smb_names import MAX_DIR_ENTRY, append_query_entries, smb_name
from sharecrawl.crawl_io.sources import (
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

T = TypeVar("T")
STATUS_SUCCESS = 0
STATUS_PENDING = 0x00000103
STATUS_BUFFER_OVERFLOW = 0x80000005  # a pipe read with more data to come
STATUS_NO_MORE_FILES = 0x80000006
STATUS_END_OF_FILE = 0xC0000011
# CREATE fields (MS-SMB2 2.2.13): read-only opens, shared with everyone.
IMPERSONATION, SHARE_ALL, FILE_OPEN = 2, 0x7, 1
READ_ACCESS = 0x1 | 0x80 | 0x100000  # FILE_READ_DATA (LIST_DIRECTORY), READ_ATTRIBUTES, SYNCHRONIZE
PIPE_ACCESS = 0x1 | 0x2 | 0x100000  # READ_DATA, WRITE_DATA (the srvsvc pipe alone), SYNCHRONIZE
FILE_DIRECTORY_FILE, FILE_NON_DIRECTORY_FILE = 0x1, 0x40
MAX_READ = 1024 * 1024  # bytes per READ request at most (16 credits), or the server's limit
LIST_BUFFER = 1024 * 1024  # bytes per QUERY_DIRECTORY answer: ~7000 entries
PAYLOAD_PER_CREDIT = 65536
CREDIT_TARGET = 512
# NTSTATUS codes (MS-ERREF 2.3) as source errors, each with the host status it stands for.
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
# The session itself refused (not a share or file): wrong user or password, a barred account.
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


def answered(request: Request) -> bool:
    """Whether the receive thread has filed the final answer (not an interim STATUS_PENDING)."""
    response = request.response
    return response is not None and response["status"].get_value() != STATUS_PENDING


class Create(SMB2CreateRequest):
    """A read-only CREATE (MS-SMB2 2.2.13) packed once per name: smbprotocol packs and measures
    a message at each send, and for a CREATE that cost as much as the rest of a folder's."""

    def __init__(self, path: str = "", options: int = 0, access: int = READ_ACCESS) -> None:
        self.packed_bytes = b""
        super().__init__()
        self["impersonation_level"] = IMPERSONATION
        self["desired_access"] = access
        self["share_access"] = SHARE_ALL
        self["create_disposition"] = FILE_OPEN
        self["create_options"] = options
        self.name(path)

    def name(self, path: str) -> Create:
        self["buffer_path"] = smb_name(path) or b"\x00\x00"  # mapped characters, surrogates
        self.packed_bytes = super().pack()
        return self

    def pack(self) -> bytes:
        return self.packed_bytes

    def __len__(self) -> int:
        return len(self.packed_bytes)


def file_id_of(create_body: bytes) -> bytes:
    return create_body[64:80]  # MS-SMB2 2.2.14: FileId


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
        self._compound: tuple[Create, Any, Any] | None = None  # see _issue
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
        timer = threading.Timer(max(0.0, self._deadline - time.monotonic()), self._abort)
        timer.daemon = True
        timer.start()
        try:
            return call()
        finally:
            timer.cancel()

    def _abort(self) -> None:
        self._expired = True
        with suppress(OSError):  # wakes every waiter: the receive thread sees the socket end
            self._conn.transport.close()

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
            or not self._conn.transport.connected  # e.g. an answer's signature did not verify
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
        window = conn.sequence_window
        while window["high"] - window["low"] < need:
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
        self._expect([(share, f"{path}/{e.name}" if path else e.name) for e in result if e.is_dir])
        return result

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
        """SRVSVC NetrShareEnum (level 1) with impacket's DCE/RPC over this connection's pipe."""
        from impacket.dcerpc.v5 import rpcrt, srvs, transport  # loads only when shares are listed

        tree = self._tree("IPC$")
        pipe = Open(tree, "")
        opened = self._request(Create("srvsvc", 0, PIPE_ACCESS), tree, "pipe srvsvc")
        pipe.file_id = file_id_of(opened)
        request = self._request

        class PipeTransport(transport.DCERPCTransport):
            def connect(self) -> int:
                return 1

            def disconnect(self) -> int:
                return 1

            def send(self, data: bytes, forceWriteAndx: int = 0, forceRecv: int = 0) -> None:
                request(pipe.write(data, send=False)[0], tree, "pipe write", len(data))

            def recv(self, forceRecv: int = 0, count: int = 0) -> bytes:
                message = pipe.read(0, 65536, send=False)[0]
                return read_data(request(message, tree, "pipe read", 65536))

        try:
            dce = rpcrt.DCERPC_v5(PipeTransport(self.host.hostname, self.host.port or 445))
            dce.bind(srvs.MSRPC_UUID_SRVS)
            answer = srvs.hNetrShareEnum(dce, 1, serverName=f"\\\\{self.host.hostname}\x00")
        except rpcrt.DCERPCException as e:
            raise SourceError(f"{self.host.host}: share enumeration failed ({e})") from None
        finally:
            request(pipe.close(send=False)[0], tree, "pipe close")
        shares = answer["InfoStruct"]["ShareInfo"]["Level1"]["Buffer"]
        return [
            share["shi1_netname"][:-1]
            for share in shares
            if share["shi1_type"] & 0xFFFF == srvs.STYPE_DISKTREE
            and not share["shi1_type"] & srvs.STYPE_SPECIAL
        ]

    def _issue(self, key: tuple[str, str]) -> None:
        tree = self._tree(key[0])
        size = self._list_buffer()
        # One set of messages serves every folder (only the name changes): building them costs
        # more than sending them.
        if self._compound is None or self._compound[1]["output_buffer_length"].get_value() != size:
            folder = Open(tree, "")
            create = Create("", FILE_DIRECTORY_FILE)
            self._compound = (create, self._query(folder, size), folder.close(send=False)[0])
        self._compound[0].name(key[1])
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

    def _expect(self, folders: list[tuple[str, str]]) -> None:
        """Folders a depth-first walk will ask for next; keep some of them in flight."""
        self._ahead.extend(reversed(folders))
        if len(self._ahead) > 4096:
            del self._ahead[: len(self._ahead) - 4096]
        if self._ahead:
            with self._bounded("list ahead"):
                self._top_up()

    def _top_up(self) -> None:
        """File the answered folders (asked for or not: wrong guesses must not block the window),
        then fill the window from the guesses."""
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
        folder = Open(tree, "")
        folder.file_id = file_id_of(self._request(Create(path, FILE_DIRECTORY_FILE), tree, what))
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
        self._answer(self._send([folder.close(send=False)[0]], tree)[0])
        if error is not None:
            raise error
        entries.sort()
        return entries

    def _read_once(self, tree: TreeConnect, path: str, offset: int, length: int) -> bytes:
        handle = Open(tree, "")
        compound = [
            Create(path, FILE_NON_DIRECTORY_FILE),
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
