"""The search index's update: after any series of rounds, an index brought forward version
by version by queries.index.update_index answers every query as an index built from
scratch does, and holds the same works, copies and vocabulary."""

from __future__ import annotations

import os
import random
import zlib
from datetime import timedelta
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sharecrawl.crawl_io import schema
from sharecrawl.crawl_io.crawldb.host_parts import changed_parts, part_file
from sharecrawl.crawl_io.crawldb.version_manifest import read_manifest, write_manifest
from sharecrawl.queries import text
from sharecrawl.queries.index import build_index, update_index
from sharecrawl.queries.index_store import index_meta
from sharecrawl.queries.search import search
from tests.test_search import NOW, media

HOSTS = ["alpha", "beta", "gamma", "delta"]
ARTISTS = [
    "Metallica",
    "Metalica",
    "Madonna",
    "Björk",
    "B.O.S.E.",
    "Мумий Тролль",
    "Beyoncé",
    "Andrew Lloyd Webber",
    None,
]
TITLES = [
    "One",
    "Battery",
    "Frozen",
    "Hyperballad",
    "Army of Me",
    "Spider-Man",
    "Утекай",
    "Music of the Night",
    "Halo",
    None,
]
SERIES = ["Lost", "Friends"]
FOLDERS = ["Music", "Music/Rock", "Music/Pop", "Backup/Old", "Музыка", "Incoming"]
FORMATS = ["mp3", "flac", "ogg"]


class Lan:
    """The media of a small LAN as rounds see it: path -> row, and hosts online or not."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.rows: dict[tuple[str, str], dict] = {}
        self.online = {host: True for host in HOSTS}
        self.serial = 0
        for _ in range(60):
            self.add()

    def new_row(self, host: str) -> dict:
        rng = self.rng
        self.serial += 1
        if rng.random() < 0.15:  # an episode, named as a crawler names it
            series, season, episode = rng.choice(SERIES), rng.randint(1, 3), rng.randint(1, 4)
            path = f"Video/{series}/{series}.S{season:02d}E{episode:02d}.{self.serial}.mkv"
            return media(
                host,
                path,
                series=series,
                season=season,
                episode=episode,
                size=rng.randint(1, 9) * 10**8,
            )
        folder = self.rng.choice(FOLDERS)
        fmt = rng.choice(FORMATS)
        if rng.random() < 0.15:  # an untagged generic name: grouped by its folder
            return media(host, f"{folder}/CD{self.serial % 3}/track0{self.serial % 4}.{fmt}")
        artist, title = rng.choice(ARTISTS), rng.choice(TITLES)
        name = f"{artist or 'Unknown'} - {title or self.serial}.{fmt}"
        return media(
            host,
            f"{folder}/{name}",
            artist=artist,
            title=title,
            album=rng.choice([None, "Best of", "Live"]),
            year=rng.choice([None, 1986, 1998, 2000, 2005]),
            bitrate_kbps=rng.choice([128, 192, 320, 900]),
            size=rng.randint(1, 50) * 10**6,
        )

    def add(self) -> None:
        row = self.new_row(self.rng.choice(HOSTS))
        self.rows[(row["host"], row["path"])] = row

    def delete(self) -> None:
        if self.rows:
            del self.rows[self.rng.choice(sorted(self.rows))]

    def retag(self) -> None:
        if not self.rows:
            return
        row = self.rows[self.rng.choice(sorted(self.rows))]
        field = self.rng.choice(["artist", "title", "year", "bitrate_kbps", "size", "album"])
        pools = {
            "artist": ARTISTS,
            "title": TITLES,
            "year": [None, 1999, 2005],
            "bitrate_kbps": [96, 256, 1000],
            "size": [1, 2, 3],
            "album": ["Live", None],
        }
        row[field] = self.rng.choice(pools[field])

    def move(self) -> None:
        if not self.rows:
            return
        key = self.rng.choice(sorted(self.rows))
        row = self.rows.pop(key)
        row["path"] = f"{self.rng.choice(FOLDERS)}/moved {self.serial}/{row['path'].split('/')[-1]}"
        self.serial += 1
        self.rows[(row["host"], row["path"])] = row

    def copy(self) -> None:  # the same work turns up on another host
        if not self.rows:
            return
        row = dict(self.rows[self.rng.choice(sorted(self.rows))])
        row["host"] = self.rng.choice(HOSTS)
        self.rows[(row["host"], row["path"])] = row

    def switch_host(self) -> None:
        host = self.rng.choice(HOSTS)
        self.online[host] = not self.online[host]

    def round(self) -> None:
        """A round's worth of changes: a few of each kind, at random."""
        changes = [self.add, self.delete, self.retag, self.move, self.copy, self.switch_host]
        for _ in range(self.rng.randint(1, 8)):
            self.rng.choice(changes)()

    def parts(self) -> dict[str, list[dict]]:
        """Part name -> its rows, as a round stores them: per host and group of partitions
        (here a top folder's group, fixed by its name)."""
        out: dict[str, list[dict]] = {}
        for (host, path), row in sorted(self.rows.items()):
            group = zlib.crc32(path.split("/")[0].encode()) % 5
            out.setdefault(part_file(host, group), []).append(row)
        return out


