"""Finding hosts: sweep address ranges for an open SMB port (non-blocking connects on one
thread: `concurrency` in flight, `rate` started a second), and ask each host that answers who it
is with an SMB2 NEGOTIATE and an anonymous NTLM NEGOTIATE, whose CHALLENGE names the machine
(MS-NLMP 2.2.2.1, as nmap's smb-os-discovery reads it). Neither logs in nor touches a share.
"""

from __future__ import annotations

import errno
import resource
import selectors
import socket
import struct
import time
import uuid
from collections import deque
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass

from smbprotocol.connection import Connection
from smbprotocol.exceptions import MoreProcessingRequired, SMBException
from smbprotocol.session import SMB2SessionSetupRequest, SMB2SessionSetupResponse

# its import bounds every message's length (MS-SMB2 2.1), the negotiate's answer's first
import sharecrawl.crawl_io.smb_internals  # noqa: F401

SWEEP_CONCURRENCY = 1024  # connects in flight (luigi.cfg discover_concurrency)
SWEEP_RATE = 5000  # connects started a second (luigi.cfg discover_rate; 0: no cap)
PROBE_THREADS = 64  # probes at once: each waits on one host's answers
NOT_SMB = "not SMB"  # a probe's error when the host answered, but not in SMB


def sweep(
    addresses: Iterable[str],
    port: int,
    timeout_s: float,
    concurrency: int = SWEEP_CONCURRENCY,
    rate: float = SWEEP_RATE,
) -> list[str]:
    """The addresses (in the order given) whose `port` accepted a TCP connection."""
    todo = list(addresses)
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    limit = max(1, min(concurrency, len(todo), soft - 64))  # never more than the range names
    answered: set[int] = set()
    inflight: deque[tuple[float, socket.socket, int]] = deque()  # by deadline: one timeout
    sel = selectors.DefaultSelector()
    tokens, last, index = float(limit), time.monotonic(), 0
    try:
        while index < len(todo) or sel.get_map():
            now = time.monotonic()
            if rate:
                tokens = min(float(limit), tokens + (now - last) * rate)
                last = now
            while index < len(todo) and len(sel.get_map()) < limit and (not rate or tokens >= 1):
                tokens -= 1
                address = todo[index]
                sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET)
                sock.setblocking(False)
                code = sock.connect_ex((address, port))
                if code == errno.EINPROGRESS:
                    sel.register(sock, selectors.EVENT_WRITE, index)
                    inflight.append((now + timeout_s, sock, index))
                else:
                    if code == 0:
                        answered.add(index)
                    sock.close()
                index += 1
            while inflight and (inflight[0][1].fileno() < 0 or inflight[0][0] <= now):
                _, sock, _ = inflight.popleft()
                if sock.fileno() >= 0:  # timed out
                    sel.unregister(sock)
                    sock.close()
            if not sel.get_map():
                if index < len(todo) and rate and tokens < 1:
                    time.sleep((1 - tokens) / rate)
                continue
            wait = inflight[0][0] - now if inflight else 0.0
            if index < len(todo) and len(sel.get_map()) < limit:
                wait = min(wait, 1 / rate if rate else 0.0)
            for key, _ in sel.select(max(0.0, wait)):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    answered.add(key.data)
                sel.unregister(sock)
                sock.close()
    finally:
        for key in list(sel.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        sel.close()
    return [todo[i] for i in sorted(answered)]


@dataclass(frozen=True)
class Identity:
    """What a host says about itself before any login; `error` when it would not say."""

    address: str
    server_guid: str | None = None
    dialect: str | None = None  # "3.1.1"
    signing_required: bool | None = None
    netbios_name: str | None = None
    dns_name: str | None = None
    error: str | None = None

    @property
    def not_smb(self) -> bool:
        """Did the host answer with something that is not SMB?"""
        return (self.error or "").startswith(NOT_SMB)

    @property
    def name(self) -> str | None:
        """What people call the machine: its NetBIOS name, else its DNS name."""
        return self.netbios_name or self.dns_name


# NTLM NEGOTIATE (MS-NLMP 2.2.1.1): UNICODE, REQUEST_TARGET, NTLM, ALWAYS_SIGN,
# EXTENDED_SESSIONSECURITY, TARGET_INFO, 128, 56 bit; no domain or workstation.
NTLM_NEGOTIATE = b"NTLMSSP\0" + struct.pack("<II8x8x", 1, 0xA0888205)
AV_NAMES = {1: "netbios_name", 3: "dns_name"}  # MsvAvNbComputerName, MsvAvDnsComputerName


def target_info(token: bytes) -> dict[str, str]:
    """The names an NTLM CHALLENGE's TargetInfo AV pairs give (raw or inside SPNEGO)."""
    start = token.find(b"NTLMSSP\0")
    if start < 0 or len(token) < start + 48:
        return {}
    msg = token[start:]
    if struct.unpack_from("<I", msg, 8)[0] != 2:
        return {}
    length, _, offset = struct.unpack_from("<HHI", msg, 40)
    info, names, at = msg[offset : offset + length], {}, 0
    while at + 4 <= len(info):
        av_id, av_len = struct.unpack_from("<HH", info, at)
        if av_id == 0:  # MsvAvEOL
            break
        if av_id in AV_NAMES:
            names[AV_NAMES[av_id]] = info[at + 4 : at + 4 + av_len].decode("utf-16-le", "replace")
        at += 4 + av_len
    return names


def _silent(error: Exception) -> bool:
    """Did the host say nothing (a refused or hung connection), rather than garbage?"""
    if isinstance(error, TimeoutError) or isinstance(error.__cause__, OSError):
        return True  # smbprotocol wraps a failed connect's OSError in a ValueError
    return isinstance(error, SMBException) and "timeout" in str(error).lower()


def probe(address: str, port: int, timeout_s: float) -> Identity:
    """Negotiate with the host and start an anonymous NTLM exchange; no session results."""
    conn = Connection(uuid.uuid4(), address, port, require_signing=False)
    try:
        conn.connect(timeout=timeout_s)
        dialect = int(conn.dialect)
        known = {
            "address": address,
            "server_guid": str(conn.server_guid),
            "dialect": f"{dialect >> 8}.{dialect >> 4 & 15}.{dialect & 15}",
            "signing_required": bool(conn.require_signing),
        }
        setup = SMB2SessionSetupRequest()
        setup["security_mode"] = conn.client_security_mode
        setup["buffer"] = NTLM_NEGOTIATE
        request = conn.send(setup, sid=0, credit_request=1)
        try:
            response = conn.receive(request, timeout=timeout_s)
        except MoreProcessingRequired as e:  # the CHALLENGE comes with this status
            response = e.header
        answer = SMB2SessionSetupResponse()
        answer.unpack(response["data"].get_value())
        return Identity(**known, **target_info(answer["buffer"].get_value()))
    except Exception as e:  # a host that answers TCP but not SMB: say why, go on
        what = "no answer" if _silent(e) else NOT_SMB
        return Identity(address, error=f"{what} ({type(e).__name__}: {e})"[:300])
    finally:
        with suppress(Exception):  # already gone: nothing to close
            conn.disconnect(timeout=timeout_s)


def probe_all(addresses: Iterable[str], port: int, timeout_s: float) -> list[Identity]:
    todo = list(addresses)
    with ThreadPoolExecutor(max_workers=max(1, min(PROBE_THREADS, len(todo)))) as pool:
        return list(pool.map(lambda a: probe(a, port, timeout_s), todo))
