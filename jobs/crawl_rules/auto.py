"""Automatic crawl rules from prefix statistics: folders that hold many entries and no media
cost listing time and can hold nothing to find (after the automatic filter generation of
"Optimising document collection with Nutch")."""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pyarrow.compute as pc

from sharecrawl.jobs.crawl_rules.parse import Rule


def auto_rule_id(host: str, share: str, prefix: str) -> str:
    """Stable: the same folder always gets the same id, so a disabled one stays disabled."""
    return "auto-" + hashlib.md5(f"{host}\0{share}\0{prefix}".encode()).hexdigest()[:12]


def auto_rule(host: str, share: str, prefix: str) -> Rule:
    conditions = (
        ("id", auto_rule_id(host, share, prefix)),
        ("host", "exact:" + host),
        ("share", "exact:" + share),
        ("path", "exact:" + prefix),
        ("type", "dir"),
    )
    return Rule("exclude", conditions)


def auto_rules(
    prefix_stats: pa.Table,
    *,
    min_entries: int = 1000,
    max_media_share: float = 0.0,
    min_host_media: int = 0,
) -> list[Rule]:
    """Exclusion rules for the topmost folders with at least `min_entries` entries below them and
    at most `max_media_share` of their files media, on hosts with at least `min_host_media` media
    (a threshold, as Nutch's filter generator waits for one). Share roots never get a rule."""
    stats = prefix_stats.select(["host", "share", "prefix", "n_files", "n_folders", "n_media"])
    roots = stats.filter(pc.equal(stats["prefix"], ""))
    host_media = {
        row["host"]: row["n_media_sum"]
        for row in roots.group_by("host").aggregate([("n_media", "sum")]).to_pylist()
    }
    files, media = (pc.field(c).cast(pa.float64()) for c in ("n_files", "n_media"))
    big = stats.filter(
        (pc.field("prefix") != "")
        & (pc.field("n_files") + pc.field("n_folders") >= min_entries)
        & (media <= files * float(max_media_share))
    ).sort_by([("host", "ascending"), ("share", "ascending"), ("prefix", "ascending")])
    rows = [
        (host, share, prefix)
        for host, share, prefix in zip(
            big["host"].to_pylist(),
            big["share"].to_pylist(),
            big["prefix"].to_pylist(),
            strict=True,
        )
        if (host_media.get(host) or 0) >= min_host_media
    ]
    chosen = set(rows)
    rules = []
    for host, share, prefix in rows:
        parts = prefix.split("/")
        if any((host, share, "/".join(parts[:i])) in chosen for i in range(1, len(parts))):
            continue  # an ancestor's rule covers it
        rules.append(auto_rule(host, share, prefix))
    return rules
