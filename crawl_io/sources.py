"""Hosts as URLs, and the one face every source shows: shares, listdir, read.

A source lists a directory as `Entry(name, is_dir, size, mtime_us)` sorted by name, reads byte
ranges, and raises only `SourceError` subclasses. Sources only ever read.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol
from urllib.parse import unquote, urlsplit


class SourceError(Exception):
    """A host could not be listed or read. `reason` is a short, stable code for tables."""

    reason = "error"


class HostUnreachable(SourceError):
    reason = "unreachable"


class SourceTimeout(SourceError):
    reason = "timeout"


class AccessDenied(SourceError):
    reason = "access denied"


class NotFound(SourceError):
    reason = "not found"


class ConfigError(ValueError):
    """A hosts file, URL or setting is malformed; the message says which and where."""


class Entry(NamedTuple):
    name: str
    is_dir: bool
    size: int
    mtime_us: int  # microseconds since the epoch, UTC


@dataclass(frozen=True)
class HostURL:
    scheme: str  # 'smb' or 'file'
    host: str  # the host's key in tables: 'name' or 'name:port'; a file host's folder name
    hostname: str  # network name (smb) or absolute folder (file)
    port: int | None
    user: str | None
    share: str | None  # None: every share of the host

    @property
    def url(self) -> str:
        """The URL without share, as stored in `hosts.url` (never a password)."""
        if self.scheme == "file":
            return f"file://{self.hostname}"
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        return f"smb://{user}{self.hostname}{port}"


def parse_host_url(text: str) -> HostURL:
    text = text.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as e:
        raise ConfigError(f"malformed host URL {text!r}: {e}") from None
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ConfigError(f"malformed host URL {text!r}: file URLs are file:///abs/dir")
        folder = os.path.normpath(unquote(parts.path))
        if not folder.startswith("/") or folder == "/":
            raise ConfigError(f"malformed host URL {text!r}: needs an absolute folder")
        return HostURL("file", os.path.basename(folder), folder, None, None, None)
    if parts.scheme == "smb":
        if parts.password is not None:
            raise ConfigError(
                f"host URL for {parts.hostname!r} carries a password: use "
                "SHARECRAWL_SMB_PASSWORD or a credentials file instead"
            )
        if not parts.hostname:
            raise ConfigError(f"malformed host URL {text!r}: no host name")
        segments = [s for s in unquote(parts.path).split("/") if s]
        if len(segments) > 1:
            raise ConfigError(f"malformed host URL {text!r}: name at most one share")
        key = parts.hostname if port in (None, 445) else f"{parts.hostname}:{port}"
        share = segments[0] if segments else None
        return HostURL("smb", key, parts.hostname, port, parts.username, share)
    raise ConfigError(f"malformed host URL {text!r}: scheme must be smb:// or file://")


def read_hosts_file(path: str | os.PathLike) -> list[HostURL]:
    """Hosts, one URL per line, '#' starts a comment. Raises ConfigError with the line."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ConfigError(f"hosts file {str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"hosts file {str(path)!r} cannot be read: {e}") from None
    hosts: list[HostURL] = []
    for number, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            hosts.append(parse_host_url(line))
        except ConfigError as e:
            raise ConfigError(f"{path}:{number}: {e}") from None
    if not hosts:
        raise ConfigError(f"hosts file {str(path)!r} names no host")
    _check_unique(hosts)
    return hosts


def _check_unique(hosts: Iterable[HostURL]) -> None:
    seen: dict[str, HostURL] = {}
    for h in hosts:
        other = seen.setdefault(h.host, h)
        if other.hostname != h.hostname or other.scheme != h.scheme:
            raise ConfigError(f"two hosts are named {h.host!r}: {other.url} and {h.url}")


@dataclass(frozen=True)
class Credentials:
    user: str | None
    password: str | None = None

    def __repr__(self) -> str:  # never show a password, even in a traceback
        return f"Credentials(user={self.user!r}, password={'***' if self.password else None})"


def credentials_for(host: HostURL, environ: dict[str, str] | None = None) -> Credentials:
    """User and password from SHARECRAWL_SMB_USER/PASSWORD or an owner-only credentials file
    (SHARECRAWL_SMB_CREDENTIALS, lines `username = ...` and `password = ...` as smbclient's -A
    reads them). Guest access when none is given."""
    env = os.environ if environ is None else environ
    user = host.user or env.get("SHARECRAWL_SMB_USER")
    password = env.get("SHARECRAWL_SMB_PASSWORD")
    cred_file = env.get("SHARECRAWL_SMB_CREDENTIALS")
    if cred_file and password is None:
        st = os.stat(cred_file)
        if stat.S_IMODE(st.st_mode) & 0o077:
            raise ConfigError(f"credentials file {cred_file!r} must be readable only by its owner")
        for line in Path(cred_file).read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition("=")
            key, value = key.strip().lower(), value.strip()
            if key == "username" and not host.user:
                user = value
            elif key == "password":
                password = value
    return Credentials(user, password)


class Source(Protocol):
    """The os-like face of one host. Paths are share-relative, '/'-separated, '' = root."""

    host: HostURL

    def shares(self) -> list[str]: ...

    def listdir(self, share: str, path: str) -> list[Entry]: ...

    def read(self, share: str, path: str, offset: int, length: int) -> bytes: ...

    def close(self) -> None: ...


def open_source(host: HostURL, timeout_s: float = 30.0) -> Source:
    """Connect to a host. Raises SourceError when it cannot be reached."""
    if host.scheme == "file":
        from crawl_io.filesource import FileSource

        return FileSource(host)
    from crawl_io.smb import SMBSource  # the SMB stack loads only when a host needs it

    return SMBSource(host, credentials_for(host), timeout_s=timeout_s)
