"""`sharecrawl serve` over HTTP: a real server process on a crawled LAN of real media.

The page in a real browser is tests/test_web_browser.py; the LAN and the server process are
in tests/test_web_lan.py.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest

from sharecrawl.web.facets import with_field
from sharecrawl.web.views import windows_path
from tests.cliproc import run_cli
from tests.conftest import LAN
from tests.test_web_lan import HOSTILE_NAME, HOSTILE_TITLE, PADDING, Server, server, web_lan

__all__ = ["server", "web_lan"]  # module fixtures used here

QUERIES = [
    "madonna",
    "frozen",
    "lost",
    "кино",
    "padding song",
    "artist:madonna year:1995..1999",
    "kind:video",
    "secret",
    "onerror",
    "'); DROP TABLE works;--",
    "madonna host:lab-2",
    "format:FLAC",
    "host:lab-3 madonna",
    "madona",
]


def cli_search(lan: LAN, capsys: pytest.CaptureFixture[str], *args: str) -> list[dict]:
    capsys.readouterr()
    assert lan.cli("search", "--json", *args) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("query", QUERIES)
def test_api_results_equal_the_cli_search(server: Server, web_lan: LAN, capsys, query) -> None:
    status, data = server.api(q=query)
    assert status == 200
    assert data["results"] == cli_search(web_lan, capsys, query)
    status, data = server.api(q=query, offline=1)
    assert data["results"] == cli_search(web_lan, capsys, "--all-hosts", query)


def test_unknown_fields_are_named_on_the_page_and_on_stderr(
    server: Server, web_lan: LAN, capsys
) -> None:
    data = server.api(q="madonna colour:red")[1]
    assert "colour:" in data["view"]["notice"] and "artist" in data["view"]["notice"]
    assert server.api(q="madonna")[1]["view"]["notice"] is None
    capsys.readouterr()
    assert web_lan.cli("search", "madonna", "colour:red") == 0
    err = capsys.readouterr().err
    assert err.startswith("sharecrawl: warning: unknown field colour:") and err.count("\n") == 1


def test_pages_are_slices_of_the_cli_list(server: Server, web_lan: LAN, capsys) -> None:
    everything = cli_search(web_lan, capsys, "--limit", "40", "padding")
    assert len(everything) == PADDING
    pages = [server.api(q="padding", size=10, page=n)[1] for n in (1, 2, 3)]
    assert [p["results"] for p in pages] == [everything[:10], everything[10:20], everything[20:]]
    assert [p["has_more"] for p in pages] == [True, True, False]
    assert pages[1]["view"]["pager"]["prev"] == "/?q=padding&size=10"
    assert pages[1]["view"]["pager"]["next"] == "/?q=padding&page=3&size=10"


def test_page_without_javascript_renders_results_on_the_server(server: Server) -> None:
    status, headers, html = server.get("/?q=frozen&offline=1")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert html.count('<li class="copy') == 3  # lab-1's flac, lab-2's mp3, offline lab-3's mp3
    best, flac = html.index('class="copy best"'), html.index("Frozen.flac")
    assert best < flac < html.index('<span class="host">lab-2')
    assert 'class="copy offline"' in html and "1 offline" in html
    assert 'action="/" method="get"' in html  # the form works without the script
    hidden = server.get("/?q=frozen")[2]
    assert hidden.count('<li class="copy') == 2 and "1 offline (hidden)" in hidden


def test_works_on_offline_hosts_are_hidden_unless_asked(server: Server) -> None:
    assert server.api(q="secret")[1]["results"] == []
    shown = server.api(q="secret", offline=1)[1]
    assert [r["title"] for r in shown["results"]] == ["Hidden Track"]
    card = shown["view"]["sections"][0]["blocks"][0]["work"]
    assert card["offline"] and not card["copies"][0]["online"]


def test_nothing_found_suggests_a_near_spelling_only_where_one_exists(server: Server) -> None:
    view = server.api(q="madna musc", offline=1)[1]["view"]
    assert view["notice"] == "No works match."
    assert view["suggestion"] == {"q": "madonna music", "href": "/?q=madonna+music&offline=1"}
    html = server.get("/?q=madna+musc&offline=1")[2]
    assert 'Did you mean: <a href="/?q=madonna+music&amp;offline=1">madonna music</a>' in html
    assert server.api(q="xqzzv wvvk", offline=1)[1]["view"]["suggestion"] is None
    hidden = server.api(q="madna musc")[1]["view"]  # a host is offline: that hint alone
    assert hidden["suggestion"] is None and "offline copies" in hidden["notice"]


def test_every_copy_has_its_link_and_windows_path(server: Server) -> None:
    view = server.api(q="кино")[1]["view"]
    copy = view["sections"][0]["blocks"][0]["work"]["copies"][0]
    assert copy["iri"].endswith("/lab-1/Музыка/Кино/Группа крови.mp3")  # readable
    assert "%D0%9C%D1%83%D0%B7" in copy["href"] and "Музыка" not in copy["href"]
    assert copy["unc"] == "\\\\lab-1\\Музыка\\Кино\\Группа крови.mp3"
    assert windows_path("nas:4455", "smb://guest@nas:4455", "films", "Кино/a b.mkv") == (
        "\\\\nas\\films\\Кино\\a b.mkv"
    )


def test_series_show_as_seasons_and_episodes(server: Server) -> None:
    blocks = server.api(q="lost")[1]["view"]["sections"][0]["blocks"]
    assert [b["type"] for b in blocks] == ["series"]
    seasons = blocks[0]["seasons"]
    assert [s["label"] for s in seasons] == ["Season 1", "Season 2"]
    assert [e["title"] for e in seasons[0]["episodes"]] == ["Episode 1", "Episode 2"]


def test_facets_add_their_field_and_host_format_filters_work(
    server: Server, web_lan: LAN, capsys
) -> None:
    data = server.api(q="madonna", offline=1)[1]
    facets = {f["name"]: {v["label"]: v for v in f["values"]} for f in data["view"]["facets"]}
    assert set(facets) == {"kind", "format", "host", "year"}
    assert facets["kind"]["audio"]["q"] == "madonna kind:audio"
    assert facets["year"]["1990s"]["q"] == "madonna year:1990..1999"
    assert facets["host"]["lab-3"]["count"] == 1  # Frozen's offline copy
    flac = server.api(q=facets["format"]["FLAC"]["q"], offline=1)[1]
    assert [r["title"] for r in flac["results"]] == ["Frozen"]
    on_two = server.api(q="madonna host:lab-2")[1]
    assert [r["title"] for r in on_two["results"]] == ["Frozen"]
    active = {v["label"]: v for f in flac["view"]["facets"] for v in f["values"]}
    assert active["FLAC"]["active"] and active["FLAC"]["q"] == "madonna"  # click again: off
    assert with_field("a kind:audio", "kind", "video") == "a kind:video"
    # host: and format: are fields of the query language: the CLI gives the same
    for query in ("madonna host:lab-2", facets["format"]["FLAC"]["q"], "host:lab-2"):
        assert server.api(q=query)[1]["results"] == cli_search(web_lan, capsys, query)


def test_empty_page_shows_what_is_new_and_the_status(server: Server) -> None:
    data = server.api(q="")[1]
    titles = {s["title"]: s["blocks"] for s in data["view"]["sections"]}
    assert {b["title"] for b in titles["New albums"]} >= {"Ray of Light", "Filler"}
    assert titles["New episodes"][0]["title"] == "Lost"
    assert "Hidden Track" not in json.dumps(data)  # its only host is offline
    assert data["status"].startswith("2 of 3 hosts online · 34 media files")
    assert "version v000002" in data["status"]


def test_hostile_names_are_text(server: Server) -> None:
    status, _, html = server.get("/?q=onerror")
    assert status == 200
    assert "<img src=x" not in html and "<script>alert" not in html and "<b>bold" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;.mp3" in html
    assert "&#34;&gt;&lt;script&gt;alert(2)&lt;/script&gt;" in html
    data = server.api(q="onerror")[1]
    assert data["results"][0]["title"] == HOSTILE_TITLE
    assert data["results"][0]["best"]["path"].endswith(HOSTILE_NAME)


def test_security_headers_on_every_answer(server: Server) -> None:
    for path in ("/", "/?q=madonna", "/api/search?q=madonna", "/static/app.js", "/nowhere"):
        _, headers, _ = server.get(path)
        csp = headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "no-referrer"
        assert headers["x-frame-options"] == "DENY"
    html = server.get("/?q=madonna")[2]
    assert "<script>" not in html and " style=" not in html and "onclick" not in html


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"q": "x" * 501}, "longer than 500"),
        ({"q": "madonna", "size": "101"}, "size must be"),
        ({"q": "madonna", "page": "0"}, "page must be"),
        ({"q": "madonna", "page": "60", "size": "20"}, "only the best 1000"),
        ({"q": "madonna", "page": "1e9"}, "page must be"),
        ({"q": "year:abc"}, "is not a number"),
        ({"q": "format:"}, "needs a value"),
    ],
)
def test_bad_parameters_get_one_clear_message(server: Server, params, message) -> None:
    status, data = server.api(**params)
    assert status == 400 and message in data["error"]
    status, _, html = server.get("/?" + urlencode(params))
    assert status == 400 and message in html and "Traceback" not in html


def digest(folder: Path) -> dict[str, tuple[int, str]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_mtime_ns, hashlib.md5(p.read_bytes()).hexdigest())
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_serving_writes_nothing_and_sql_in_a_query_is_text(server: Server, web_lan: LAN) -> None:
    before = digest(web_lan.crawl_dir)
    for query in [*QUERIES, "", "x' OR 1=1 --", '"; DROP TABLE copies; --', "\\x00 %00"]:
        assert server.api(q=query)[0] in (200, 400)
        assert server.get("/?" + urlencode({"q": query}))[0] in (200, 400)
    assert digest(web_lan.crawl_dir) == before
    assert server.api(q="madonna")[1]["results"]  # the index is whole


def test_listens_on_127_0_0_1_only_by_default(server: Server) -> None:
    assert server.url.startswith("http://127.0.0.1:")
    port = int(server.url.rsplit(":", 1)[1])
    with pytest.raises(OSError):  # another loopback address of this machine: refused
        socket.create_connection(("127.0.0.2", port), timeout=5).close()


def test_on_loopback_only_requests_for_loopback_names_are_answered(server: Server) -> None:
    """A page whose name an attacker points at 127.0.0.1 (DNS rebinding) reads nothing."""
    port = int(server.url.rsplit(":", 1)[1])

    def status_for(host: str) -> int:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("GET", "/api/search?q=madonna", headers={"Host": host})
        response = connection.getresponse()
        body = response.read().decode()
        connection.close()
        assert response.status != 421 or "madonna" not in body.casefold()
        return response.status

    assert status_for(f"evil.example:{port}") == 421
    assert status_for("evil.example") == 421
    assert status_for(f"localhost:{port}") == 200
    assert status_for(f"127.0.0.1:{port}") == 200


def test_bad_crawl_dir_and_busy_port_are_one_line(tmp_path: Path, server: Server) -> None:
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "cat.jpg").write_bytes(b"jpeg")
    refused = run_cli("serve", "--crawl-dir", str(tmp_path / "photos"))
    assert refused.returncode == 2
    err = refused.stderr.strip()
    assert err.startswith("sharecrawl: error:") and "\n" not in err
    port = server.url.rsplit(":", 1)[1]
    crawl = tmp_path / "crawl"
    (crawl / "crawldb").mkdir(parents=True)
    refused = run_cli("serve", "--crawl-dir", str(crawl), "--port", port)
    assert refused.returncode == 2
    err = refused.stderr.strip()
    assert "cannot listen on 127.0.0.1:" in err and "\n" not in err


def test_several_worker_processes_answer_and_stop_cleanly(web_lan: LAN, server: Server) -> None:
    workers = Server(web_lan.crawl_dir, "--workers", "2")
    try:
        answers = [workers.api(q="madonna")[1]["results"] for _ in range(6)]
        assert all(a == server.api(q="madonna")[1]["results"] for a in answers)
    finally:
        assert workers.stop() == 0
    assert "Traceback" not in "".join(workers.log)


def test_a_new_version_is_served_without_restart(lan: LAN) -> None:
    lan.media("alpha", "Music/Björk/Army of Me.mp3", artist="Björk", title="Army of Me")
    lan.write_hosts("alpha")
    served = Server(lan.crawl_dir)  # before the first round: a clear page, then results
    try:
        status, _, html = served.get("/?q=army")
        assert status == 503 and "run `sharecrawl crawl --crawl-dir" in html
        assert "Traceback" not in html
        lan.crawl()
        assert [r["title"] for r in served.api(q="army")[1]["results"]] == ["Army of Me"]
        lan.media("alpha", "Music/Björk/Hyperballad.mp3", artist="Björk", title="Hyperballad")
        lan.crawl()
        data = served.api(q="hyperballad")[1]
        assert [r["title"] for r in data["results"]] == ["Hyperballad"]
        assert data["version"] == "v000002" and "version v000002" in data["status"]
    finally:
        assert served.stop() == 0
    assert "Traceback" not in "".join(served.log)


def test_damaged_or_missing_index_and_version_give_a_clear_page(lan: LAN) -> None:
    lan.media("alpha", "Music/Björk/Army of Me.mp3", artist="Björk", title="Army of Me")
    lan.write_hosts("alpha")
    lan.crawl()
    index = lan.crawl_dir / "index" / "search.duckdb"
    good = index.read_bytes()
    current = lan.crawl_dir / "crawldb" / "CURRENT"
    served = Server(lan.crawl_dir)
    try:
        assert served.api(q="army")[0] == 200

        def unavailable(expect: str) -> None:
            status, _, html = served.get("/?q=army")
            assert status == 503 and expect in html and "Traceback" not in html
            status, data = served.api(q="army")
            assert status == 503 and expect in data["error"]

        junk = index.with_name("junk")
        junk.write_bytes(b"not a database" * 1000)
        os.replace(junk, index)
        unavailable("is damaged: run `sharecrawl crawl")
        index.unlink()
        unavailable("has no search index yet")
        junk.write_bytes(good)
        os.replace(junk, index)
        assert served.api(q="army")[0] == 200  # back without a restart
        current.write_text("garbage\n")
        unavailable("CURRENT is damaged")
        current.write_text("v000009\n")
        unavailable(
            "CURRENT is damaged (it names no version folder); run "
            f"`sharecrawl check --crawl-dir {lan.crawl_dir} --repair`, then reload this page."
        )
        current.write_text("v000001\n")
        assert served.api(q="army")[0] == 200
    finally:
        assert served.stop() == 0
    assert "Traceback" not in "".join(served.log)


def test_a_request_never_mixes_two_versions(lan: LAN, tmp_path: Path) -> None:
    """Swap two index files under a stream of requests: each answer is one version's."""
    lan.media("alpha", "Music/Björk/Army of Me.mp3", artist="Björk", title="Army of Me")
    lan.write_hosts("alpha")
    lan.crawl()
    index = lan.crawl_dir / "index" / "search.duckdb"
    first = tmp_path / "v1.duckdb"
    shutil.copyfile(index, first)
    lan.media("alpha", "Music/Björk/Army of Me (live).mp3", artist="Björk", title="Army of Me")
    lan.crawl()
    second = tmp_path / "v2.duckdb"
    shutil.copyfile(index, second)
    served = Server(lan.crawl_dir)
    answers: list[dict] = []
    statuses: list[object] = []
    stop = threading.Event()

    def ask() -> None:
        while not stop.is_set():
            status, data = served.api(q="army")
            statuses.append(data.get("error") or status)
            if status == 200:
                answers.append(data)

    try:
        expected = {}
        for name, source in (("v000001", first), ("v000002", second)):
            shutil.copyfile(source, index.with_name("swap"))
            os.replace(index.with_name("swap"), index)
            expected[name] = served.api(q="army")[1]
            assert expected[name]["version"] == name
        assert expected["v000001"]["results"][0]["copies"] == 1
        assert expected["v000002"]["results"][0]["copies"] == 2
        threads = [threading.Thread(target=ask) for _ in range(3)]
        for t in threads:
            t.start()
        n, deadline = 0, time.monotonic() + 90
        while n < 16 or len({a["version"] for a in answers}) < 2 or len(answers) < 10:
            # rounds swap the index every few minutes; here about 3 times a second
            source = (first, second)[n % 2]
            shutil.copyfile(source, index.with_name("swap"))
            os.replace(index.with_name("swap"), index)
            time.sleep(0.3)
            n += 1
            if time.monotonic() > deadline:
                break
        stop.set()
        for t in threads:
            t.join()
    finally:
        served.stop()
    assert len(answers) >= 10, (statuses, "".join(served.log)[:6000])
    versions = {a["version"] for a in answers}
    assert versions == {"v000001", "v000002"}
    for answer in answers:  # results, copies, status: all of one version
        want = expected[answer["version"]]
        assert answer["results"] == want["results"]
        assert answer["view"] == want["view"]
    assert "Traceback" not in "".join(served.log)
