"""The file:// source: a local folder acting as a host whose shares are its subfolders, behaving
like SMB. Symbolic links are not followed (a share cannot loop); a name's bytes that are not
UTF-8 are shown as lone surrogates (surrogateescape), which crawl_io.checked marks for storing
and `host_bytes` turns back into the bytes."""

from __future__ import annotations

import errno
import os
import stat
import sys

from sharecrawl.crawl_io.checked import safe_name, stored_path
from sharecrawl.crawl_io.sources import (
    AccessDenied,
    Entry,
    HostUnreachable,
    HostURL,
    NotFound,
    SourceError,
)


def _source_error(e: OSError, what: str) -> SourceError:
    if isinstance(e, FileNotFoundError | NotADirectoryError):
        return NotFound(f"{what}: not found")
    if isinstance(e, PermissionError):
        return AccessDenied(f"{what}: access denied")
    return SourceError(f"{what}: {os.strerror(e.errno) if e.errno else e}")


def host_bytes(name: str) -> bytes:
    """The bytes of a name as the file source shows it (`shown_name`'s inverse); NotFound when
    no file name has it (a lone surrogate no byte stands for)."""
    try:
        return name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise NotFound(f"{safe_name(name)}: no such name") from None


def _where(share: str, path: str) -> str:
    """share/path for a message, as stored (a message is stored too)."""
    return stored_path(f"{share}/{path}")


# Python's own file name decoding is shown_name's (UTF-8, surrogateescape) under every UTF-8
# locale and in the C locale (PEP 538, 540): scandir by str then decodes in C, once a name.
_FS_NAMES_SHOWN = (sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()) == (
    "utf-8",
    "surrogateescape",
)


def shown_name(raw: bytes) -> str:
    """A file name's bytes as the file source shows them, whatever the locale."""
    return raw.decode("utf-8", "surrogateescape")


class FileSource:
    def __init__(self, host: HostURL) -> None:
        self.host = host
        self._root = os.fsencode(host.hostname)
        if not os.path.isdir(self._root):
            raise HostUnreachable(f"{host.host}: folder {host.hostname} is not there")

    def _fs_path(self, share: str, path: str) -> bytes:
        base = os.path.join(self._root, host_bytes(share))
        return os.path.join(base, host_bytes(path)) if path else base

    def shares(self) -> list[str]:
        try:
            names = [e.name for e in os.scandir(self._root) if e.is_dir(follow_symlinks=False)]
        except PermissionError:
            raise AccessDenied(f"{self.host.host}: {self.host.hostname}: access denied") from None
        except OSError as e:
            raise HostUnreachable(f"{self.host.host}: {os.strerror(e.errno or 0)}") from None
        return sorted(shown_name(n) for n in names if not n.startswith(b"."))

    def listdir(self, share: str, path: str) -> list[Entry]:
        folder: bytes | str = self._fs_path(share, path)
        entries: list[Entry] = []
        append, is_dir_mode, is_link_mode = entries.append, stat.S_ISDIR, stat.S_ISLNK
        new = tuple.__new__  # an Entry without its Python-level __new__: the same tuple
        if _FS_NAMES_SHOWN:
            folder = os.fsdecode(folder)  # names then come decoded as shown_name decodes them
        raw_names = isinstance(folder, bytes)
        try:
            # The loop runs once per entry of the LAN: keep it to one stat and plain calls.
            with os.scandir(folder) as it:
                for item in it:
                    st = item.stat(follow_symlinks=False)
                    mode = st.st_mode
                    if is_link_mode(mode):
                        continue
                    name = shown_name(item.name) if raw_names else item.name
                    if is_dir_mode(mode):
                        append(new(Entry, (name, True, 0, st.st_mtime_ns // 1000)))
                    else:
                        append(new(Entry, (name, False, st.st_size, st.st_mtime_ns // 1000)))
        except OSError as e:
            if not os.path.isdir(self._root):
                raise HostUnreachable(f"{self.host.host}: folder is gone") from None
            raise _source_error(e, _where(share, path)) from None
        entries.sort()
        return entries

    def read(self, share: str, path: str, offset: int, length: int) -> bytes:
        fs_path = self._fs_path(share, path)
        try:
            fd = os.open(fs_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise NotFound(f"{_where(share, path)}: is a link") from None
            raise _source_error(e, _where(share, path)) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise NotFound(f"{_where(share, path)}: not a regular file")
            return os.pread(fd, length, offset)
        except OSError as e:
            raise _source_error(e, _where(share, path)) from None
        finally:
            os.close(fd)

    def close(self) -> None:
        pass

    def __enter__(self) -> FileSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
