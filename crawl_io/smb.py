"""The smb:// source: listing and reads over one SMB2/3 connection (crawl_io.smb_session).

- Listing: one compound request per folder (CREATE + QUERY_DIRECTORY + CLOSE) with a 1 MiB
  output buffer (a folder that may not fit is read on with its own handle), parsed with
  `struct` (crawl_io.smb_names). `listdir` also guesses the folders a depth-first walk asks for
  next (the subfolders it just returned) and keeps a few of them in flight, so round trips
  overlap.
- Reads: CREATE + READ + CLOSE in one compound; opened for reading only.
- Share enumeration: SRVSVC NetrShareEnum through impacket's DCE/RPC and NDR code, carried over
  this connection's `IPC$` pipe (one connection, one time limit).
"""

from __future__ import annotations

from collections import OrderedDict

from crawl_io import smb_wire
from crawl_io.smb_names import MAX_DIR_ENTRY, append_query_entries, smb_name
from crawl_io.smb_session import (
    FILE_DIRECTORY_FILE,
    FILE_NON_DIRECTORY_FILE,
    FILE_READ_DATA,
    READ_ACCESS,
    SYNCHRONIZE,
    SMBSession,
    status_error,
)
from crawl_io.smb_wire import STATUS_END_OF_FILE, STATUS_NO_MORE_FILES, STATUS_SUCCESS
from crawl_io.sources import Credentials, Entry, HostURL, SourceError

FILE_WRITE_DATA = 0x2  # only for the srvsvc pipe on IPC$, never on a disk share
PIPE_ACCESS = FILE_READ_DATA | FILE_WRITE_DATA | SYNCHRONIZE
LIST_BUFFER = 1024 * 1024  # bytes per QUERY_DIRECTORY answer: ~7000 entries


class SMBSource(SMBSession):
    """Source protocol over one SMB connection. Not thread-safe: one caller at a time."""

    list_buffer = LIST_BUFFER  # bytes per directory answer (tests shrink it)

    def __init__(
        self, host: HostURL, credentials: Credentials, timeout_s: float = 30.0, window: int = 16
    ) -> None:
        self._window = max(1, window)
        # Read-ahead for depth-first walks: requests in flight (their message ids), answers
        # not yet asked for, and a stack of folders the walk is expected to ask for next.
        self._inflight: OrderedDict[tuple[str, str], list[int]] = OrderedDict()
        self._ready: OrderedDict[tuple[str, str], list[Entry] | SourceError] = OrderedDict()
        self._ahead: list[tuple[str, str]] = []
        super().__init__(host, credentials, timeout_s)

    def _retire(self, failure: SourceError) -> None:
        self._inflight.clear()
        self._ready.clear()
        self._ahead.clear()
        super()._retire(failure)

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
            tree_id = self._tree(share)
            while length > 0:
                want = min(length, self._max_read)
                piece = self._read_once(tree_id, path, offset, want)
                chunks.append(piece)
                if len(piece) < want:
                    break  # end of file
                offset += len(piece)
                length -= len(piece)
        return b"".join(chunks)

    # -- listing with read-ahead ---------------------------------------------------------

    def _issue(self, key: tuple[str, str]) -> None:
        share, path = key
        tree_id = self._tree(share)
        name = smb_name(path)
        compound = [
            smb_wire.create(name, READ_ACCESS, FILE_DIRECTORY_FILE),
            smb_wire.query_directory(self._list_buffer()),
            smb_wire.close(),
        ]
        self._inflight[key] = self._send(compound, tree_id)

    def _list_buffer(self) -> int:
        # Without multi-credit requests (SMB 2.0.2) an answer is at most 64 KiB.
        return self.list_buffer if self._wire.multi_credit else min(self.list_buffer, 65536)

    def _expect(self, folders: list[tuple[str, str]]) -> None:
        """Folders a depth-first walk will ask for next; keep some of them in flight."""
        self._ahead.extend(reversed(folders))
        if len(self._ahead) > 4096:
            del self._ahead[: len(self._ahead) - 4096]
        if self._ahead:
            with self._bounded("list ahead"):
                self._top_up()
                self._wire.flush(self._deadline)  # the server works while the caller does

    def _top_up(self) -> None:
        """File the folders whose answers have come in, then fill the window from the guesses.

        Answered folders leave the window even if the walk never asks for them (it skipped a
        subtree), so wrong guesses cannot block the read-ahead."""
        answered = self._wire.answered
        for key in [k for k, ids in self._inflight.items() if answered(ids[-1])]:
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
        create_id, query_id, close_id = self._inflight.pop(key)
        entries: list[Entry] = []
        error: SourceError | None = None
        used = 0
        for message_id in (create_id, query_id, close_id):
            status, data = self._reply(message_id)
            if status == STATUS_SUCCESS:
                if message_id == query_id:
                    used = append_query_entries(data, entries)
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
        tree_id = self._tree(share)
        name = smb_name(path)
        opened = self._request(
            smb_wire.create(name, READ_ACCESS, FILE_DIRECTORY_FILE), tree_id, what
        )
        file_id = smb_wire.file_id_of(opened)
        entries: list[Entry] = []
        error: SourceError | None = None
        while error is None:
            query = smb_wire.query_directory(self._list_buffer(), file_id)
            status, data = self._reply(self._send([query], tree_id)[0])
            if status == STATUS_NO_MORE_FILES:
                break
            if status != STATUS_SUCCESS:
                error = status_error(status, f"{self.host.host}: {what}")
            else:
                append_query_entries(data, entries)
        self._reply(self._send([smb_wire.close(file_id)], tree_id)[0])
        if error is not None:
            raise error
        entries.sort()
        return entries

    # -- reads ---------------------------------------------------------------------------

    def _read_once(self, tree_id: int, path: str, offset: int, length: int) -> bytes:
        name = smb_name(path)
        compound = [
            smb_wire.create(name, READ_ACCESS, FILE_NON_DIRECTORY_FILE),
            smb_wire.read(offset, length),
            smb_wire.close(),
        ]
        ids = self._send(compound, tree_id)
        data = b""
        error: SourceError | None = None
        for message_id in ids:
            status, reply = self._reply(message_id)
            if status == STATUS_SUCCESS:
                if message_id == ids[1]:
                    data = smb_wire.read_data(reply)
            elif status != STATUS_END_OF_FILE and error is None:
                error = status_error(status, f"{self.host.host}: read {path}")
        if error is not None:
            raise error
        return data

    # -- pipes (share enumeration) ---------------------------------------------------------

    def open_pipe(self, name: str) -> tuple[int, bytes]:
        """Open a named pipe on IPC$ for DCE/RPC; returns (tree id, file id)."""
        tree_id = self._tree("IPC$")
        message = smb_wire.create(name.encode("utf-16-le"), PIPE_ACCESS, 0)
        return tree_id, smb_wire.file_id_of(self._request(message, tree_id, f"pipe {name}"))

    def pipe_write(self, tree_id: int, file_id: bytes, data: bytes) -> None:
        self._request(smb_wire.write(data, file_id), tree_id, "pipe write")

    def pipe_read(self, tree_id: int, file_id: bytes, length: int = 65536) -> bytes:
        return smb_wire.read_data(
            self._request(smb_wire.read(0, length, file_id), tree_id, "pipe read")
        )

    def pipe_close(self, tree_id: int, file_id: bytes) -> None:
        self._request(smb_wire.close(file_id), tree_id, "pipe close")


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
