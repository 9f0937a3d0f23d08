"""One reading of a host URL: what the input check accepts is what every later step reads
back (`HostURL.line_url` is canonical, IPv6 in brackets), so a hosts file is refused at once
with exit 2 or crawled in full; a URL a crawl directory kept from an older release fails its
host alone, never the round. Real smbd servers on 127.0.0.1 and ::1."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.crawl_io.sources import ConfigError, parse_host_url, read_hosts_file
from sharecrawl.web.views import windows_path
from tests.conftest import LAN
from tests.smbd import (
    SmbServer,
    free_port,
    ipv6_skip_reason,
    make_base_dir,
    remove_tree,
    smbd_skip_reason,
    start_smbd,
)

SMB_FILES = 2  # the files of each test server's media share


def crawl_json(lan: LAN, capsys: pytest.CaptureFixture[str], sql: str) -> list[dict]:
    import json

    capsys.readouterr()
    assert lan.cli("sql", sql, "--json") == 0
    return json.loads(capsys.readouterr().out)


def host_counts(lan: LAN, capsys: pytest.CaptureFixture[str]) -> dict[str, tuple[str, int]]:
    """host -> (status, files that are not folders)."""
    rows = crawl_json(
        lan,
        capsys,
        "SELECT h.host, h.status, count(f.path) FILTER (WHERE NOT f.is_dir) AS n "
        "FROM hosts h LEFT JOIN files f USING (host) GROUP BY ALL",
    )
    return {r["host"]: (r["status"], r["n"]) for r in rows}


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, SmbServer]]:
    """Small smbd servers by address: '127.0.0.1', and '::1' where this machine has it."""
    reason = smbd_skip_reason()
    if reason:
        pytest.skip(reason)
    started: dict[str, SmbServer] = {}
    bases = []
    for address in ("127.0.0.1", "::1"):
        if address == "::1" and ipv6_skip_reason():
            continue
        base = make_base_dir()
        bases.append(base)
        (base / "tree" / "media" / "sub").mkdir(parents=True)
        (base / "tree" / "media" / "a.txt").write_text("a")
        (base / "tree" / "media" / "sub" / "b.txt").write_text("bb")
        for p in (base / "tree", *(base / "tree").rglob("*")):
            p.chmod(0o755 if p.is_dir() else 0o644)
        started[address] = start_smbd(base / "server", base / "tree", audit=False, host=address)
    yield started
    for server in started.values():
        server.stop()
    for base in bases:
        remove_tree(base)


# -- the canonical form ----------------------------------------------------------------------


def test_canonical_urls_and_keys() -> None:
    cases = {
        "smb://[::ffff:127.0.0.1]:14451/pub": ("[::ffff:127.0.0.1]:14451", "::ffff:127.0.0.1"),
        "smb://ann@[::1]:445/a%20b": ("[::1]", "::1"),
        "smb://[fe80::1%eth0]/m": ("[fe80::1%25eth0]", "fe80::1%eth0"),
        "smb://NAS:1445/m": ("nas:1445", "nas"),
        "file:///srv/a%2523b%3F%20": ("a%23b? ", "/srv/a%23b? "),
        "file://localhost//srv//x/": ("x", "/srv/x"),
    }
    for text, (key, hostname) in cases.items():
        h = parse_host_url(text)
        assert (h.host, h.hostname) == (key, hostname), text
        assert parse_host_url(h.line_url) == h, h.line_url
    assert parse_host_url("smb://ann@[::1]:445/a%20b").line_url == "smb://ann@[::1]:445/a%20b"
    assert parse_host_url("file:///srv/a%2523b%3F%20").url == "file:///srv/a%2523b%3F%20"
    for bad, message in (
        ("file:////", "not the root"),
        ("file:///", "not the root"),
        ("smb://[v1.x]/m", "brackets hold an IPv6 address"),
        ("smb://[127.0.0.1]/m", "IPv4 address cannot be in brackets"),
        ("smb://[::1/m", "Invalid IPv6 URL"),
        ("file:///srv/" + "я" * 130, "too long to name its files"),
    ):
        with pytest.raises(ConfigError, match=message):
            parse_host_url(bad)


def test_windows_path_of_an_ipv6_host() -> None:
    # Explorer reaches an IPv6 address by its ipv6-literal.net name
    url, key = "smb://ann@[fe80::1%25eth0]:1445/m", "[fe80::1%25eth0]:1445"
    assert windows_path(key, url, "m", "a/b.mp3") == r"\\fe80--1seth0.ipv6-literal.net\m\a\b.mp3"
    assert windows_path("nas:1445", "smb://nas:1445", "m", "c") == r"\\nas\m\c"


def test_bom_and_crlf_hosts_file_is_crawled(lan: LAN, capsys) -> None:
    lan.media("alpha", "music/song.mp3", artist="Madonna", title="Music")
    lan.media("beta", "songs/b.mp3", artist="Kino", title="Kukushka")
    text = f"file://{lan.host('alpha')}\r\n# beta\r\nfile://{lan.host('beta')}\r\n"
    lan.hosts_file.write_bytes(b"\xef\xbb\xbf" + text.encode())
    lan.crawl()
    assert host_counts(lan, capsys) == {"alpha": ("ok", 1), "beta": ("ok", 1)}


def test_file_root_is_refused_before_anything_is_written(lan: LAN, capsys) -> None:
    lan.media("alpha", "music/song.mp3", artist="Madonna", title="Music")
    lan.hosts_file.write_text(f"file://{lan.host('alpha')}\nfile:////\n")
    assert lan.cli("crawl") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("sharecrawl: error: ") and "hosts.txt:2" in err and "root" in err
    assert not lan.crawl_dir.exists()


# -- IPv6 over SMB, end to end ---------------------------------------------------------------


def test_ipv6_hosts_are_crawled_end_to_end(lan: LAN, servers, capsys) -> None:
    if "::1" not in servers:
        pytest.skip(ipv6_skip_reason() or "no ::1 server")
    v4, v6 = servers["127.0.0.1"], servers["::1"]
    lan.media("alpha", "music/song.mp3", artist="Madonna", title="Music")
    lan.hosts_file.write_text(
        f"file://{lan.host('alpha')}\n{v6.url}/media\nsmb://[::ffff:127.0.0.1]:{v4.port}/media\n"
    )
    lan.crawl(rounds=2)
    assert host_counts(lan, capsys) == {
        "alpha": ("ok", 1),
        f"[::1]:{v6.port}": ("ok", SMB_FILES),
        f"[::ffff:127.0.0.1]:{v4.port}": ("ok", SMB_FILES),
    }
    urls = crawl_json(lan, capsys, "SELECT url FROM hosts WHERE url LIKE 'smb:%' ORDER BY 1")
    assert [r["url"] for r in urls] == sorted(
        [f"smb://[::1]:{v6.port}/media", f"smb://[::ffff:127.0.0.1]:{v4.port}/media"]
    )


# -- what a crawl directory kept from an older release ---------------------------------------


def test_a_round_left_with_an_unreadable_url_completes(lan: LAN, capsys) -> None:
    """An older release wrote IPv6 URLs without brackets into a round's inject and fetch
    list and then failed that round, and every rerun of it, even with the line removed."""
    from sharecrawl.pipeline.generate import Generate
    from sharecrawl.pipeline.inject import Inject
    from sharecrawl.pipeline.settings import read_settings

    lan.media("alpha", "music/song.mp3", artist="Madonna", title="Music")
    lan.write_hosts("alpha")
    lan.crawl()
    port = free_port()
    lan.hosts_file.write_text(f"file://{lan.host('alpha')}\nsmb://[::ffff:127.0.0.1]:{port}/m\n")
    settings = read_settings(hosts_file=lan.hosts_file, crawl_dir=lan.crawl_dir)
    Inject(crawl_dir=str(lan.crawl_dir), round=2, settings=settings).run()
    inject_path = CrawlDir(lan.crawl_dir).segment_dir(2) / "inject.parquet"
    rows = pq.read_table(inject_path).to_pylist()
    old_key = f"::ffff:127.0.0.1:{port}"
    for row in rows:
        if row["host"] != "alpha":  # as the old release stored it, and as if it answered
            row.update(host=old_key, url=f"smb://{old_key}/m", online=True, status="ok")
    pq.write_table(pa.Table.from_pylist(rows, pq.read_schema(inject_path)), inject_path)
    Generate(crawl_dir=str(lan.crawl_dir), round=2, settings=settings).run()
    lan.write_hosts("alpha")  # the operator took the line out

    assert lan.cli("crawl", "--rounds", "1") == 0  # round 2, resumed
    rows = crawl_json(lan, capsys, "SELECT host, status, last_error FROM hosts ORDER BY host")
    assert [(r["host"], r["status"]) for r in rows] == [(old_key, "error"), ("alpha", "ok")]
    assert "malformed host URL" in rows[0]["last_error"]
    assert lan.cli("crawl", "--rounds", "1") == 0  # round 3 retires it
    assert host_counts(lan, capsys) == {"alpha": ("ok", 1)}


# -- property: refused with exit 2, or read back as itself -----------------------------------

LABEL = st.text("abz09-_яü", min_size=1, max_size=8)
IPV4 = st.ip_addresses(v=4).map(str)
IPV6 = st.ip_addresses(v=6).map(str)
HOSTNAME = st.one_of(
    IPV4,
    IPV6.map(lambda a: f"[{a}]"),
    IPV6,  # without brackets: refused
    st.tuples(IPV6, st.sampled_from(["%eth0", "%25lo", "%"])).map(lambda t: f"[{t[0]}{t[1]}]"),
    st.lists(LABEL, min_size=1, max_size=3).map(".".join),
    st.text(min_size=0, max_size=6),
)
PORT = st.one_of(st.just(""), st.integers(0, 70000).map(lambda p: f":{p}"), st.just(":x"))
SEGMENT = st.text(
    st.characters(blacklist_categories=("Cs",), max_codepoint=0x44F), min_size=0, max_size=6
)
ESCAPED = st.tuples(SEGMENT, st.booleans()).map(lambda t: quote(t[0], safe="") if t[1] else t[0])
QUERY = st.sampled_from(["", "?notify=trusted", "?notify=hints", "?x=1", "?notify=no"])


@st.composite
def host_lines(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["smb", "smb", "SMB", "file", "file", "http", ""]))
    if scheme.lower() == "file":
        host = draw(st.sampled_from(["", "", "localhost", "nas"]))
        path = "/".join(draw(st.lists(ESCAPED, min_size=0, max_size=3)))
        return f"{scheme}://{host}/{path}{draw(QUERY)}"
    user = draw(st.sampled_from(["", "", "ann@", "a:pw@"]))
    shares = draw(st.lists(ESCAPED, max_size=2))
    path = "".join("/" + s for s in shares)
    return f"{scheme}://{user}{draw(HOSTNAME)}{draw(PORT)}{path}{draw(QUERY)}"


@st.composite
def hosts_files(draw: st.DrawFn, lines: st.SearchStrategy[str]) -> bytes:
    chosen = draw(st.lists(st.one_of(lines, st.just("# note"), st.just("")), max_size=4))
    text = draw(st.sampled_from(["\n", "\r\n"])).join(chosen)
    return (b"\xef\xbb\xbf" if draw(st.booleans()) else b"") + text.encode("utf-8", "replace")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts_files(host_lines()))
def test_every_hosts_file_is_refused_at_once_or_read_back_as_itself(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        lan = LAN(Path(folder))
        lan.hosts_file.write_bytes(data)
        try:
            hosts = read_hosts_file(lan.hosts_file)
        except ConfigError:
            assert lan.cli("crawl") == 2
            assert not lan.crawl_dir.exists()
            return
    for h in hosts:
        again = parse_host_url(h.line_url)
        assert replace(again, notify_trusted=h.notify_trusted) == h, h.line_url
        assert parse_host_url(h.url).host == h.host
        if h.scheme == "smb":  # an IPv6 address, and only that, in brackets
            assert ("[" in h.url) == (":" in h.hostname), h.url


# -- property: crawled in full ---------------------------------------------------------------

FOLDER = st.text("aяz %#?;&=+ü", min_size=1, max_size=6).filter(lambda s: s.strip(" ") == s)


@st.composite
def crawlable_lines(draw: st.DrawFn, ports: dict[str, int], root: Path) -> str:
    """A line naming one of the test servers' media share, or a folder under `root`."""
    if draw(st.booleans()):
        folder = root / draw(FOLDER)
        return "file://" + quote(str(folder), safe="/" if draw(st.booleans()) else "/ я")
    address = draw(st.sampled_from(sorted(ports)))
    name = f"[{address}]" if ":" in address else address
    share = draw(st.sampled_from(["media", "%6Dedia"]))
    return f"smb://{name}:{ports[address]}/{share}"


