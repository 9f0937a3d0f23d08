"""Names and directory entries as SMB carries them (MS-SMB2 2.2.13, MS-FSCC 2.4.10).

Characters Windows forbids (`"*:<>?\\|`, controls) arrive as U+F001..U+F027 where the server
maps them as Services for Mac does (Samba's vfs_catia, vfs_fruit); they are shown as the
originals and mapped back in requests. Without that mapping Samba shows readable 8.3 names.
"""

from __future__ import annotations

import struct

from sharecrawl.crawl_io.sources import Entry

FILE_ATTRIBUTE_DIRECTORY = 0x10
FILE_ATTRIBUTE_REPARSE_POINT = 0x400
FILETIME_UNIX_EPOCH = 116_444_736_000_000_000  # 1970-01-01 in 100 ns ticks since 1601
# NextEntryOffset, LastWriteTime, EndOfFile, FileAttributes, FileNameLength
DIR_ENTRY = struct.Struct("<I20xQ8xq8xII")
# The largest entry: 64-byte header, a 255-unit UTF-16 name, 8-byte alignment. A server stops
# filling an answer when the next entry does not fit, so an answer with at least this much room
# left holds the whole folder and needs no second QUERY_DIRECTORY.
MAX_DIR_ENTRY = 64 + 2 * 255 + 8

# Services for Mac mapping of the characters Windows forbids in names (as vfs_fruit/catia).
_SFM_CHARS = [chr(c) for c in range(1, 32)] + list('"*:<>?\\|')
FROM_SFM = {0xF001 + i: ch for i, ch in enumerate(_SFM_CHARS)}
TO_SFM = {ord(ch): chr(0xF001 + i) for i, ch in enumerate(_SFM_CHARS)}


def smb_path(path: str) -> str:
    """Share-relative '/' path -> SMB path, forbidden characters mapped to SFM code points."""
    return "\\".join(part.translate(TO_SFM) for part in path.split("/")) if path else ""


def smb_name(path: str) -> bytes:
    """A share-relative path as a CREATE request names it (UTF-16, mapped characters)."""
    return smb_path(path).encode("utf-16-le", "surrogatepass")


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


def append_query_entries(body: bytes, entries: list[Entry]) -> int:
    """Parse one QUERY_DIRECTORY answer's body (after the 64-byte header, which its offset
    counts); returns the bytes of its buffer in use."""
    offset, length = struct.unpack_from("<HI", body, 2)
    if length:
        parse_directory(memoryview(body)[offset - 64 : offset - 64 + length], entries)
    return length
