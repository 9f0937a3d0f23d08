"""`crawl --quiet`, as cron runs it: nothing when a round went as expected (a host switched off
is normal life on a LAN), one line for each thing a person should look at, and the exit
statuses of `crawl --help`'s table: 1 when a person is needed."""

from __future__ import annotations

import pytest

from tests.conftest import LAN
from tests.smbd import SmbServer, smbd_skip_reason
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
