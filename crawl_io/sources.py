"""Hosts as URLs (and ranges, credentials), and the one face every source shows: shares,
listdir (sorted `Entry` rows), read; its errors are `SourceError` subclasses (docs/DESIGN.md,
Sources)."""

from __future__ import annotations

import ipaddress
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple, Protocol
from urllib.parse import quote, unquote, urlsplit

from sharecrawl.crawl_io.config_error import ConfigError, short_repr

# `hosts.status`: hosts switched off are normal on a LAN; one that answers but refuses our
# credentials or the share (configuration) is up, its files stay searchable, and it is loud.
HOST_OK = "ok"
UNREACHABLE_STATUSES = ("refused", "timed_out", "unknown_name", "offline")
CONFIG_STATUSES = ("auth_failed", "access_denied", "share_not_found")


class SourceError(Exception):
    """A host could not be listed or read: `reason` a stable code for tables, `host_status`
    the host's `hosts.status` when this error ends its round."""

    reason, host_status = "error", "error"


class HostUnreachable(SourceError):
    reason, host_status = "unreachable", "offline"


class ConnectionRefused(HostUnreachable):
    host_status = "refused"


class UnknownHostName(HostUnreachable):
    host_status = "unknown_name"


class SourceTimeout(SourceError):
    reason, host_status = "timeout", "timed_out"


class AccessDenied(SourceError):
    reason, host_status = "access denied", "access_denied"


class AuthFailed(AccessDenied):
    """The host refused the session itself (wrong user or password): nothing is readable."""

    reason, host_status = "auth failed", "auth_failed"


class NotFound(SourceError):
    reason = "not found"


class Entry(NamedTuple):
    name: str
    is_dir: bool
    size: int
    mtime_us: int  # microseconds since the epoch, UTC


@dataclass(frozen=True)
class HostURL:
    scheme: str  # 'smb' or 'file'
    host: str  # key in tables: netloc sans user ('nas', '[::1]:1445'); a file host's folder name
    hostname: str  # network name (smb) or absolute folder (file)
    port: int | None
    user: str | None
    share: str | None  # None: every share of the host
    notify_trusted: bool = False  # `?notify=trusted` (NOTIFY_OPTION)

    @property
    def netloc(self) -> str:
        """The host as a URL names it: IPv6 in brackets (a zone's '%' as %25, RFC 6874)."""
        name = f"[{self.hostname.replace('%', '%25')}]" if ":" in self.hostname else self.hostname
        return f"{name}:{self.port}" if self.port else name

    @property
    def url(self) -> str:
        """The canonical URL without share (`hosts.url`; never a password)."""
        if self.scheme == "file":
            return "file://" + _FILE_ESCAPES.sub(lambda m: quote(m[0], safe=""), self.hostname)
        user = f"{self.user}@" if self.user else ""
        return f"smb://{user}{self.netloc}"

    @property
    def line_url(self) -> str:
        """The URL as the hosts file named it, its share kept (never a password)."""
        if self.scheme == "smb" and self.share:
            return f"{self.url}/{quote(self.share, safe='')}"
        return self.url


# What a file URL escapes to read back as the same folder (lines are stripped, hence the end).
_FILE_ESCAPES = re.compile(r"%(?=[0-9A-Fa-f]{2})|[?#\x00-\x1f\x7f]|\s+$")
# A DNS label (RFC 1035 §2.3.1, with the '_' of Windows LANs that RFC 2181 §11 allows).
_DNS_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?")


def is_ip_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def check_hostname(name: str) -> str | None:
    """None when `name` is an IP address or a DNS name (IDN: its IDNA form, RFC 3490, as the
    socket layer encodes it; lengths as RFC 1035 §2.3.4), else why it is not one."""
    if is_ip_address(name):
        return None
    ascii_name = name
    if not name.isascii():
        try:
            ascii_name = name.encode("idna").decode("ascii")
        except UnicodeError:
            return "is not a valid international (IDNA) host name"
    dotless = ascii_name[:-1] if ascii_name.endswith(".") else ascii_name
    if len(dotless) > 253:
        return "is longer than 253 characters"
    for label in dotless.split("."):
        if not label:
            return "has an empty label (two dots in a row)"
        if len(label) > 63:
            return "has a label longer than 63 characters"
        if not _DNS_LABEL.fullmatch(label):
            return "holds characters a DNS name cannot (letters, digits, '-' and '_' only)"
    return None


