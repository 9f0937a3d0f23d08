"""Crawl filters: rule matching, the rules file's errors, automatic rules from prefix
statistics (a source tree goes, no media goes), disabled rules, the last good rules."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sharecrawl.crawl_io.connect import open_source
from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.crawl_io.schema import PREFIX_STATS
from sharecrawl.crawl_io.sources import ConfigError, Source, parse_host_url
from sharecrawl.jobs.crawl_rules import (
    Rules,
    auto_rule,
    auto_rule_id,
    auto_rules,
    filtered,
    glob_to_regex,
    load_rules,
    parse_rule,
    parse_rules,
)
from sharecrawl.jobs.membership import Ranges, share_root
from sharecrawl.jobs.mr_prefix_stats import host_parts, run_prefix_stats
from sharecrawl.jobs.walk import walk_partition
from sharecrawl.pipeline.rules_store import RulesStore
from tests.conftest import LAN


def rules(text: str) -> Rules:
    return Rules(tuple(parse_rules(text, "test.rules")))


# -- matching ------------------------------------------------------------------------------
def test_globs_on_paths_and_names() -> None:
    r = rules(
        """
        # comments and blank lines are skipped

        exclude path=**/node_modules/**
        exclude path=Thumbs.db
        exclude path=**/.git
        exclude path=tmp/*.part
        """
    )
    f = r.for_share("pc-1", "docs")
    assert f.excludes_folder("node_modules")
    assert f.excludes_folder("src/app/node_modules")
    assert not f.excludes_folder("src/node_modules_backup")
    assert f.excludes_file("a/Thumbs.db") and f.excludes_file("Thumbs.db")
    assert not f.excludes_file("a/Thumbs.db.mp3")
    assert f.excludes_folder(".git") and f.excludes_folder("x/y/.git")
    assert f.excludes_file("tmp/a.part") and not f.excludes_file("tmp/sub/a.part")
    assert not f.excludes_file("music/song.mp3") and not f.excludes_folder("music")


def test_first_matching_rule_decides() -> None:
    r = rules(
        """
        include host=lab-3 path=Music/**
        exclude host=lab-* path=**
        """
    )
    assert not r.for_share("LAB-3", "share").excludes_folder("Music")  # hosts ignore case
    assert not r.for_share("lab-3", "share").excludes_file("Music/a/b.mp3")
    assert r.for_share("lab-3", "share").excludes_folder("Video")
    assert r.for_share("lab-4", "share").excludes_folder("Music")
    assert not r.for_share("pc-1", "share").excludes_folder("Music")


def test_keys_kinds_and_extensions() -> None:
    r = rules(
        """
        exclude host='re:^pc-\\d+$' path=prefix:Windows/
        exclude share=exact:C$ path=**
        exclude ext=iso,.EXE
        exclude ipath='program files' type=dir
        exclude path=*.tmp type=file
        """
    )
    pc1 = r.for_share("pc-12", "d")
    assert pc1.excludes_folder("Windows") and pc1.excludes_file("Windows/x/y.dll")
    assert not pc1.excludes_folder("Windows.old")
    assert not r.for_share("pc-x", "d").excludes_folder("Windows")
    assert r.for_share("any", "c$").excludes_folder("Users")
    hs = r.for_share("h", "s")
    assert hs.excludes_file("a/disk.ISO") and hs.excludes_file("setup.exe")
    assert not hs.excludes_folder("photos.iso")  # extensions are for files
    assert hs.excludes_folder("Program Files") and hs.excludes_folder("x/PROGRAM FILES")
    assert not hs.excludes_file("Program Files")  # type=dir
    assert hs.excludes_file("a/b.tmp") and not hs.excludes_folder("a/b.tmp")


def test_hostile_and_unicode_names() -> None:
    r = rules(
        """
        exclude path='**/[[]old] (copy)/**'
        exclude path="**/#recycle"
        exclude path='Музыка/Временное/**'
        exclude path="it's*"
        exclude path='re:\\.(bak|~)$'
        """
    )
    f = r.for_share("h", "s")
    assert f.excludes_folder("a/[old] (copy)") and not f.excludes_folder("a/o (copy)")
    assert f.excludes_folder("#recycle") and f.excludes_folder("vol/#recycle")
    assert f.excludes_folder("Музыка/Временное") and not f.excludes_folder("Музыка")
    assert f.excludes_file("it's here.txt")
    assert f.excludes_file("x/file.bak") and not f.excludes_file("x/file.bak.mp3")
    # metacharacters in names are plain characters when no rule names them
    for name in ["a*b", "(x)", "$HOME", "back\\slash", "new\nline", "100%", "🎵.mp3", "a\tb"]:
        assert not f.excludes_file(name) and not f.excludes_folder(name)


def test_names_compare_composed() -> None:
    """macOS shares list names decomposed (NFD); rules are typed composed (NFC)."""
    composed, decomposed = "Música", "Mu\u0301sica"
    r = rules(
        f"""
        exclude path={composed}/Tmp/**
        exclude path=exact:{composed}/Old type=dir
        exclude ipath='re:^CAFÉ' type=file
        exclude share={composed}
        """
    )
    f = r.for_share("h", "s")
    assert f.excludes_folder(f"{decomposed}/Tmp/x") and f.excludes_folder(f"{composed}/Tmp/x")
    assert f.excludes_folder(f"{decomposed}/Old") and not f.excludes_folder(f"{decomposed}/New")
    assert f.excludes_file("cafe\u0301 noir.txt") and not f.excludes_file("cafe noir.txt")
    assert r.excludes_share("h", decomposed) and not r.excludes_share("h", "Musica")


@pytest.mark.parametrize(
    ("glob", "path", "matches"),
    [
        ("*", "a", True),
        ("*", "a/b", False),
        ("**", "a/b", True),
        ("a/**", "a", False),
        ("a/**", "a/", True),
        ("**/b", "b", True),
        ("**/b", "x/y/b", True),
        ("a?c", "abc", True),
        ("a?c", "a/c", False),
        ("[!x]y", "zy", True),
        ("[!x]y", "/y", False),
        ("[]]", "]", True),
        ("[a-c]", "b", True),
        ("[", "[", True),
        ("a.b", "axb", False),
        ("x\ny", "x\ny", True),
    ],
)
def test_glob_translation(glob: str, path: str, matches: bool) -> None:
    import re

    assert (re.fullmatch(glob_to_regex(glob), path, re.DOTALL) is not None) is matches


