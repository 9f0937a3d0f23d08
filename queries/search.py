"""Ranked search over the index built by queries.index.

The index's postings hold precomputed BM25F impacts, so ranking is only sums: per query
word the best impact of its terms (surface form, stem, loose spelling) in each work, summed
over the words, plus the work's copies prior. Planning even a small DuckDB statement costs
milliseconds, so the ranking runs in numpy over arrays loaded once per index file (and
reloaded when the file is swapped): the term dictionary, the postings sorted by term and the
works' filter columns. The works matching the most words are kept (all of them when any
work matches them all; a field-restricted word is a must), filters are applied, and the top
k come from a partial sort. Only the display rows of those k works are fetched: from an
Arrow copy of the works table in a long-lived process, or with one small SQL lookup on the
first search of a process (the CLI runs one search per process). The query text never
reaches SQL: the lookup's only parameter is a list of work ids.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import duckdb
import numpy as np
import pyarrow as pa

from crawl_io.readable import human_bytes, plural, readable_text, readable_url
from queries.index import open_index
from queries.querylang import ALL_FIELDS, KINDS, AndQuery, QueryError, parse_query

__all__ = ["IndexUnreadable", "QueryError", "format_results", "search"]


class IndexUnreadable(Exception):
    """The search index file is damaged; the message says what rebuilds it."""


_RESULT_COLUMNS = (
    "work_id, kind, artist, title, album, year, series, season, episode, copies, hosts, "
    "online_copies, online_hosts, best_host, best_share, best_path, best_format, "
    "best_bitrate_kbps, best_size, best_online, best_resolution"
)


_FILTER_COLUMNS = f"""
    SELECT coalesce(list_position({list(KINDS)!r}, kind), 0)::TINYINT AS kind,
           year::DOUBLE AS year, season::DOUBLE AS season, episode::DOUBLE AS episode,
           copies
    FROM works ORDER BY work_id
"""  # KINDS are our constants, not query text


class _WorkColumns(Mapping[str, np.ndarray]):
    """querylang.WorkColumns plus online, prior and copies, one entry per work in work id
    order. The filter columns load on first use: most queries have no filter."""

    _FILTERS = ("kind", "year", "season", "episode", "copies")

    def __init__(self, index_path: Path, base: dict[str, np.ndarray]) -> None:
        self._index_path = index_path
        self._columns = base
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._columns and name in self._FILTERS:
            with self._lock:
                if name not in self._columns:
                    con = open_index(self._index_path)
                    try:
                        loaded = con.execute(_FILTER_COLUMNS).fetchnumpy()
                    finally:
                        con.close()
                    self._columns |= {n: _dense(v) for n, v in loaded.items()}
        return self._columns[name]

    def __iter__(self) -> Iterator[str]:
        return iter({*self._columns, *self._FILTERS})

    def __len__(self) -> int:
        return len({*self._columns, *self._FILTERS})


@dataclass
class _Postings:
    """Every posting, sorted by term id: a term's postings are one slice."""

    term_ids: dict[str, int]
    starts: np.ndarray  # postings of term id t: starts[t] to starts[t + 1]
    rows: np.ndarray  # int32 row of the work in the works' arrays
    impacts: np.ndarray  # float32
    fields: np.ndarray  # uint8 mask of FIELD_BITS


