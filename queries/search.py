"""Ranked search over the index built by queries.index.

A query is parsed (queries.querylang), its words are looked up in the term dictionary, and
one SQL statement sums the precomputed BM25F impacts of the postings of those terms per work
(each word counts once: the best of its surface form and stem), keeps the works matching the
most words (all of them when any does), applies the filters, adds the copies prior and keeps
the top k. The query text only ever reaches DuckDB as parameters.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import duckdb

from queries.index import host_urls, open_index
from queries.querylang import AndQuery, QueryError, parse_query

__all__ = ["QueryError", "format_results", "search"]

_RESULT_COLUMNS = (
    "work_id, kind, artist, title, album, year, series, season, episode, copies, hosts, "
    "online_copies, online_hosts, best_host, best_share, best_path, best_format, "
    "best_bitrate_kbps, best_size, best_online, best_resolution"
)
_RESULT_COLUMNS_W = ", ".join(f"w.{c.strip()}" for c in _RESULT_COLUMNS.split(","))


def search(
    index_path: Path,
    query: str,
    *,
    limit: int = 20,
    all_hosts: bool = False,
    latest: bool = False,
) -> list[dict]:
    """Works matching `query`, best first, in DESIGN.md's --json shape.

    Raises QueryError for a malformed query and FileNotFoundError when there is no index.
    A query of punctuation only finds nothing.
    """
    parsed = parse_query(query)
    if parsed.is_empty():
        return []
    con = open_index(index_path)
    try:
        rows, columns = _run(con, parsed, max(int(limit), 0), all_hosts, latest)
        urls = host_urls(index_path) if rows else {}
    finally:
        con.close()
    return [_result(rank, dict(zip(columns, row, strict=True)), urls) for rank, row in
            enumerate(rows, start=1)]  # fmt: skip


def _run(
    con: duckdb.DuckDBPyConnection, query: AndQuery, limit: int, all_hosts: bool, latest: bool
) -> tuple[list[tuple], list[str]]:
    condition, filter_params = query.clause()
    if not all_hosts:
        condition = f"({condition}) AND w.online_copies > 0" if condition else "w.online_copies > 0"
    where = f"WHERE {condition}" if condition else ""
    newest_first = "w.season DESC NULLS LAST, w.episode DESC NULLS LAST, " if latest else ""
    words = query.words()

    if not words:  # filters only: most copied works first
        sql = f"""
            SELECT 0.0 AS score, {_RESULT_COLUMNS} FROM works w {where}
            ORDER BY {newest_first} w.copies DESC, w.work_id LIMIT ?
        """
        cursor = con.execute(sql, [*filter_params, limit])
        return cursor.fetchall(), [d[0] for d in cursor.description]

    term_ids = _term_ids(con, {t for forms, _ in words for t in forms})
    hit_parts: list[str] = []
    hit_params: list[object] = []
    for position, (forms, mask) in enumerate(words):
        required = mask != _ALL_FIELDS
        for term in forms:
            if term not in term_ids:
                continue
            # Literal numbers below come from our own counters, never from the query text.
            part = (
                f"SELECT {position} AS q, {required} AS req, work_id, impact "
                f"FROM postings WHERE term_id = ?"
            )
            hit_params.append(term_ids[term])
            if required:
                part += " AND (fields & ?) <> 0"
                hit_params.append(mask)
            if not all_hosts:
                part += " AND visible"
            hit_parts.append(part)
    n_required = sum(1 for _, mask in words if mask != _ALL_FIELDS)
    if not hit_parts:
        return [], []

    # Works matching the most words come first; rows matching fewer words than the best one
    # are dropped below (so all words must match whenever some work matches them all).
    sql = f"""
        WITH hits AS ({" UNION ALL ".join(hit_parts)}),
        per_word AS (
            SELECT work_id, q, bool_or(req) AS req, max(impact) AS s
            FROM hits GROUP BY work_id, q
        ),
        scored AS (
            SELECT work_id, sum(s) AS bm25, count(*) AS matched
            FROM per_word GROUP BY work_id
            HAVING count(*) FILTER (WHERE req) = ?
        ),
        ranked AS (
            SELECT s.work_id, s.matched, s.bm25 + w.prior AS score
            FROM scored s JOIN works w USING (work_id)
            {where}
            ORDER BY s.matched DESC, {newest_first} score DESC, s.work_id
            LIMIT ?
        )
        SELECT r.matched, r.score, {_RESULT_COLUMNS_W}
        FROM ranked r JOIN works w USING (work_id)
        ORDER BY r.matched DESC, {newest_first} r.score DESC, r.work_id
    """
    cursor = con.execute(sql, [*hit_params, n_required, *filter_params, limit])
    rows = cursor.fetchall()
    columns = [d[0] for d in cursor.description]
    best_matched = rows[0][0] if rows else 0
    return [row[1:] for row in rows if row[0] == best_matched], columns[1:]


_ALL_FIELDS = 255


def _term_ids(con: duckdb.DuckDBPyConnection, terms: set[str]) -> dict[str, int]:
    if not terms:
        return {}
    placeholders = ", ".join("?" for _ in terms)  # one '?' per term; values go as parameters
    rows = con.execute(
        f"SELECT term, term_id FROM terms WHERE term IN ({placeholders})", sorted(terms)
    ).fetchall()
    return dict(rows)


def copy_url(host_url: str | None, host: str, share: str, path: str) -> str:
    """The URL of a copy: the host's URL plus share and path (percent-encoded for smb://)."""
    base = (host_url or f"smb://{host}").rstrip("/")
    if base.startswith("smb://"):
        return f"{base}/{quote(share, safe='')}/{quote(path, safe='/')}"
    return f"{base}/{share}/{path}"


