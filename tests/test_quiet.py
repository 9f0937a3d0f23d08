"""`crawl --quiet`, as cron runs it: nothing when a round went as expected (a host switched off
is normal life on a LAN), one line for each thing a person should look at, and the exit
statuses of `crawl --help`'s table: 1 when a person is needed."""

from __future__ import annotations

import pytest

from sharecrawl.crawl_io.crawldb.lock import CrawlLock
from tests.cliproc import REPO
from tests.conftest import LAN
from tests.smbd import SmbServer, smbd_skip_reason
from tests.test_identity_not_smb import GARBAGE, listen
from tests.test_metrics import promtool_check, samples


@pytest.fixture
def two_hosts(lan: LAN) -> LAN:
    lan.media("alpha", "music/Madonna - Music.mp3", artist="Madonna", title="Music")
    lan.write_hosts("alpha")
    with lan.hosts_file.open("a") as hosts:
        hosts.write("smb://127.0.0.1:9/music\n")  # switched off: nothing listens there
    return lan


def test_a_round_as_expected_prints_nothing(two_hosts: LAN, capfd: pytest.CaptureFixture) -> None:
    assert two_hosts.cli("crawl", "--quiet", "--rounds", "2") == 0
    assert capfd.readouterr() == ("", "")
    assert two_hosts.cli("crawl") == 0  # without --quiet, the round report as before
    assert "1 of 2 hosts online" in capfd.readouterr().out


def test_no_host_answered_is_one_line_and_exit_1(lan: LAN, capfd: pytest.CaptureFixture) -> None:
    lan.hosts_file.write_text("smb://127.0.0.1:9/music\nsmb://127.0.0.1:7/films\n")
    assert lan.cli("crawl", "--quiet") == 1
    out, err = capfd.readouterr()
    assert out == ""
    assert err == (
        "sharecrawl: round 1: no host answered (2 refused): check this machine's network and "
        "the hosts file; the round is published and nothing indexed was lost\n"
    )
    assert lan.cli("crawl") == 1  # the same line closes the full report
    assert err.replace("round 1", "round 2") in capfd.readouterr().err


def test_a_range_where_nothing_answered_is_one_line_and_exit_1(
    lan: LAN, capfd: pytest.CaptureFixture
) -> None:
    """A hosts file of ranges alone, none of whose hosts was ever found (nothing listens on
    the port): no host answered, as when every known host is off."""
    lan.hosts_file.write_text("smb://127.0.0.80-127.0.0.82:9\n")
    assert lan.cli("crawl", "--quiet") == 1
    assert capfd.readouterr() == (
        "",
        "sharecrawl: round 1: no host answered (3 addresses of the hosts file's ranges tried): "
        "check this machine's network and the hosts file\n",
    )


@pytest.mark.smb
@pytest.mark.skipif(smbd_skip_reason() is not None, reason=str(smbd_skip_reason()))
def test_quiet_over_smbd_with_a_missing_share(
    lan: LAN, smb_server: SmbServer, capfd: pytest.CaptureFixture
) -> None:
    """A real smbd's share crawled quietly prints nothing; a share the host lacks beside it
    makes every host that answered one not crawled as the hosts file says: exit 1, its lines."""
    lan.hosts_file.write_text(f"{smb_server.url}/media\n")
    assert lan.cli("crawl", "--quiet") == 0
    assert capfd.readouterr() == ("", "")
    text = (lan.crawl_dir / "metrics.prom").read_text()
    promtool_check(text)
    assert samples(text)[("sharecrawl_hosts", (("status", "ok"),))] == 1
    lan.hosts_file.write_text(f"{smb_server.url}/media\n{smb_server.url}/no-such-share\n")
    assert lan.cli("crawl", "--quiet") == 1
    out, err = capfd.readouterr()
    assert out == ""
    missing = (
        f"SCTEST{smb_server.port}: share 'no-such-share' is not on the host "
        "(its shares: media, private)"
    )
    assert err.splitlines() == [
        f"sharecrawl: round 2: SCTEST{smb_server.port}: share not found: share 'no-such-share' "
        "is not on the host (its shares: media, private)",
        "sharecrawl: round 2: a share the hosts file names is missing (1 share not found): "
        f"{missing}; check the hosts file; the round is published and nothing indexed was lost",
    ]