@dataclass
class _Snapshot:
    """What searches need of one index file. A process's first search reads only the
    postings of its terms (the CLI runs one search per process); from the second on, all
    postings and the display rows are held in memory."""

    index_path: Path
    work_ids: np.ndarray  # int32, ascending
    works: _WorkColumns
    host_urls: dict[str, str]
    postings: _Postings | None = None
    display: pa.Table | None = None  # the result columns of every work
    searches: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def rows_of(self, work_ids: np.ndarray) -> np.ndarray:
        """Rows in the works' arrays of the given work ids."""
        n = len(self.work_ids)
        if n and self.work_ids[0] == 1 and self.work_ids[-1] == n:
            return work_ids.astype(np.int32) - 1  # ids are 1..n, as the builder numbers them
        return np.searchsorted(self.work_ids, work_ids).astype(np.int32)

    def term_postings(self, terms: set[str]) -> dict[str, tuple[np.ndarray, ...]]:
        """term -> (rows, impacts, fields) of its postings, for the terms in the index."""
        if self.postings is not None:
            found = {t: self.postings.term_ids[t] for t in terms if t in self.postings.term_ids}
            starts = self.postings.starts
            slices = {t: slice(int(starts[i]), int(starts[i + 1])) for t, i in found.items()}
            p = self.postings
            return {t: (p.rows[w], p.impacts[w], p.fields[w]) for t, w in slices.items()}
        if not terms:
            return {}
        con = open_index(self.index_path)
        try:  # the terms travel as a parameter list, never as SQL text
            found = dict(con.execute(
                "SELECT term, term_id FROM terms WHERE term = ANY(?)", [sorted(terms)]
            ).fetchall())  # fmt: skip
            if not found:
                return {}
            hits = con.execute(
                "SELECT term_id, work_id, impact, fields FROM postings WHERE term_id = ANY(?)",
                [sorted(found.values())],
            ).fetchnumpy()
        finally:
            con.close()
        term_of = _dense(hits["term_id"])
        rows = self.rows_of(_dense(hits["work_id"]))
        impacts, fields = _dense(hits["impact"]), _dense(hits["fields"])
        result = {}
        for term, term_id in found.items():
            mine = term_of == term_id
            result[term] = (rows[mine], impacts[mine].astype(np.float32), fields[mine])
        return result

    def note_search(self) -> None:
        """Count a search; on the second, load all postings and display rows."""
        with self.lock:
            self.searches += 1
            if self.searches == 2:
                self.postings = _load_postings(self)
                con = open_index(self.index_path)
                try:
                    table = con.sql(f"SELECT {_RESULT_COLUMNS} FROM works ORDER BY work_id")
                    self.display = table.to_arrow_table().combine_chunks()
                finally:
                    con.close()


_snapshots: dict[str, tuple[tuple[int, int, int], _Snapshot]] = {}
_snapshots_lock = threading.Lock()


def _identity(index_path: Path) -> tuple[str, tuple[int, int, int]]:
    key = str(Path(index_path).resolve())
    try:
        stat = os.stat(key)
    except FileNotFoundError:
        raise FileNotFoundError(f"no search index at {index_path}: run a crawl first") from None
    return key, (stat.st_ino, stat.st_mtime_ns, stat.st_size)


def _snapshot(index_path: Path) -> _Snapshot:
    """The cached snapshot of the index file, made anew when the file was replaced."""
    key, identity = _identity(index_path)
    with _snapshots_lock:
        cached = _snapshots.get(key)
        if cached is None or cached[0] != identity:
            _snapshots[key] = cached = (identity, _load(Path(key)))
        return cached[1]


def _load(index_path: Path) -> _Snapshot:
    con = open_index(index_path)
    try:
        urls = dict(con.execute("SELECT host, url FROM hosts").fetchall())
        works = con.execute(
            "SELECT work_id, online_copies > 0 AS online, prior::DOUBLE AS prior "
            "FROM works ORDER BY work_id"
        ).fetchnumpy()
    finally:
        con.close()
    columns = {name: _dense(values) for name, values in works.items()}
    work_ids = columns.pop("work_id").astype(np.int32)
    return _Snapshot(index_path, work_ids, _WorkColumns(index_path, columns), urls)


def _load_postings(snapshot: _Snapshot) -> _Postings:
    con = open_index(snapshot.index_path)
    try:
        term_ids = dict(con.execute("SELECT term, term_id FROM terms").fetchall())
        postings = con.execute(
            "SELECT term_id, work_id, impact, fields FROM postings"
        ).fetchnumpy()  # stored sorted by term_id, work_id; checked below
    finally:
        con.close()
    arrays = {name: _dense(values) for name, values in postings.items()}
    terms = arrays["term_id"]
    if not np.all(terms[1:] >= terms[:-1]):  # not in stored order after all: sort here
        order = np.argsort(terms, kind="stable")
        arrays = {name: values[order] for name, values in arrays.items()}
    terms = arrays["term_id"]
    return _Postings(
        term_ids=term_ids,
        starts=np.searchsorted(terms, np.arange(max(term_ids.values(), default=0) + 2)),
        rows=snapshot.rows_of(arrays["work_id"]),
        impacts=arrays["impact"].astype(np.float32),
        fields=arrays["fields"].astype(np.uint8),
    )


