"""Automatic crawl rules from prefix statistics: folders that hold many entries and no media
cost listing time and can hold nothing to find (after the automatic filter generation of
"Optimising document collection with Nutch")."""

from __future__ import annotations

import hashlib

import pyarrow as pa

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
    import duckdb  # here, not at the top: fetch workers import this module and never need it

    con = duckdb.connect()
    con.register("stats", prefix_stats)
    rows = con.execute(
        """WITH hosts AS (SELECT host, sum(n_media) AS host_media FROM stats
                          WHERE prefix = '' GROUP BY host)
           SELECT s.host, s.share, s.prefix FROM stats s LEFT JOIN hosts USING (host)
           WHERE s.prefix <> '' AND s.n_files + s.n_folders >= $min_entries
             AND s.n_media <= $share * s.n_files
             AND coalesce(hosts.host_media, 0) >= $min_host_media
           ORDER BY s.host, s.share, s.prefix""",
        {"min_entries": min_entries, "share": max_media_share, "min_host_media": min_host_media},
    ).fetchall()
    con.close()
    chosen = set(rows)
    rules = []
    for host, share, prefix in rows:
        parts = prefix.split("/")
        if any((host, share, "/".join(parts[:i])) in chosen for i in range(1, len(parts))):
            continue  # an ancestor's rule covers it
        rules.append(auto_rule(host, share, prefix))
    return rules