names = st.text(
    st.characters(blacklist_characters="/", blacklist_categories=("Cs",)), min_size=1, max_size=6
)
paths = st.lists(names, min_size=1, max_size=4).map("/".join)


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=6), st.text(min_size=1, max_size=6), paths, paths)
def test_auto_rule_survives_its_text(host: str, share: str, path: str, other: str) -> None:
    """Any folder name, control characters included, round-trips through the rules file
    and excludes exactly that folder."""
    rule = auto_rule(host, share, path)
    assert "\n" not in rule.line()
    parsed = parse_rule(rule.line(), "x:1")
    assert parsed is not None and parsed.id == rule.id
    assert parsed == rule or "pct:" in parsed.line()  # control characters are %-encoded
    r = Rules((parsed,))
    assert r.for_share(host, share).excludes_folder(path)
    assert r.for_share(host, share).excludes_folder(other) is (other == path)
    assert not r.for_share(host, share).excludes_file(path)


# -- malformed files -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("exclde path=x", "starts with include or exclude"),
        ("exclude path", "expected key=pattern"),
        ("exclude colour=red", "unknown key 'colour'"),
        ("exclude path=", "empty pattern"),
        ("exclude path=a path=b", "given twice"),
        ("exclude path='unclosed", "No closing quotation"),
        ("exclude path=re:(", "bad regular expression"),
        ("exclude type=link path=x", "type is dir or file"),
        ("exclude", "needs a condition"),
        ("exclude id=x", "needs a condition"),
        ("exclude ext=iso,,exe", "empty extension"),
    ],
)
def test_malformed_rule_names_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "crawl.rules"
    path.write_text(f"# ok\nexclude path=ok\n{line}\n")
    with pytest.raises(ConfigError) as e:
        load_rules(path)
    assert f"{path}:3: " in str(e.value) and message in str(e.value)


def test_unreadable_rules_file(tmp_path: Path) -> None:
    path = tmp_path / "crawl.rules"
    path.write_bytes(b"exclude path=\xff\xfe\n")
    with pytest.raises(ConfigError, match="cannot read rules"):
        load_rules(path)
    assert not load_rules(tmp_path / "absent.rules")  # no file: no rules


