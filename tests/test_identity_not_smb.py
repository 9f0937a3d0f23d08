"""A listener that answers TCP but speaks no SMB, in a range or listed by hand: one line
naming it (`error: not SMB`), no traceback, and the round goes on (docs/DESIGN.md, Sources)."""

from __future__ import annotations

import resource
import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from sharecrawl.crawl_io.discover import probe, probe_all
from sharecrawl.crawl_io.smb_internals import message_length
from tests.conftest import LAN

GARBAGE = b"\x00\x00\x00\x10garbage!garbage!HTTP/1.0 400 Bad Request\r\n\r\n"


# What other listeners answer an SMB2 NEGOTIATE with: an HTTP server's first bytes read as a
# Direct TCP length are 1.2 GB, random bytes up to 4 GiB, an SMB2 header may carry junk fields
SMB2_JUNK = b"\xfeSMB" + struct.pack("<H", 64) + bytes(range(1, 59))
ANSWERS = [
    GARBAGE,
    b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
    b"\x7f\xff\xff\xff" + b"x" * 100,
    struct.pack(">I", 84) + SMB2_JUNK + bytes(20),
    struct.pack(">I", 40) + b"\xffSMB" + bytes(36),  # SMB1
    bytes(64),
]


def listen(address: str, answer: bytes, port: int = 0) -> tuple[socket.socket, threading.Event]:
    """A loopback TCP server that answers every connection's first bytes with `answer`."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((address, port))
    server.listen(16)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.settimeout(2)
                    conn.recv(4096)
                    conn.sendall(answer)
                    conn.recv(4096)  # until the client gives up
                except OSError:
                    pass

    threading.Thread(target=serve, daemon=True).start()
    return server, stop


@pytest.fixture
def garbage_listener() -> Iterator[tuple[str, int]]:
    """A loopback TCP server (127.0.0.65) that answers every connection with garbage."""
    server, stop = listen("127.0.0.65", GARBAGE)
    yield "127.0.0.65", server.getsockname()[1]
    stop.set()
    server.close()


def test_the_probe_says_not_smb(garbage_listener: tuple[str, int]) -> None:
    found = probe(*garbage_listener, timeout_s=2.0)
    assert found.server_guid is None and found.error is not None
    assert found.error.startswith("not SMB (")


def test_every_kind_of_garbage_is_not_smb_at_once_and_costs_no_memory() -> None:
    """Probed together, as a sweep probes; the length a header claims is checked before a byte
    is allocated for it (crawl_io.smb_internals.message_length), so no probe waits for (or
    zeroes) gigabytes and none is taken for a silent host."""
    assert message_length(b"\x00\xff\xff\xff") == 16_777_215
    for header in (b"HTTP", b"\x01\x00\x00\x00"):
        with pytest.raises(ValueError, match="not SMB"):
            message_length(header)
    first, _ = listen("127.0.0.67", ANSWERS[0])
    port = first.getsockname()[1]
    servers = [first] + [listen(f"127.0.0.{68 + i}", a, port)[0] for i, a in enumerate(ANSWERS[1:])]
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        found = probe_all([f"127.0.0.{67 + i}" for i in range(len(ANSWERS))], port, 5.0)
    finally:
        for server in servers:
            server.close()
    assert [i.error.split(" (")[0] for i in found if i.error] == ["not SMB"] * len(ANSWERS)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_kib < 256 * 1024


def test_a_silent_listener_is_no_answer_not_garbage() -> None:
    """A hung server (the kernel accepts, nothing answers) is not called "not SMB"."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.66", 0))
        silent.listen(4)  # never accepted: the connect succeeds, no byte comes
        found = probe("127.0.0.66", silent.getsockname()[1], timeout_s=1.0)
    assert found.error is not None and found.error.startswith("no answer (")
    assert not found.not_smb


def test_a_garbage_listener_is_one_line_in_a_range_and_listed(
    lan: LAN, garbage_listener: tuple[str, int], luigi_cfg, run_json, capsys
) -> None:
    luigi_cfg("[sharecrawl]\nliveness_timeout_s = 2\n")
    address, port = garbage_listener
    (lan.host("plain") / "music").mkdir(parents=True)
    (lan.host("plain") / "music" / "a.txt").write_text("a")
    range_line = f"smb://127.0.0.64-127.0.0.66:{port}"
    lan.hosts_file.write_text(f"file://{lan.host('plain')}\n{range_line}\n")
    capsys.readouterr()
    assert lan.cli("crawl", "--rounds", "1") == 0
    out = capsys.readouterr()
    text = out.out + out.err
    assert "Traceback" not in text and "struct.error" not in text
    lines = [line for line in text.splitlines() if "not SMB" in line]
    assert lines == [f"sharecrawl: {range_line}: {address}:{port}: error: not SMB"], text
    sweep = run_json(lan, "status")["sweeps"][0]
    assert (sweep["n_answered"], sweep["n_smb"], sweep["n_new"]) == (1, 0, 0)

    lan.hosts_file.write_text(f"file://{lan.host('plain')}\nsmb://{address}:{port}/media\n")
    capsys.readouterr()
    lan.cli("crawl", "--rounds", "1")
    out = capsys.readouterr()
    text = out.out + out.err
    assert "Traceback" not in text and "struct.error" not in text, text
    key = f"{address}:{port}"
    assert f"    {key}: error: not SMB" in out.out, text
    rows = run_json(lan, "sql", f"SELECT status, online FROM hosts WHERE host = '{key}'")
    assert rows == [{"status": "error", "online": True}]