def write_version(
    crawldb: Path, number: int, lan: Lan, previous: Path | None, manifest: bool
) -> Path:
    """Version `number` of the LAN: a part whose rows did not change is a hard link to the
    previous version's, as Publish makes it."""
    version = crawldb / f"v{number:06d}"
    (version / "media").mkdir(parents=True)
    hosts = [
        {n: None for n in schema.HOSTS.names} | {"host": h, "url": f"smb://{h}", "online": on}
        for h, on in lan.online.items()
    ]
    pq.write_table(pa.Table.from_pylist(hosts, schema.HOSTS), version / "hosts.parquet")
    for name, rows in lan.parts().items():
        target = version / "media" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_pylist(rows, schema.MEDIA)
        old = previous / "media" / name if previous else None
        if old is not None and old.exists() and pq.read_table(old).equals(table):
            os.link(old, target)
        else:
            pq.write_table(table, target)
    if manifest:
        write_manifest(version, {})
    return version


def queries(lan: Lan) -> list[str]:
    """Words of every name, typos, fields and filters: some hundreds of queries."""
    found: set[str] = {
        "metalica",
        "metallica",
        "bose",
        "b.o.s.e",
        "spiderman",
        "spider man",
        "beyonce",
        "bjork",
        "мадонна",
        "madona",
        "lost",
        "friends",
        "track",
        "kind:video",
        "kind:audio lost",
        "year:1990..2000",
        "year:2005",
        "format:flac",
        "host:beta",
        "host:alpha music",
        "season:2 lost",
        "artist:madonna",
        "title:frozen year:..2000",
        "music night",
    }
    for row in lan.rows.values():
        for value in (row["artist"], row["title"], row["series"]):
            if value:
                found.add(value)
                found.add(value[1:] if len(value) > 5 else value)  # a typo: first letter lost
        found.add(row["path"].split("/")[-1].rsplit(".", 1)[0])
    return sorted(found)


def answers(index: Path, query_list: list[str]) -> list[list[dict]]:
    return [
        search(index, q, limit=30, all_hosts=all_hosts, latest=latest)
        for q in query_list
        for all_hosts, latest in ((False, False), (True, False), (True, True))
    ]


def table_rows(index: Path) -> dict[str, list[tuple]]:
    """What the two indexes must hold alike (term ids may differ: compared by term)."""
    with duckdb.connect(str(index), read_only=True) as con:
        return {
            "works": con.execute("SELECT * FROM works ORDER BY work_id").fetchall(),
            "copies": con.execute("SELECT * FROM copies ORDER BY host, share, path").fetchall(),
            "terms": con.execute("SELECT term, df FROM terms ORDER BY term").fetchall(),
            "postings": con.execute(
                "SELECT t.term, p.work_id, p.weight, p.fields FROM postings p "
                "JOIN terms t USING (term_id) ORDER BY ALL"
            ).fetchall(),
            "keys": con.execute(
                "SELECT k.key, t.term FROM term_keys k JOIN terms t USING (term_id) ORDER BY ALL"
            ).fetchall(),
            "hosts": con.execute("SELECT * FROM hosts ORDER BY host").fetchall(),
        }