def test_malformed_file_keeps_previous_rules(tmp_path: Path) -> None:
    operator = tmp_path / "crawl.rules"
    store = RulesStore(tmp_path / "crawl", operator)
    operator.write_text("exclude path=cache\n")
    current = store.current()
    assert current.error is None and current.rules.for_share("h", "s").excludes_folder("cache")

    operator.write_text("exclude path=cache\nexclude path=tmp\nexclude pth=oops\n")  # a typo
    current = store.current()
    assert current.error is not None
    assert f"{operator}:3: unknown key 'pth'" in current.error
    assert "previous rules stay in force" in current.error
    assert current.rules.for_share("h", "s").excludes_folder("cache")  # still in force
    # the new file is not half-taken
    assert not current.rules.for_share("h", "s").excludes_folder("tmp")

    # a new store (another round, another process) still finds the last good rules
    again = RulesStore(tmp_path / "crawl", operator).current()
    assert again.error and again.rules.for_share("h", "s").excludes_folder("cache")

    operator.write_text("exclude path=tmp\n")  # fixed: read again, no restart
    current = store.current()
    assert current.error is None
    assert current.rules.for_share("h", "s").excludes_folder("tmp")
    assert not current.rules.for_share("h", "s").excludes_folder("cache")


def test_malformed_first_file_gives_no_rules_and_the_error(tmp_path: Path) -> None:
    operator = tmp_path / "crawl.rules"
    operator.write_text("exclude\n")
    current = RulesStore(tmp_path / "crawl", operator).current()
    assert not current.rules and "crawl.rules:1" in (current.error or "")


# -- automatic rules -----------------------------------------------------------------------
def stats(*rows: tuple[str, str, str, int, int, int]) -> pa.Table:
    """(host, share, prefix, n_files, n_folders, n_media) rows."""
    return pa.Table.from_pylist(
        [
            {
                "host": h,
                "share": s,
                "prefix": p,
                "depth": len(p.split("/")) if p else 0,
                "n_files": f,
                "n_folders": d,
                "n_media": m,
            }
            for h, s, p, f, d, m in rows
        ],
        PREFIX_STATS,
    )


def test_auto_rules_take_topmost_media_free_folders() -> None:
    table = stats(
        ("pc", "d", "", 5000, 300, 40),
        ("pc", "d", "src", 4000, 200, 0),
        ("pc", "d", "src/lib", 3000, 100, 0),  # under src: covered by its rule
        ("pc", "d", "music", 900, 20, 40),
        ("pc", "d", "small", 10, 1, 0),  # too few entries
        ("pc", "e", "src", 4000, 200, 1),  # one media file: kept
    )
    found = auto_rules(table, min_entries=1000)
    assert [r.id for r in found] == [auto_rule_id("pc", "d", "src")]
    assert found[0].action == "exclude"
    lenient = auto_rules(table, min_entries=1000, max_media_share=0.01)
    assert {r.id for r in lenient} == {
        auto_rule_id("pc", "d", "src"),
        auto_rule_id("pc", "e", "src"),
    }
    assert auto_rules(table, min_entries=1000, min_host_media=100) == []


def test_disabled_rule_stays_disabled(tmp_path: Path) -> None:
    crawl = tmp_path / "crawl"
    store = RulesStore(crawl, None)
    table = stats(
        ("pc", "d", "", 9000, 10, 5),
        ("pc", "d", "src", 5000, 5, 0),
        ("pc", "d", "cache", 3000, 5, 0),
    )
    generated = store.regenerate_auto(table, min_entries=1000)
    assert len(generated) == 2
    src = auto_rule_id("pc", "d", "src")
    assert store.current().rules.for_share("pc", "d").excludes_folder("src")

    store.disabled_path.write_text(f"{src}   # my project lives there\n")
    assert not store.current().rules.for_share("pc", "d").excludes_folder("src")
    for _ in range(3):  # the statistics still qualify it, round after round
        regenerated = store.regenerate_auto(table, min_entries=1000)
        assert src not in {r.id for r in regenerated}
        assert src not in store.auto_path.read_text()
        assert not store.current().rules.for_share("pc", "d").excludes_folder("src")
    # a rule stays even once its folder has left the statistics (it is excluded)
    store.regenerate_auto(stats(("pc", "d", "", 1000, 10, 5)), min_entries=1000)
    assert store.current().rules.for_share("pc", "d").excludes_folder("cache")