@pytest.mark.smb
@pytest.mark.skipif(smbd_skip_reason() is not None, reason=str(smbd_skip_reason()))
def test_a_share_closed_to_us_is_quiet_unless_the_hosts_file_names_it(
    lan: LAN, smb_server: SmbServer, capfd: pytest.CaptureFixture
) -> None:
    """The host crawled whole has a share the guest may not enter (`private`): its owner
    shares it with others, normal life on a LAN, so nothing is printed; named in the hosts
    file, the same refusal is the round's verdict."""
    lan.hosts_file.write_text(f"{smb_server.url}\n")
    assert lan.cli("crawl", "--quiet") == 0
    assert capfd.readouterr() == ("", "")
    assert lan.cli("status") == 0  # status still names it
    assert f"127.0.0.1:{smb_server.port}/private: error: share 'private': access denied" in (
        capfd.readouterr().out
    )
    lan.hosts_file.write_text(f"{smb_server.url}/private\n")
    lan.crawl_dir = lan.crawl_dir.with_name("named")  # a crawl of that share alone
    assert lan.cli("crawl", "--quiet") == 1
    out, err = capfd.readouterr()
    assert out == ""
    assert err.splitlines() == [
        f"sharecrawl: round 1: SCTEST{smb_server.port}: access denied: share 'private': "
        "access denied",
        "sharecrawl: round 1: every host that answered refused the crawler (1 access denied): "
        "check SHARECRAWL_SMB_USER/PASSWORD or the credentials file and the shares' "
        "permissions; the round is published and nothing indexed was lost",
    ]


def test_the_exit_statuses_are_crawl_helps_and_the_readmes(
    lan: LAN, capfd: pytest.CaptureFixture
) -> None:
    """One table, in `crawl --help` and the README; 75 when another crawl holds the lock, 2 on
    bad input (1 and 130/143: the tests above and tests/test_signals.py)."""
    assert lan.cli("crawl", "--help") == 0
    shown = capfd.readouterr().out
    table = shown[shown.index("exit status:") :].split()
    for status in ("0", "1", "2", "75", "130/143"):
        assert status in table
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    rows = [line.split("|")[1].strip() for line in readme.splitlines() if line.startswith("| ")]
    assert rows[rows.index("status") + 1 : rows.index("status") + 5] == [
        "0",
        "1",
        "2 / 75",
        "130 / 143",
    ]
    lan.hosts_file.write_text("smb://127.0.0.1:9/music\n")
    lan.crawl_dir.mkdir(parents=True)
    with CrawlLock(lan.crawl_dir).acquire():
        assert lan.cli("crawl", "--quiet") == 75
    assert capfd.readouterr().err.startswith("sharecrawl: error: another crawl (pid ")
    lan.hosts_file.write_text("smb://[::1\n")
    assert lan.cli("crawl", "--quiet") == 2
    assert capfd.readouterr().err.count("\n") == 1
    assert not (lan.crawl_dir / "crawldb").exists()  # nothing written


def test_a_round_that_crawled_no_host_is_exit_1(lan: LAN, capfd: pytest.CaptureFixture) -> None:
    """One host switched off, one that answers but speaks no SMB (an `error`): nothing was
    crawled, which no host switched off explains."""
    server, stop = listen("127.0.0.85", GARBAGE)
    port = server.getsockname()[1]
    lan.hosts_file.write_text(f"smb://127.0.0.85:{port}/music\nsmb://127.0.0.1:9/films\n")
    try:
        assert lan.cli("crawl", "--quiet") == 1
    finally:
        stop.set()
        server.close()
    out, err = capfd.readouterr()
    assert out == ""
    assert err.splitlines() == [
        f"sharecrawl: round 1: 127.0.0.85:{port}: error: not SMB",
        "sharecrawl: round 1: no host was crawled (1 error, 1 refused): the lines before say "
        "why; the round is published and nothing indexed was lost",
    ]
