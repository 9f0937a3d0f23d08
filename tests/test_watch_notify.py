"""crawl_io.notify against real Samba (tests/smbd.py): async answers, re-arming, overflow,
refusal, CANCEL on a signed session, keepalive against a hung server."""

from __future__ import annotations

import select
import struct
import time
from collections.abc import Callable

import pytest

from sharecrawl.crawl_io.notify import Change, NotifySession, Refusal, parse_notify, share_path
from sharecrawl.crawl_io.sources import Credentials, SourceTimeout, parse_host_url
from tests.smbd import SmbServer, make_base_dir
from tests.watchtools import smbclient_burst

pytestmark = pytest.mark.smb


def notify_entry(action: int, name: str, last: bool = False) -> bytes:
    raw = name.encode("utf-16-le")
    size = 12 + len(raw)
    padded = size + (-size % 4)
    return (
        struct.pack("<III", 0 if last else padded, action, len(raw)) + raw + b"\0" * (padded - size)
    )


def test_parse_notify_maps_names_back() -> None:
    buffer = (
        notify_entry(1, "a\\b\\new\uf022song\uf025.mp3")
        + notify_entry(4, "old")
        + notify_entry(5, "new", last=True)
    )
    assert parse_notify(buffer) == [
        ("added", "a/b/new:song?.mp3"),
        ("renamed_from", "old"),
        ("renamed_to", "new"),
    ]
    assert share_path("") == "" and share_path("x\\y") == "x/y"


@pytest.fixture
def server(smbd_factory: Callable[..., SmbServer]) -> SmbServer:
    root = make_base_dir() / "tree"
    (root / "media").mkdir(parents=True)
    (root / "private").mkdir()
    return smbd_factory(root_dir=root)


def session(server: SmbServer, user: bool = False, timeout_s: float = 10.0) -> NotifySession:
    credentials = Credentials(server.user, server.password) if user else Credentials(None)
    return NotifySession(parse_host_url(server.url), credentials, timeout_s=timeout_s)


def pump(source: NotifySession, wait_s: float) -> list:
    """As the watch loop does: wait until the socket is readable, then take the events."""
    select.select([source.fileno()], [], [], wait_s)
    return source.take()


def changes_until(source: NotifySession, want: Callable[[list], bool], limit_s: float = 30):
    """Pump until `want(events so far)`; the limit only bounds a failure."""
    events = source.take()
    deadline = time.monotonic() + limit_s
    while not want(events):
        assert time.monotonic() < deadline, events
        events += pump(source, 0.2)
    return events


def probe_until_hinted(source: NotifySession, folder, name: str = "probe") -> list:
    """Samba registers a watch asynchronously: write probes until one is reported."""
    events: list = []
    for n in range(60):
        (folder / f"{name} {n}").write_text("p")
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            events += pump(source, 0.1)
            if any(isinstance(e, Change) and e.path.startswith(name) for e in events):
                return events
    raise AssertionError(f"no probe reported: {events}")


def test_watch_goes_async_is_rearmed_and_reports_renames(server: SmbServer) -> None:
    with session(server) as source:
        source.watch("media")
        assert source.confirm() == ["media"]
        assert source.outstanding == 2
        # both went async (interim STATUS_PENDING)
        assert sum(r.async_id is not None for r in source._pending) == 2
        probe_until_hinted(source, server.root_dir / "media")
        (server.root_dir / "media" / "a:b?.txt").write_text("x")  # on the host's own disk
        events = changes_until(source, lambda ev: any(e.path == "a:b?.txt" for e in ev))
        assert Change("media", "a:b?.txt", "added", False) in events
        (server.root_dir / "media" / "a:b?.txt").rename(server.root_dir / "media" / "c.txt")
        events = changes_until(source, lambda ev: any(e.path == "c.txt" for e in ev))
        assert ("a:b?.txt", "renamed_from") in {(e.path, e.action) for e in events}
        assert source.outstanding == 2  # every answer was replaced by a new request


def test_overflow_when_changes_do_not_fit(server: SmbServer) -> None:
    with session(server) as source:
        source.buffer = 1024  # ~20 entries per answer
        source.watch("media")
        source.confirm()
        probe_until_hinted(source, server.root_dir / "media")
        smbclient_burst(server, "media", folders=2, per_folder=100)  # nobody reads meanwhile
        events = changes_until(source, lambda ev: any(e.overflow for e in ev))
        overflow = [e for e in events if e.overflow]
        assert overflow[0] == Change("media", "", "overflow", True)
        assert source.outstanding == 2  # still watching after an overflow


def test_refused_watch_is_given_up_and_the_session_goes_on(smbd_factory) -> None:
    root = make_base_dir() / "tree"
    (root / "media").mkdir(parents=True)
    quiet = smbd_factory(root_dir=root, extra_config="\n[global]\n  change notify = no\n")
    with session(quiet) as source:
        source.watch("media")
        events = changes_until(source, lambda ev: bool(ev))
        assert events == [Refusal("media", "not implemented")]
        assert source.watched == [] and source.usable
        assert source.listdir("media", "") == []  # the connection is fine


def test_cancel_on_a_signed_session(server: SmbServer) -> None:
    with session(server, user=True) as source:  # a user session: every message signed
        assert source._session is not None and source._session.signing_required
        source.watch("private")
        source.watch("media")
        source.confirm()
        probe_until_hinted(source, server.root_dir / "private")  # signed answers verified
        source.cancel()
        changes_until(source, lambda _ev: source.outstanding == 0)
        assert source.cancels_confirmed == 4  # 2 requests per share, answered STATUS_CANCELLED
        assert source.usable and source.watched == []
        names = [e.name for e in source.listdir("private", "")]  # still a good session
        assert names and all(n.startswith("probe ") for n in names)


def test_keepalive_finds_a_hung_server(server: SmbServer) -> None:
    source = session(server, timeout_s=1.0)
    source.watch("media")
    source.confirm()
    server.pause()
    try:
        source.keepalive(0.0)  # sends an ECHO
        deadline = time.monotonic() + 30
        with pytest.raises(SourceTimeout):
            while time.monotonic() < deadline:
                source.keepalive(0.0)
                time.sleep(0.1)
        assert not source.usable
    finally:
        server.resume()
        source.abandon()


def test_watch_and_cancel_on_an_encrypted_share(smbd_factory) -> None:
    root = make_base_dir() / "tree"
    (root / "sealed").mkdir(parents=True)
    sealed = f"\n[sealed]\n  path = {root}/sealed\n  smb encrypt = required\n  valid users = root\n"
    server = smbd_factory(root_dir=root, extra_config=sealed)
    with session(server, user=True) as source:
        source.watch("sealed")
        source.confirm()
        assert source._trees["sealed"].encrypt_data
        probe_until_hinted(source, root / "sealed")  # the answers were decrypted
        source.cancel()
        changes_until(source, lambda _ev: source.outstanding == 0)
        assert source.cancels_confirmed == 2 and source.usable
