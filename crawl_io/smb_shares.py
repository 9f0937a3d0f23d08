"""A host's disk shares by SRVSVC NetrShareEnum (level 1, MS-SRVS 3.1.4.8), with impacket's
DCE/RPC over a pipe that the caller opened on its own SMB connection (crawl_io.smb)."""

from __future__ import annotations

from collections.abc import Callable

from impacket.dcerpc.v5 import rpcrt, srvs, transport

from sharecrawl.crawl_io.sources import HostURL, SourceError


def disk_shares(
    host: HostURL, write: Callable[[bytes], None], read: Callable[[], bytes]
) -> list[str]:
    """The disk shares' names (hidden ones too), `write` and `read` carrying the pipe's bytes."""

    class PipeTransport(transport.DCERPCTransport):
        def connect(self) -> int:
            return 1

        def disconnect(self) -> int:
            return 1

        def send(self, data: bytes, forceWriteAndx: int = 0, forceRecv: int = 0) -> None:
            write(data)

        def recv(self, forceRecv: int = 0, count: int = 0) -> bytes:
            return read()

    try:
        dce = rpcrt.DCERPC_v5(PipeTransport(host.hostname, host.port or 445))
        dce.bind(srvs.MSRPC_UUID_SRVS)
        answer = srvs.hNetrShareEnum(dce, 1, serverName=f"\\\\{host.hostname}\x00")
    except rpcrt.DCERPCException as e:
        raise SourceError(f"{host.host}: share enumeration failed ({e})") from None
    shares = answer["InfoStruct"]["ShareInfo"]["Level1"]["Buffer"]
    return [
        share["shi1_netname"][:-1]
        for share in shares
        if share["shi1_type"] & 0xFFFF == srvs.STYPE_DISKTREE
        and not share["shi1_type"] & srvs.STYPE_SPECIAL
    ]