# The one option a host URL takes (`smb://nas/music?notify=trusted`): Samba reports disk-side
# changes only in the watched folder itself, and no SMB2 answer says reliably which server
# this is, so a silent watch means "unchanged" only where the operator says so.
NOTIFY_OPTION = "notify"
NOTIFY_VALUES = {"hints": False, "trusted": True}  # hints: the default


def _bad(text: str, why: str) -> ConfigError:
    return ConfigError(f"malformed host URL {short_repr(text)}: {why}")


def _notify_trusted(text: str, query: str) -> bool:
    """The host URL's `?notify=...` option; ConfigError for anything else in its query."""
    trusted = False
    for item in query.split("&") if query else ():
        key, sep, value = item.partition("=")
        if key != NOTIFY_OPTION or not sep:
            raise _bad(
                text,
                f"unknown option {short_repr(item)} "
                f"(the one option is {NOTIFY_OPTION}={'|'.join(NOTIFY_VALUES)})",
            )
        if value not in NOTIFY_VALUES:
            raise _bad(
                text, f"{NOTIFY_OPTION}= is {' or '.join(NOTIFY_VALUES)}, not {short_repr(value)}"
            )
        trusted = NOTIFY_VALUES[value]
    return trusted


def parse_host_url(text: str) -> HostURL:
    """The one reading of a host URL; ConfigError for any URL that cannot be crawled.
    `parse_host_url(h.line_url)` is `h` again (but for `?notify=`, kept apart in tables)."""
    text = text.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as e:
        raise _bad(text, f"{e}") from None
    trusted = _notify_trusted(text, parts.query)
    if "\0" in unquote(parts.path):
        raise _bad(text, "the path holds a NUL")
    if parts.scheme == "file":
        return _file_host(text, parts.netloc, parts.path, trusted)
    if parts.scheme != "smb":
        raise _bad(text, "scheme must be smb:// or file://")
    if parts.password is not None:
        raise ConfigError(
            f"host URL for {short_repr(parts.hostname or '')} carries a password: use "
            "SHARECRAWL_SMB_PASSWORD or a credentials file instead"
        )
    hostname = parts.hostname
    if not hostname:
        raise _bad(text, "no host name")
    if parts.netloc.rpartition("@")[2].startswith("["):  # RFC 3986 §3.2.2: IPv6 only
        hostname = unquote(hostname)  # the zone's '%' is written %25 (RFC 6874)
        if ":" not in hostname:
            raise _bad(text, "brackets hold an IPv6 address")
    why = check_hostname(hostname)
    if why:
        raise _bad(text, f"the host name {why}")
    if port == 0:
        raise _bad(text, "port 0 (ports are 1-65535)")
    segments = [s for s in unquote(parts.path).split("/") if s]
    if len(segments) > 1:
        raise _bad(text, "name at most one share")
    share = segments[0] if segments else None
    key = _key(text, HostURL("smb", "", hostname, None if port == 445 else port, None, None).netloc)
    return HostURL("smb", key, hostname, port, parts.username or None, share, trusted)


def _file_host(text: str, netloc: str, path: str, trusted: bool) -> HostURL:
    if netloc not in ("", "localhost"):
        raise _bad(text, "file URLs are file:///abs/dir")
    # '//x' is '/x' here: POSIX lets normpath keep two leading slashes
    folder = "/" + os.path.normpath(unquote(path)).lstrip("/")
    if not path.startswith("/") or folder == "/":
        raise _bad(text, "needs an absolute folder, not the root")
    return HostURL("file", _key(text, os.path.basename(folder)), folder, None, None, None, trusted)


def _key(text: str, key: str) -> str:
    # the key names the host's files (crawl_io.crawldb.host_parts: quoted, '@<group>.parquet' after)
    if len(quote(key, safe="")) > 255 - len("@99999.parquet"):
        raise _bad(text, "the host's name is too long to name its files in the crawl directory")
    return key


