"""A share named in the hosts file that the host does not have, over real Samba: the host's
status is `share_not_found`, naming the shares it does have, in `hosts`, `status` and the
crawl's output; alone, that round exits 1, like a share refused to us."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.conftest import LAN
from tests.media import make_media
from tests.smbd import SmbServer, make_base_dir

pytestmark = pytest.mark.smb


def test_missing_share_is_a_host_status(
    lan: LAN, smbd_factory: Callable[..., SmbServer], run_json, capsys
) -> None:
    root = make_base_dir() / "tree"
    make_media(root / "media" / "Kino" / "track.ogg", "ogg", artist="Kino", title="Kukushka")
    (root / "private").mkdir(parents=True)
    server = smbd_factory(root_dir=root)
    host = f"127.0.0.1:{server.port}"
    lan.hosts_file.write_text(f"{server.url}/share\n")
    capsys.readouterr()
    assert lan.cli("crawl", "--rounds", "1") == 1
    captured = capsys.readouterr()
    name = f"SCTEST{server.port}"  # the crawl's lines name a host as people know it
    assert f"{name}: share not found: share 'share' is not on the host" in captured.out
    assert "(its shares: media, private)" in captured.out
    assert "1 share not found" in captured.err
    rows = run_json(lan, "sql", "SELECT status, online, last_error FROM hosts")
    assert rows == [
        {
            "status": "share_not_found",
            "online": True,
            "last_error": f"{host}: share 'share' is not on the host (its shares: media, private)",
        }
    ]
    status = run_json(lan, "status")
    assert status["hosts"]["by_status"] == {"share_not_found": 1}
    assert status["config_failure"]

    # beside a share it has, the host still fails for the one it has not; media is crawled
    lan.hosts_file.write_text(f"{server.url}/media\n{server.url}/share\n")
    capsys.readouterr()
    assert lan.cli("crawl", "--rounds", "1") == 1
    assert [r["title"] for r in run_json(lan, "search", "kukushka")] == ["Kukushka"]
    rows = run_json(lan, "sql", "SELECT status FROM hosts")
    assert rows == [{"status": "share_not_found"}]
    log = run_json(lan, "sql", "SELECT share, status FROM fetchlog WHERE round = 2 ORDER BY ALL")
    assert log == [{"share": "media", "status": "new"}, {"share": None, "status": "error"}]

    lan.hosts_file.write_text(f"{server.url}/media\n")  # fixed: ok again
    assert lan.cli("crawl", "--rounds", "1") == 0
    assert run_json(lan, "sql", "SELECT status, last_error FROM hosts") == [
        {"status": "ok", "last_error": None}
    ]
