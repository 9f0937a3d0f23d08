"""What SMB answers mean to the crawler: NTSTATUS codes (MS-ERREF 2.3) and failed connects as
the source errors of crawl_io.sources, each with the host status it stands for."""

from __future__ import annotations

import socket

from sharecrawl.crawl_io.sources import (
    AccessDenied,
    AuthFailed,
    ConnectionRefused,
    HostUnreachable,
    NotFound,
    SourceError,
    SourceTimeout,
    UnknownHostName,
)

STATUS_SUCCESS = 0
STATUS_PENDING = 0x00000103
STATUS_BUFFER_OVERFLOW = 0x80000005  # a pipe read with more data to come
STATUS_NO_MORE_FILES = 0x80000006
STATUS_END_OF_FILE = 0xC0000011
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
