"""The file:// source: a local folder acting as a host whose shares are its subfolders, behaving
like SMB. Symbolic links are not followed (a share cannot loop); names that are not UTF-8 are
shown with backslash escapes and still readable."""

from __future__ import annotations

import errno
import os
import stat

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


def _utf8(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


class FileSource:
    def __init__(self, host: HostURL) -> None:
        self.host = host
        self._root = os.fsencode(host.hostname)
        if not os.path.isdir(self._root):
            raise HostUnreachable(f"{host.host}: folder {host.hostname} is not there")
        self._raw: dict[tuple[str, str], bytes] = {}  # shown path -> bytes, where they differ

    def _fs_path(self, share: str, path: str) -> bytes:
        raw = self._raw.get((share, path))
        if raw is not None:
            return raw
        base = os.path.join(self._root, os.fsencode(share))
        return os.path.join(base, os.fsencode(path)) if path else base

    def shares(self) -> list[str]:
        try:
            names = [e.name for e in os.scandir(self._root) if e.is_dir(follow_symlinks=False)]
        except PermissionError:
            raise AccessDenied(f"{self.host.host}: {self.host.hostname}: access denied") from None
        except OSError as e:
            raise HostUnreachable(f"{self.host.host}: {os.strerror(e.errno or 0)}") from None
        return sorted(os.fsdecode(n) for n in names if not n.startswith(b"."))

    def listdir(self, share: str, path: str) -> list[Entry]:
        folder = self._fs_path(share, path)
        mapped = (share, path) in self._raw  # children of a mapped folder need mapping too
        entries: list[Entry] = []
        append, is_dir_mode, is_link_mode = entries.append, stat.S_ISDIR, stat.S_ISLNK
        try:
            # The loop runs once per entry of the LAN: keep it to one stat and plain calls.
            with os.scandir(folder) as it:
                for item in it:
                    st = item.stat(follow_symlinks=False)
                    mode = st.st_mode
                    if is_link_mode(mode):
                        continue
                    raw = item.name
                    if raw.isascii() and not mapped:
                        name = raw.decode("ascii")
                    else:
                        name = None if mapped else _utf8(raw)
                        if name is None:
                            name = self._map_name(share, path, folder, raw)
                    if is_dir_mode(mode):
                        append(Entry(name, True, 0, st.st_mtime_ns // 1000))
                    else:
                        append(Entry(name, False, st.st_size, st.st_mtime_ns // 1000))
        except OSError as e:
            if not os.path.isdir(self._root):
                raise HostUnreachable(f"{self.host.host}: folder is gone") from None
            raise _source_error(e, f"{share}/{path}") from None
        entries.sort()
        return entries

    def _map_name(self, share: str, path: str, folder: bytes, raw_name: bytes) -> str:
        """A name shown differently from its bytes: remember the bytes for later reads."""
        name = raw_name.decode("utf-8", "backslashreplace")
        child = f"{path}/{name}" if path else name
        self._raw[(share, child)] = os.path.join(folder, raw_name)
        return name

    def read(self, share: str, path: str, offset: int, length: int) -> bytes:
        fs_path = self._fs_path(share, path)
        try:
            fd = os.open(fs_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise NotFound(f"{share}/{path}: is a link") from None
            raise _source_error(e, f"{share}/{path}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise NotFound(f"{share}/{path}: not a regular file")
            return os.pread(fd, length, offset)
        except OSError as e:
            raise _source_error(e, f"{share}/{path}") from None
        finally:
            os.close(fd)

    def close(self) -> None:
        self._raw.clear()

    def __enter__(self) -> FileSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