@dataclass(frozen=True)
class AddressRange:
    """A hosts-file line naming a range of addresses (`smb://10.20.0.0/16` or
    `smb://10.20.0.1-10.20.3.254`); `host`: its first address, with the line's port and user."""

    line: str  # the line as written (no password can be on it): hosts.discovered_by
    first: ipaddress.IPv4Address | ipaddress.IPv6Address
    last: ipaddress.IPv4Address | ipaddress.IPv6Address
    host: HostURL

    @property
    def size(self) -> int:
        return int(self.last) - int(self.first) + 1

    def addresses(self) -> Iterable[str]:
        kind = type(self.first)
        return (str(kind(n)) for n in range(int(self.first), int(self.last) + 1))

    def at(self, address: str, key: str) -> HostURL:
        """The host found at `address`, under the key its identity gives it."""
        return replace(self.host, hostname=address, host=key)


WIDEST_RANGE = 1 << 16  # addresses a range names at most without --allow-wide-ranges
_SPAN = re.compile(r"(?P<user>[^@/?#]*@)?(?P<a>[0-9.]+)-(?P<b>[0-9.]+)(?P<port>:[0-9]*)?")


def parse_range_url(text: str) -> AddressRange | None:
    """The range a hosts-file line names, None when it names a host; ConfigError when
    malformed. An address followed by exactly `/N` is always a range."""
    text = text.strip()
    rest, _, query = text.partition("?")
    if not rest.startswith("smb://"):
        return None
    netloc, slash, path = rest[len("smb://") :].partition("/")
    query = f"?{query}" if query else ""
    span = _SPAN.fullmatch(netloc)
    if span:
        try:
            first, last = (ipaddress.IPv4Address(span[k]) for k in ("a", "b"))
        except ValueError as e:
            raise _bad(text, f"a range runs between two IPv4 addresses: {e}") from None
        if path or slash or last < first:
            raise _bad(text, "a range is smb://FIRST-LAST[:port], FIRST not after LAST")
        user, port = span["user"] or "", span["port"] or ""
    else:
        if not re.fullmatch(r"[0-9]+", path):
            return None
        host = parse_host_url(f"smb://{netloc}")  # a malformed host: its own message
        if not is_ip_address(host.hostname):
            return None  # a share named by digits on a named host
        try:  # strict: host bits set is a typo, not a host
            net = ipaddress.ip_network(f"{host.hostname}/{path}")
        except ValueError as e:
            raise _bad(text, f"an address and /N name a network: {e}") from None
        first, last = net.network_address, net.broadcast_address
        user = f"{host.user}@" if host.user else ""
        port = f":{host.port}" if host.port else ""
    name = f"[{first}]" if first.version == 6 else str(first)
    return AddressRange(text, first, last, parse_host_url(f"smb://{user}{name}{port}{query}"))