def test_operator_include_overrides_auto_rule(tmp_path: Path) -> None:
    operator = tmp_path / "crawl.rules"
    operator.write_text("include host=pc path=src/** type=dir\n")
    store = RulesStore(tmp_path / "crawl", operator)
    store.regenerate_auto(stats(("pc", "d", "src", 5000, 5, 0)), min_entries=1000)
    assert not store.current().rules.for_share("pc", "d").excludes_folder("src")


@pytest.mark.slow
def test_generated_rule_removes_source_tree_and_no_media(lan: LAN, tmp_path: Path) -> None:
    """A share with media and a 10 000-file source tree: statistics from a crawl generate a
    rule that drops the whole tree (rows and walk) and not one media file."""
    root = lan.host("pc-1") / "docs"
    for album in ("Abba/Gold", "Queen/Greatest Hits"):
        for i in range(3):
            lan.media("pc-1", f"docs/music/{album}/{i:02d}.mp3", artist=album, title=str(i))
    lan.media("pc-1", "docs/intro.mp3")
    src = root / "projects" / "engine"
    for i in range(10_000):  # 100 folders of 100 small source files, no media
        folder = src / f"mod{i // 100:03d}"
        if i % 100 == 0:
            folder.mkdir(parents=True)
        (folder / f"f{i:05d}.c").write_text("int x;\n")
    lan.write_hosts("pc-1")
    lan.crawl()

    crawl = CrawlDir(lan.crawl_dir)
    vdir = crawl.version_dir(crawl.current())
    prefix_stats = run_prefix_stats(
        host_parts(vdir, None, ["pc-1"]), "inline", 3, 1, tmp_path / "work"
    )
    store = RulesStore(crawl.root, None)
    generated = store.regenerate_auto(prefix_stats, min_entries=1000)
    assert [r.line() for r in generated] == [
        auto_rule("pc-1", "docs", "projects").line()
    ]  # the topmost media-free folder
    current = store.current().rules

    files = crawl.read_host(crawl.current(), "files", "pc-1")
    media = crawl.read_host(crawl.current(), "media", "pc-1")
    kept = current.drop_excluded(files)
    gone = files.filter(pc.invert(pc.is_in(files["path"], kept["path"])))
    assert sum(not d for d in gone["is_dir"].to_pylist()) == 10_000
    assert all(p.startswith("projects") for p in gone["path"].to_pylist())
    assert current.drop_excluded(media).num_rows == media.num_rows == 7

    # the walk over the filtered source, as the fetcher runs it: the tree is never listed
    source = CountingSource(open_source(parse_host_url(f"file://{lan.host('pc-1')}")))
    walked = list(
        walk_partition(filtered(source, current, "pc-1"), share_root("pc-1", "docs"), Ranges([]))
    )
    assert not any(path.startswith("projects") for path, _ in walked)
    assert not any(path.startswith("projects") for path in source.listed)
    assert sum(path.endswith(".mp3") for path, _ in walked) == 7


class CountingSource:
    """A source that records which folders were listed."""

    def __init__(self, source: Source) -> None:
        self.source, self.host, self.listed = source, source.host, []

    def shares(self) -> list[str]:
        return self.source.shares()

    def listdir(self, share: str, path: str) -> list:
        self.listed.append(path)
        return self.source.listdir(share, path)

    def read(self, share: str, path: str, offset: int, length: int) -> bytes:
        return self.source.read(share, path, offset, length)

    def close(self) -> None:
        self.source.close()


def test_filtered_source_hides_shares_and_partition_roots(tmp_path: Path) -> None:
    for folder in ("pc/docs/a/b", "pc/c$/Windows", "pc/music/cache/x"):
        (tmp_path / folder).mkdir(parents=True)
    source = open_source(parse_host_url(f"file://{tmp_path / 'pc'}"))
    r = rules("exclude share=c$\nexclude path=cache\n")
    view = filtered(source, r, "pc")
    assert sorted(view.shares()) == ["docs", "music"]
    assert view.listdir("c$", "") == []
    assert [e.name for e in view.listdir("music", "")] == []
    assert view.listdir("music", "cache") == []  # a partition rooted in an excluded folder
    assert view.listdir("music", "cache/x") == []
    assert [e.name for e in view.listdir("docs", "a")] == ["b"]
    assert filtered(source, Rules(), "pc") is source