def _result(rank: int, row: dict, urls: dict[str, str]) -> dict:
    best = {
        "url": copy_url(urls.get(row["best_host"]), row["best_host"], row["best_share"],
                        row["best_path"]),
        "host": row["best_host"],
        "share": row["best_share"],
        "path": row["best_path"],
        "format": row["best_format"],
        "bitrate_kbps": row["best_bitrate_kbps"],
        "size": row["best_size"],
        "online": bool(row["best_online"]),
        "resolution": row["best_resolution"],
    }  # fmt: skip
    return {
        "rank": rank,
        "score": round(float(row["score"]), 4),
        "kind": row["kind"],
        "artist": row["artist"],
        "title": row["title"],
        "album": row["album"],
        "year": row["year"],
        "series": row["series"],
        "season": row["season"],
        "episode": row["episode"],
        "copies": row["copies"],
        "hosts": row["hosts"],
        "online_copies": row["online_copies"],
        "online_hosts": row["online_hosts"],
        "work_id": row["work_id"],
        "best": best,
    }


def _human_size(size: int | None) -> str:
    if size is None:
        return "?"
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def _headline(result: dict) -> str:
    if result["series"]:
        head = result["series"]
        if result["episode"] is not None:
            head += f" S{result['season'] or 0:02d}E{result['episode']:02d}"
        if result["title"]:
            head += f" — {result['title']}"
        return head
    head = " — ".join(x for x in (result["artist"], result["title"]) if x) or "?"
    extra = ", ".join(str(x) for x in (result["album"], result["year"]) if x)
    return f"{head} ({extra})" if extra else head


def format_results(results: list[dict]) -> str:
    """Human-readable lines for the terminal, two per result."""
    if not results:
        return "no results"
    lines = []
    for result in results:
        best = result["best"]
        copies = f"{result['copies']} cop{'y' if result['copies'] == 1 else 'ies'}"
        where = f"on {result['hosts']} host{'' if result['hosts'] == 1 else 's'}"
        state = (
            "all offline" if result["online_copies"] == 0 else f"{result['online_copies']} online"
        )
        lines.append(
            f"{result['rank']:3d}. {_headline(result)}  [{result['kind']}]  "
            f"{copies} {where}, {state}"
        )
        quality = [best["format"] or "?"]
        if best["bitrate_kbps"]:
            quality.append(f"{best['bitrate_kbps']} kbps")
        if best.get("resolution"):
            quality.append(f"{best['resolution']}p")
        quality.append(_human_size(best["size"]))
        marker = "" if best["online"] else "  (offline)"
        lines.append(f"     best: {' '.join(quality)}  {best['url']}{marker}")
    return "\n".join(lines)