def read_hosts_lines(
    path: str | os.PathLike, allow_wide: bool = False
) -> tuple[list[HostURL], list[AddressRange]]:
    """Hosts and ranges, one URL per line, '#' starts a comment; ConfigError with the line,
    also for a range wider than WIDEST_RANGE unless `allow_wide`."""
    try:
        lines = Path(path).read_text(encoding="utf-8-sig").splitlines()  # Notepad's BOM
    except FileNotFoundError:
        raise ConfigError(f"hosts file {str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"hosts file {str(path)!r} cannot be read: {e}") from None
    hosts: list[HostURL] = []
    ranges: list[AddressRange] = []
    for number, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            found = parse_range_url(line)
            if found is None:
                hosts.append(parse_host_url(line))
            elif found.size > WIDEST_RANGE and not allow_wide:
                raise ConfigError(
                    f"range {line} names {found.size:,} addresses, more than a /16: "
                    "give --allow-wide-ranges to sweep it"
                )
            else:
                ranges.append(found)
        except ConfigError as e:
            raise ConfigError(f"{path}:{number}: {e}") from None
    if not hosts and not ranges:
        raise ConfigError(f"hosts file {str(path)!r} names no host")
    _check_unique(hosts)
    return hosts, ranges


def read_hosts_file(path: str | os.PathLike, allow_wide: bool = False) -> list[HostURL]:
    """The hosts a hosts file lists by name (its ranges checked and left out)."""
    return read_hosts_lines(path, allow_wide)[0]


def _check_unique(hosts: Iterable[HostURL]) -> None:
    seen: dict[str, HostURL] = {}
    for h in hosts:
        other = seen.setdefault(h.host, h)
        if other.hostname != h.hostname or other.scheme != h.scheme:
            raise ConfigError(f"two hosts are named {h.host!r}: {other.url} and {h.url}")
        if other.notify_trusted != h.notify_trusted:  # the option is the host's, not a line's
            raise ConfigError(
                f"host {h.host!r}: {NOTIFY_OPTION}=trusted on some of its lines "
                "and not on others; give it on every line of the host or none"
            )


@dataclass(frozen=True)
class Credentials:
    user: str | None
    password: str | None = None

    def __repr__(self) -> str:  # never show a password, even in a traceback
        return f"Credentials(user={self.user!r}, password={'***' if self.password else None})"


CREDENTIAL_KEYS = ("username", "password", "domain")  # as smbclient's -A reads them
MAX_CREDENTIALS_BYTES = 64 * 1024


def systemd_credential(path: str, environ: Mapping[str, str]) -> bool:
    """Is `path` a credential systemd passed the unit (LoadCredential=)? Where its file system
    has ACLs (newer systemd puts credentials on tmpfs, not ramfs), systemd grants the unit's
    user read by one, which the mode's group bits show (the ACL mask); the folder is the
    unit's alone (systemd.exec(5), Credentials)."""
    folder = environ.get("CREDENTIALS_DIRECTORY")
    return bool(folder) and os.path.dirname(os.path.abspath(path)) == os.path.abspath(folder)


def check_credentials(environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """The `key = value` lines of the owner-only credentials file the environment names (None:
    none), checked; ConfigError in one line that never shows a value."""
    env = os.environ if environ is None else environ
    path = env.get("SHARECRAWL_SMB_CREDENTIALS")
    if path is None:
        return None
    if not path:
        raise ConfigError("SHARECRAWL_SMB_CREDENTIALS is set but empty")
    where = f"credentials file {short_repr(path)} (SHARECRAWL_SMB_CREDENTIALS)"
    fd = -1
    try:  # O_NONBLOCK: a FIFO named by mistake must not hang the crawl
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{where} is not a regular file")
        others = stat.S_IMODE(st.st_mode) & 0o077
        if others and not (others == 0o040 and systemd_credential(path, env)):
            raise ConfigError(f"{where} must be readable only by its owner (chmod 600)")
        data = os.read(fd, MAX_CREDENTIALS_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{where} does not exist") from None
    except OSError as e:
        raise ConfigError(f"{where} cannot be read: {os.strerror(e.errno or 0)}") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > MAX_CREDENTIALS_BYTES or b"\0" in data:
        raise ConfigError(f"{where} is not a credentials file (binary or too large)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{where} is not UTF-8 text") from None
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        key, equals, value = line.partition("=")
        key = key.strip().lower()
        if not equals or key not in CREDENTIAL_KEYS:
            raise ConfigError(
                f"{where}, line {number}: not a 'username = ...', 'password = ...' or "
                "'domain = ...' line"
            )
        if key in values:
            raise ConfigError(f"{where}, line {number}: {key} given twice")
        values[key] = value.strip()
    for key in ("username", "password"):
        if key not in values:
            raise ConfigError(f"{where} has no '{key} = ...' line")
    return values


def credentials_for(host: HostURL, environ: dict[str, str] | None = None) -> Credentials:
    """User and password from SHARECRAWL_SMB_USER/PASSWORD or the credentials file
    (SHARECRAWL_SMB_CREDENTIALS, as smbclient's -A reads it); guest when none is given."""
    env = os.environ if environ is None else environ
    user = host.user or env.get("SHARECRAWL_SMB_USER")
    password = env.get("SHARECRAWL_SMB_PASSWORD")
    values = check_credentials(env)  # checked even when the password comes from elsewhere
    if values is not None and password is None:
        if not host.user:
            user = values["username"]
            if values.get("domain") and "\\" not in user:
                user = f"{values['domain']}\\{user}"
        password = values["password"]
    return Credentials(user, password)


class Source(Protocol):
    """The os-like face of one host. Paths are share-relative, '/'-separated, '' = root."""

    host: HostURL

    def shares(self) -> list[str]: ...

    def listdir(self, share: str, path: str) -> list[Entry]: ...

    def read(self, share: str, path: str, offset: int, length: int) -> bytes: ...

    def close(self) -> None: ...