def test_every_accepted_hosts_file_is_crawled_in_full(servers, capsys) -> None:
    ports = {a: s.port for a, s in servers.items()}
    if "127.0.0.1" in servers:
        ports["::ffff:127.0.0.1"] = servers["127.0.0.1"].port

    crawled: list[int] = []

    @settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def crawl(data: st.DataObject) -> None:
        with tempfile.TemporaryDirectory() as folder:
            lan = LAN(Path(folder))
            lines = data.draw(
                st.lists(crawlable_lines(ports, lan.hosts_dir), min_size=1, max_size=4)
            )
            lan.hosts_file.write_text("\n".join(lines))
            try:
                hosts = read_hosts_file(lan.hosts_file)
            except ConfigError:
                return  # two lines naming one host differently: refused, as the other test checks
            for h in hosts:
                if h.scheme == "file":
                    (Path(h.hostname) / "share").mkdir(parents=True, exist_ok=True)
                    (Path(h.hostname) / "share" / "x.txt").write_text("x")
            lan.crawl()
            crawled.append(len(hosts))
            expected = {h.host: ("ok", 1 if h.scheme == "file" else SMB_FILES) for h in hosts}
            assert host_counts(lan, capsys) == expected

    crawl()
    assert crawled, "no generated hosts file was crawled"