def word_rows(index: Path) -> dict[str, tuple]:
    """The `words` table: word -> its forms, whether indexable and generic."""
    with duckdb.connect(str(index), read_only=True) as con:
        rows = con.execute("SELECT word, surface, forms, indexable, generic FROM words")
        return {r[0]: r[1:] for r in rows.fetchall()}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_updates_give_what_a_full_build_gives(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    lan = Lan(rng)
    crawldb = tmp_path / "crawldb"
    manifest = seed != 2  # one series of versions without manifests: parts told by inode
    previous = write_version(crawldb, 1, lan, None, manifest)
    updated = tmp_path / "updated.duckdb"
    build_index(previous, updated)
    compared = 0
    for number in range(2, 8):
        lan.round()
        version = write_version(crawldb, number, lan, previous, manifest)
        assert (read_manifest(version) is not None) is manifest
        diff = changed_parts(previous, version, "media")
        counts = update_index(updated, previous, version)
        assert counts.parts == len(diff.removed) + len(diff.added)
        full = tmp_path / f"full-{number}.duckdb"
        build_index(version, full)
        assert index_meta(updated)["version"] == version.name
        assert index_meta(updated)["full_version"] == "v000001"
        assert table_rows(updated) == table_rows(full), f"round {number}"
        # the words the update kept (it may keep more: words of strings gone) are the build's
        known, fresh = word_rows(updated), word_rows(full)
        assert {w: known.get(w) for w in fresh} == fresh, f"round {number}"
        query_list = queries(lan)
        assert answers(updated, query_list) == answers(full, query_list), f"round {number}"
        compared += len(query_list)
        previous = version
    assert compared >= 300
    # the comparison can fail: the rows were found, and do differ from an older version's
    assert any(answers(updated, ["metallica", "madonna", "lost"]))
    assert table_rows(updated) != table_rows(tmp_path / "full-2.duckdb")


def test_an_unchanged_version_reads_no_part_and_changes_nothing(tmp_path: Path) -> None:
    lan = Lan(random.Random(7))
    first = write_version(tmp_path / "crawldb", 1, lan, None, True)
    second = write_version(tmp_path / "crawldb", 2, lan, first, True)
    index = tmp_path / "search.duckdb"
    build_index(first, index)
    before, meta = table_rows(index), index_meta(index)
    counts = update_index(index, first, second)
    assert (counts.parts, counts.paths, counts.rows_new, counts.works) == (0, 0, 0, 0)
    assert table_rows(index) == before
    relabelled = index_meta(index)
    assert relabelled["version"] == "v000002" and relabelled["built_at"] == meta["built_at"]


def test_one_changed_part_is_all_that_is_read(tmp_path: Path) -> None:
    lan = Lan(random.Random(8))
    first = write_version(tmp_path / "crawldb", 1, lan, None, True)
    row = next(r for r in lan.rows.values() if r["artist"])
    row["title"] = "A Title Nobody Had"
    second = write_version(tmp_path / "crawldb", 2, lan, first, True)
    diff = changed_parts(first, second, "media")
    assert len(diff.removed) == len(diff.added) == 1 and diff.added[0].name == diff.removed[0].name
    index = tmp_path / "search.duckdb"
    build_index(first, index)
    counts = update_index(index, first, second)
    assert (counts.parts, counts.paths, counts.rows_new) == (2, 1, 1)
    assert [r["title"] for r in search(index, "nobody had", all_hosts=True)] == [
        "A Title Nobody Had"
    ]


def test_a_host_switching_off_line_regroups_its_works_and_posts_nothing(tmp_path: Path) -> None:
    lan = Lan(random.Random(9))
    first = write_version(tmp_path / "crawldb", 1, lan, None, True)
    host = next(h for h in HOSTS if any(k[0] == h for k in lan.rows))
    lan.online[host] = False
    second = write_version(tmp_path / "crawldb", 2, lan, first, True)
    index = tmp_path / "search.duckdb"
    build_index(first, index)
    with duckdb.connect(str(index), read_only=True) as con:
        (on_host,) = con.execute(
            "SELECT count(DISTINCT work_id) FROM copies WHERE host = ?", [host]
        ).fetchone()
    before = table_rows(index)
    counts = update_index(index, first, second)
    # the works with a copy there are grouped anew (their online counts and best copy may
    # change); none is posted anew: a posting does not depend on whether a copy is online
    assert (counts.hosts_switched, counts.works, counts.works_relabelled) == (1, 0, on_host)
    assert on_host > 0
    after = table_rows(index)
    assert after["postings"] == before["postings"] and after["works"] != before["works"]
    full = tmp_path / "full.duckdb"
    build_index(second, full)
    assert after == table_rows(full)
    found = [r for q in ("track", "music", "video") for r in search(index, q)]
    assert found and all(r["best"]["host"] != host for r in found)


def test_an_update_stems_only_words_it_has_not_met(tmp_path: Path) -> None:
    lan = Lan(random.Random(10))
    first = write_version(tmp_path / "crawldb", 1, lan, None, True)
    index = tmp_path / "search.duckdb"
    build_index(first, index)
    # The forms of a word met before are read from `words`, not computed again: a forged
    # form of "frozen" reaches the new string that holds it; "Zwiebelkuchen" is new.
    with duckdb.connect(str(index)) as con:
        con.execute("UPDATE words SET forms = ['forged'] WHERE word = 'frozen'")
    row = next(r for r in lan.rows.values() if r["artist"])
    row["title"] = "Frozen Zwiebelkuchen"
    second = write_version(tmp_path / "crawldb", 2, lan, first, True)
    update_index(index, first, second)
    with duckdb.connect(str(index), read_only=True) as con:
        (terms,) = con.execute(
            "SELECT terms FROM strings WHERE v = 'Frozen Zwiebelkuchen'"
        ).fetchone()
    assert "forged" in terms and "frozen" not in terms
    assert word_rows(index)["zwiebelkuchen"][1] == list(text.word_forms("zwiebelkuchen"))


def test_hosts_switching_round_after_round_relabel_their_works_as_a_full_build(
    tmp_path: Path,
) -> None:
    """Works with copies on many hosts, hosts going on and off line: a work's best copy
    moves onto a host that came back, off one that left, or stays; its online counts move;
    and the untagged works take their title from their best copy's name."""
    rng = random.Random(12)
    lan = Lan(rng)
    for _ in range(40):
        lan.copy()
    for row in rng.sample(sorted(lan.rows.values(), key=lambda r: (r["host"], r["path"])), 10):
        # untagged, named by the best copy: a twin elsewhere, its name in capitals, bigger
        row["title"] = None
        twin = row | {"host": rng.choice(HOSTS), "path": row["path"].upper()}
        twin["size"] = (row["size"] or 0) + 1
        lan.rows[(twin["host"], twin["path"])] = twin
    crawldb = tmp_path / "crawldb"
    previous = write_version(crawldb, 1, lan, None, True)
    index = tmp_path / "search.duckdb"
    build_index(previous, index)
    seen = {"onto": 0, "off": 0, "kept": 0}
    for number in range(2, 10):
        before = table_rows(index)["works"]
        was_online = dict(lan.online)
        for _ in range(rng.randint(1, 2)):
            lan.switch_host()
        version = write_version(crawldb, number, lan, previous, True)
        update_index(index, previous, version)
        full = tmp_path / f"full-{number}.duckdb"
        build_index(version, full)
        after = table_rows(index)
        assert after == table_rows(full), f"round {number}"
        switched = {h for h in HOSTS if lan.online[h] != was_online[h]}
        old = {w[0]: w for w in before}  # work_id -> row; [12] online copies, [14] best host
        for w in after["works"]:
            was = old.get(w[0])
            if was is None or w[12] == was[12]:
                continue  # not relabelled
            if was[14] in switched and not lan.online[was[14]]:
                seen["off"] += 1
            elif w[14] != was[14]:
                seen["onto"] += 1
            else:
                seen["kept"] += 1
        previous = version
    assert all(seen.values()), seen


def test_a_popular_work_changing_round_after_round_is_what_a_full_build_makes(
    tmp_path: Path,
) -> None:
    """One work of several copies, round after round: its most common album tied after a
    delete (the greatest wins), a lossless copy on a host that came back becoming its best
    copy, its best copy's host going off line, its newest copy deleted and a newer one
    added elsewhere."""
    lan = Lan(random.Random(13))
    lan.rows.clear()
    lan.online = {"alpha": True, "beta": True, "gamma": False, "delta": True}

    def put(host: str, name: str, album: str, mtime: int, **tags: object) -> None:
        row = media(host, f"Music/{name}", artist="Madonna", title="Frozen", album=album)
        row.update(mtime=NOW - timedelta(days=mtime), **tags)
        lan.rows[(host, row["path"])] = row

    put("alpha", "a.mp3", "Best of", 9, year=1998)
    put("alpha", "b.mp3", "Best of", 8, year=1998)
    put("beta", "c.mp3", "Best of", 7, year=2005)
    put("beta", "d.mp3", "Live", 6)
    put("gamma", "e.flac", "Live", 5, year=2005)
    crawldb = tmp_path / "crawldb"
    previous = write_version(crawldb, 1, lan, None, True)
    index = tmp_path / "search.duckdb"
    build_index(previous, index)

    def tie_after_a_delete() -> None:  # Best of 3 : Live 2, then 2 : 2
        del lan.rows[("alpha", "Music/b.mp3")]

    def lossless_copy_back() -> None:
        lan.online["gamma"] = True
        put("delta", "f.mp3", "Live", 4)

    def best_copy_off_line() -> None:
        lan.online["gamma"] = False
        put("delta", "g.mp3", "Live", 3)

    def newest_copy_replaced() -> None:
        del lan.rows[("delta", "Music/g.mp3")]
        put("beta", "h.mp3", "Live", 1, year=2005)

    rounds = [
        (tie_after_a_delete, "alpha", "Live"),
        (lossless_copy_back, "gamma", "Live"),
        (best_copy_off_line, "alpha", "Live"),
        (newest_copy_replaced, "alpha", "Live"),
    ]
    for number, (change, best_host, album) in enumerate(rounds, start=2):
        change()
        version = write_version(crawldb, number, lan, previous, True)
        counts = update_index(index, previous, version)
        full = tmp_path / f"full-{number}.duckdb"
        build_index(version, full)
        assert table_rows(index) == table_rows(full), change.__name__
        assert counts.works == 1, change.__name__
        with duckdb.connect(str(index), read_only=True) as con:
            got = con.execute("SELECT best_host, album FROM works").fetchone()
        assert got == (best_host, album), change.__name__
        previous = version
