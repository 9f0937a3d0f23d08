"""A share the hosts file names that its host lacks, beside one it has: the round exits 1,
and its closing line names the missing share with the shares the host has, without claiming
that every host refused the crawler (docs/DESIGN.md, Exit status)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.conftest import LAN
from tests.media import make_media
from tests.smbd import SmbServer, make_base_dir

pytestmark = pytest.mark.smb


def test_a_missing_share_beside_a_crawled_one_is_named(
    lan: LAN, smbd_factory: Callable[..., SmbServer], run_json, capsys
) -> None:
    root = make_base_dir() / "tree"
    make_media(root / "media" / "Kino" / "track.ogg", "ogg", artist="Kino", title="Kukushka")
    (root / "private").mkdir(parents=True)
    server = smbd_factory(root_dir=root)
    lan.hosts_file.write_text(f"{server.url}/media\n{server.url}/musik\n")
    capsys.readouterr()
    assert lan.cli("crawl", "--rounds", "1") == 1
    err = capsys.readouterr().err
    name = f"SCTEST{server.port}"
    assert err.splitlines()[-1] == (
        f"sharecrawl: round 1: a share the hosts file names is missing (1 share not found): "
        f"{name}: share 'musik' is not on the host (its shares: media, private); check the "
        "hosts file; the round is published and nothing indexed was lost"
    )
    assert "refused" not in err
    assert [r["title"] for r in run_json(lan, "search", "kukushka")] == ["Kukushka"]
    status = run_json(lan, "status")
    assert status["hosts"]["by_status"] == {"share_not_found": 1}