def _dense(values: np.ndarray) -> np.ndarray:
    """A plain array from fetchnumpy's output (masked where NULL: NaN for floats)."""
    if isinstance(values, np.ma.MaskedArray):
        fill = np.nan if values.dtype.kind == "f" else 0
        return values.filled(fill)
    return np.asarray(values)


def search(
    index_path: Path,
    query: str,
    *,
    limit: int = 20,
    all_hosts: bool = False,
    latest: bool = False,
) -> list[dict]:
    """Works matching `query`, best first, in DESIGN.md's --json shape.

    Raises QueryError for a malformed query, FileNotFoundError when there is no index and
    IndexUnreadable when its file is damaged. A query of punctuation only finds nothing.
    """
    parsed = parse_query(query)
    if parsed.is_empty():
        return []
    try:  # the query text never reaches SQL: a DuckDB error here is the index file's
        snapshot = _snapshot(index_path)
        snapshot.note_search()
        rows, scores = _rank(snapshot, parsed, max(int(limit), 0), all_hosts, latest)
        if len(rows) == 0:
            return []
        records = _display_rows(snapshot, rows)
    except duckdb.Error as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise IndexUnreadable(f"search index {index_path} is damaged ({reason}): the next "
                              "round rebuilds it (`sharecrawl crawl`)") from None  # fmt: skip
    return [
        _result(rank, record | {"score": score}, snapshot.host_urls)
        for rank, (record, score) in enumerate(zip(records, scores, strict=True), start=1)
    ]


