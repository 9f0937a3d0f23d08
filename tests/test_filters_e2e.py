"""Crawl rules in real rounds: an excluded subtree is not listed and its rows leave the
index; a malformed rules file is reported and the last good rules stay in force; automatic
rules come from the statistics and can be disabled for good."""

from __future__ import annotations

from tests.conftest import LAN


def build(lan: LAN) -> None:
    lan.media("alpha", "music/Kino/track01.mp3", artist="Kino", title="Kukushka")
    lan.media("alpha", "music/Temp/track02.mp3", artist="Aria", title="Bespechny angel")
    lan.media("beta", "share/song.ogg", "ogg", artist="Zemfira", title="Ariva")
    lan.write_hosts("alpha", "beta")


def crawl(lan: LAN, rules: str | None = None) -> None:
    rules_file = lan.root / "crawl.rules"
    if rules is not None:
        rules_file.write_text(rules)
    assert lan.cli("crawl", "--rules-file", str(rules_file)) == 0


def test_excluded_subtree_leaves_the_index_and_is_not_listed(lan: LAN, run_json) -> None:
    build(lan)
    crawl(lan, "")
    assert run_json(lan, "search", "aria")
    crawl(lan, "exclude host=alpha path=Temp\n")
    assert run_json(lan, "search", "aria") == []
    assert run_json(lan, "search", "kukushka")
    files = run_json(lan, "sql", "SELECT path FROM files WHERE host = 'alpha' ORDER BY path")
    assert [f["path"] for f in files] == ["Kino", "Kino/track01.mp3"]
    listing = run_json(
        lan, "sql", "SELECT sum(n_entries) AS n FROM fetchlog WHERE round = 2 AND host = 'alpha'"
    )
    assert listing[0]["n"] == 2  # Temp was not listed at all


def test_malformed_rules_keep_the_last_good_ones(lan: LAN, run_json, capsys) -> None:
    build(lan)
    crawl(lan, "exclude host=alpha path=Temp\n")
    capsys.readouterr()
    crawl(lan, "exclude host=alpha path=Temp\nexclude frobnicate=yes\n")
    said = capsys.readouterr().err.splitlines()
    assert any("crawl.rules:2" in w and "last good rules" in w for w in said), said
    assert run_json(lan, "search", "aria") == []  # still excluded
    assert run_json(lan, "status")["round"] == 2


def test_automatic_rule_removes_a_big_folder_without_media(lan: LAN, run_json, luigi_cfg) -> None:
    luigi_cfg("[sharecrawl]\nauto_rule_min_entries = 50\n")
    build(lan)
    src = lan.host("alpha") / "music" / "node_modules"
    for i in range(60):
        (src / f"pkg{i // 10}").mkdir(parents=True, exist_ok=True)
        (src / f"pkg{i // 10}" / f"f{i}.js").write_text("x")
    crawl(lan, "")
    auto = (lan.crawl_dir / "rules.auto").read_text()
    assert "node_modules" in auto
    crawl(lan)
    n = run_json(lan, "sql", "SELECT count(*) AS n FROM files WHERE path LIKE 'node_modules%'")
    assert n[0]["n"] == 0
    assert run_json(lan, "sql", "SELECT count(*) AS n FROM media")[0]["n"] == 3
    rule_id = next(w for line in auto.splitlines() for w in line.split() if "auto-" in w)
    (lan.crawl_dir / "rules.disabled").write_text(rule_id.split("=", 1)[-1] + "\n")
    crawl(lan)
    crawl(lan)
    n = run_json(lan, "sql", "SELECT count(*) AS n FROM files WHERE path LIKE 'node_modules%'")
    assert n[0]["n"] > 60  # disabled for good: crawled again, never regenerated
