"""What a machine's shares say of themselves, to tell machines apart where their names and
ServerGuids agree (docs/DESIGN.md, Sources: one machine, one host): for each disk share, its
volume's serial number (MS-FSCC 2.5.9 FileFsVolumeInformation; its creation time is left out,
as Samba gives the root folder's changing times there) and its root folder's file ID (MS-FSCC
2.4.20 FileInternalInformation; Samba's is the inode), asked with one QUERY_INFO each
(MS-SMB2 2.2.37) on a read-only open of the root. Taken on the crawl's own connection
(crawl_io.smb's SMBSource: its credentials, deadlines, tree connects and error mapping), as
the share list is. Nothing is written."""

from __future__ import annotations

import struct

from smbprotocol.file_info import (
    FileFsVolumeInformation,
    FileInternalInformation,
    InfoType,
)
from smbprotocol.open import Open, SMB2QueryInfoRequest, SMB2QueryInfoResponse

from sharecrawl.crawl_io.checked import safe_name
from sharecrawl.crawl_io.smb import FILE_DIRECTORY_FILE, SMBSource
from sharecrawl.crawl_io.sources import Credentials, HostURL, SourceError

MAX_SHARES = 8  # marks of a few shares tell machines apart; a host may have hundreds
MARKS_TIMEOUT_S = 10.0
MARK_ACCESS = 0x80 | 0x100000  # FILE_READ_ATTRIBUTES, SYNCHRONIZE: all two queries need


def _query(source: SMBSource, root: Open, info_type: int, info_class: type, length: int) -> bytes:
    request = SMB2QueryInfoRequest()
    request["info_type"] = info_type
    request["file_info_class"] = info_class.INFO_CLASS
    request["file_id"] = root.file_id
    request["output_buffer_length"] = length
    body = source._request(request, root.tree_connect, f"query {info_class.__name__}", length)
    answer = SMB2QueryInfoResponse()
    answer.unpack(body)
    return answer["buffer"].get_value()


def root_mark(source: SMBSource, share: str) -> str:
    """'serial:root file ID' of one share, in hex; a refusal raises its SourceError."""
    with source._bounded(f"marks of {share}"):
        root = source._open(source._tree(share), "", FILE_DIRECTORY_FILE, MARK_ACCESS)
        try:
            volume = _query(
                source, root, InfoType.SMB2_0_INFO_FILESYSTEM, FileFsVolumeInformation, 18 + 64
            )
            inode = _query(source, root, InfoType.SMB2_0_INFO_FILE, FileInternalInformation, 8)
        finally:
            source._close(root)
        if len(volume) < 12 or len(inode) < 8:  # a per-share answer: the connection is fine
            raise SourceError(f"{source.host.host}: share {share!r}: short QUERY_INFO answer")
    serial = struct.unpack_from("<I", volume, 8)[0]  # after VolumeCreationTime
    return f"{serial:08x}:{struct.unpack_from('<Q', inode)[0]:016x}"


def share_marks(
    host: HostURL, credentials: Credentials, timeout_s: float = MARKS_TIMEOUT_S
) -> list[str]:
    """'share:serial:root file ID' for each disk share that lets us in (sorted);
    [] when the host lets us into none."""
    marks = []
    try:
        with SMBSource(host, credentials, timeout_s) as source:
            for share in source.shares()[:MAX_SHARES]:
                try:
                    mark = root_mark(source, share)
                except SourceError:
                    if not source.usable:
                        break  # the host went away: what it said so far
                    continue  # a share closed to us says nothing
                marks.append(f"{safe_name(share)}:{mark}")  # stored: as share names are
    except SourceError:  # the host would not let us in, or went away
        pass
    return sorted(marks)


def same_machine(a: list[str] | None, b: list[str] | None) -> bool | None:
    """Do two hosts' share marks say one machine? None when either has none (they cannot
    tell); else whether they have a share in common and agree on every one they share."""
    if not a or not b:
        return None
    mine, theirs = ({m.rsplit(":", 2)[0]: m for m in marks} for marks in (a, b))
    common = mine.keys() & theirs.keys()
    return bool(common) and all(mine[s] == theirs[s] for s in common)