def _rank(
    snapshot: _Snapshot, query: AndQuery, limit: int, all_hosts: bool, latest: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Rows (into the works arrays) of the top `limit` works, and their scores."""
    works = snapshot.works
    words = query.words()
    if words:
        candidates, scores, matched = _match(snapshot, words)
    else:  # filters only: every work, most copied first
        candidates = np.arange(len(snapshot.work_ids))
        scores = np.zeros(len(candidates))
        matched = None
    keep = query.select(works, candidates)
    if not all_hosts:
        online = works["online"][candidates]
        keep = online if keep is None else keep & online
    if keep is not None:
        candidates, scores = candidates[keep], scores[keep]
        matched = None if matched is None else matched[keep]
    if matched is not None and len(matched):
        # Of the works passing the filters, those matching the most words.
        best = matched == matched.max()
        candidates, scores = candidates[best], scores[best]
    if len(candidates) == 0 or limit == 0:
        return candidates[:0], scores[:0]

    # Sort keys, least significant first (np.lexsort): work id breaks ties.
    keys: list[np.ndarray] = [snapshot.work_ids[candidates]]
    keys.append(-works["copies"][candidates] if not words else -scores)
    if latest:  # newest episode first: season, then episode, descending, NULLs last
        for column in ("episode", "season"):
            values = works[column][candidates]
            keys.append(np.where(np.isnan(values), np.inf, -values))
    elif len(candidates) > limit:  # only the k best need sorting
        primary = keys[-1]
        threshold = np.partition(primary, limit - 1)[limit - 1]
        near = primary <= threshold  # ties at the threshold are all kept, then sorted
        keys = [key[near] for key in keys]
        candidates, scores = candidates[near], scores[near]
    order = np.lexsort(keys)[:limit]
    return candidates[order], scores[order]


def _match(
    snapshot: _Snapshot, words: list[tuple[tuple[str, ...], int]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of the works matching any query word (and every field-restricted one), with
    their BM25F scores plus the copies prior, and how many words each matches."""
    n_works = len(snapshot.work_ids)
    scores = np.zeros(n_works)
    matched = np.zeros(n_works, dtype=np.int16)
    required_matched = np.zeros(n_works, dtype=np.int16)
    n_required = 0
    found = snapshot.term_postings({term for forms, _ in words for term in forms})
    for forms, mask in words:
        required = mask != ALL_FIELDS
        n_required += required
        rows, impacts = _word_postings(snapshot, found, forms, mask if required else None)
        scores[rows] += impacts
        matched[rows] += 1
        if required:
            required_matched[rows] += 1
    candidates = np.flatnonzero(matched)
    if n_required:
        candidates = candidates[required_matched[candidates] == n_required]
    prior = snapshot.works["prior"][candidates]
    return candidates, scores[candidates] + prior, matched[candidates]


def _word_postings(
    snapshot: _Snapshot, found: dict[str, tuple[np.ndarray, ...]], forms: tuple[str, ...],
    mask: int | None,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Works holding any of one word's terms (in the fields of `mask`, when given), each
    with the best impact among those terms. Rows are distinct."""
    parts = []
    for term in forms:
        if term not in found:
            continue
        rows, impacts, fields = found[term]
        if mask is not None:
            in_fields = (fields & mask) != 0
            rows, impacts = rows[in_fields], impacts[in_fields]
        parts.append((rows, impacts))
    if not parts:
        return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float32)
    if len(parts) == 1:
        return parts[0]
    best = np.zeros(len(snapshot.work_ids), dtype=np.float32)
    for rows, impacts in parts:  # rows are distinct within one term's postings
        best[rows] = np.maximum(best[rows], impacts)
    rows = np.flatnonzero(best)  # impacts are always positive
    return rows, best[rows]


def _display_rows(snapshot: _Snapshot, rows: np.ndarray) -> list[dict]:
    """The result columns of works `rows`, in that order."""
    if snapshot.display is not None:
        return snapshot.display.take(pa.array(rows)).to_pylist()
    work_ids = snapshot.work_ids[rows].tolist()
    con = open_index(snapshot.index_path)
    try:  # the work ids travel as a parameter list
        cursor = con.execute(
            f"SELECT {_RESULT_COLUMNS} FROM works WHERE work_id = ANY(?)", [work_ids]
        )
        columns = [d[0] for d in cursor.description]
        by_id = {row[0]: dict(zip(columns, row, strict=True)) for row in cursor.fetchall()}
    finally:
        con.close()
    return [by_id[work_id] for work_id in work_ids]


def copy_url(host_url: str | None, host: str, share: str, path: str) -> str:
    """The URL of a copy: the host's URL plus share and path (percent-encoded for smb://)."""
    base = (host_url or f"smb://{host}").rstrip("/")
    if base.startswith("smb://"):  # hosts.url may name a share: keep the host's part
        return f"smb://{base[6:].split('/')[0]}/{quote(share, safe='')}/{quote(path, safe='/')}"
    return f"{base}/{share}/{path}"


def _result(rank: int, row: dict, urls: dict[str, str]) -> dict:
    url = copy_url(urls.get(row["best_host"]), row["best_host"], row["best_share"],
                   row["best_path"])  # fmt: skip
    best = {
        "url": url,
        "iri": readable_url(url),  # the same URL as people read it
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
    """Lines for people, two per result; URLs as IRIs (crawl_io.readable)."""
    if not results:
        return "no results"
    lines = []
    for result in results:
        best = result["best"]
        copies = plural(result["copies"], "copy", "copies")
        where = f"on {plural(result['hosts'], 'host')}"
        state = f"{result['online_copies']} online" if result["online_copies"] else "all offline"
        head = h if (h := _headline(result)) != "?" else best["path"].rpartition("/")[2]
        lines.append(f"{result['rank']:3d}. {readable_text(head)}  [{result['kind']}]  "
                     f"{copies} {where}, {state}")  # fmt: skip
        quality = [best["format"] or "?"]
        if best["bitrate_kbps"]:
            quality.append(f"{best['bitrate_kbps']} kbps")
        if best.get("resolution"):
            quality.append(f"{best['resolution']}p")
        quality.append(human_bytes(best["size"]))
        marker = "" if best["online"] else "  (offline)"
        lines.append(f"     best: {' '.join(quality)}  {readable_url(best['url'])}{marker}")
    return "\n".join(lines)
