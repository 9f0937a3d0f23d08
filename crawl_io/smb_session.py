"""One SMB2/3 connection with hard time limits: connect, authenticate, send, fail once.

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
- Sessions: guest sessions are unsigned; user sessions are signed (and answers verified) with
  the keys smbprotocol derived; a share or session that demands encryption is encrypted.

`crawl_io.smb.SMBSource` (listing, reads) and `crawl_io.notify.NotifySession` build on
`SMBSession`.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable

from smbprotocol.connection import Connection
from smbprotocol.exceptions import SMBAuthenticationError, SMBResponseException
from smbprotocol.session import Session

from crawl_io import smb_wire
from crawl_io.smb_wire import STATUS_BUFFER_OVERFLOW, STATUS_SUCCESS, Message, Wire
from crawl_io.sources import (
    AccessDenied,
    AuthFailed,
    ConnectionRefused,
    Credentials,
    HostUnreachable,
    HostURL,
    NotFound,
    SourceError,
    SourceTimeout,
    UnknownHostName,
)

# Access masks and options (MS-SMB2 2.2.13): read-only opens.
FILE_READ_DATA = 0x1  # FILE_LIST_DIRECTORY for a folder
FILE_READ_ATTRIBUTES = 0x80
SYNCHRONIZE = 0x100000
READ_ACCESS = FILE_READ_DATA | FILE_READ_ATTRIBUTES | SYNCHRONIZE
FILE_DIRECTORY_FILE = 0x1
FILE_NON_DIRECTORY_FILE = 0x40
SHAREFLAG_ENCRYPT_DATA = 0x8000
MAX_READ = 1024 * 1024  # bytes per READ request at most (16 credits), or the server's limit

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


class SMBSession:
    """One host's authenticated connection (see the module's notes). Not thread-safe: one
    caller at a time."""

    def __init__(self, host: HostURL, credentials: Credentials, timeout_s: float = 30.0) -> None:
        self.host = host
        self.timeout_s = timeout_s
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

    def close(self) -> None:
        if self._failure is None and self._wire is not None:
            try:
                with self._bounded("close"):
                    self._reply(self._send([smb_wire.logoff()], 0)[0])
            except SourceError:
                pass
        self._retire(SourceError(f"{self.host.host}: source is closed"))
        self._trees.clear()

    def __enter__(self) -> SMBSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- listing with read-ahead ---------------------------------------------------------


class _Bounded:
    """Context: start the call's deadline, and translate whatever escapes into a SourceError."""

    def __init__(self, source: SMBSession, what: str) -> None:
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
