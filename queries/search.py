"""Ranked search (docs/DESIGN.md, Search) in numpy over queries.search_arrays: planning even a
small DuckDB statement costs milliseconds. Score: per query word the best impact of its terms,
summed, plus the copies prior; the works matching the most words are kept, filtered, and the
top k partially sorted. Typos are looked for only when exact matches fill fewer than k, and a
work's typo count ranks before its score (Algolia's typo criterion). The query never reaches SQL."""

from __future__ import annotations

import re
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sharecrawl.queries.fuzzy import fuzzy_word
from sharecrawl.queries.index_store import IndexFile, IndexUnreadable, pinned
from sharecrawl.queries.querylang import ALL_FIELDS, AndQuery, QueryError, parse_query
from sharecrawl.queries.search_arrays import (
    SearchArrays,
    forget_mapped,
    mapped_arrays,
    search_arrays,
)
from sharecrawl.queries.search_results import format_results, result_record
from sharecrawl.queries.search_tables import RESULT_COLUMNS
from sharecrawl.queries.text import word_forms

__all__ = ["IndexUnreadable", "QueryError", "format_results", "search", "suggest"]

FUZZY_WEIGHT = 0.5  # a term one edit from the word typed counts half
Words = list[tuple[tuple[str, ...], int]]
# A word of letters a suggestion may respell (not a field's name, which ends in ':').
_SPELLED_RE = re.compile(r"\b[^\W\d_]{3,}\b(?!:)")
_NEAREST = (  # the word travels as a parameter, never as SQL text
    "SELECT term FROM terms WHERE abs(length(term) - length($w)) <= $edits "
    "AND damerau_levenshtein(term, $w) <= $edits "
    "ORDER BY damerau_levenshtein(term, $w), df DESC, term LIMIT 1"
)


@dataclass
class _Works:
    """querylang.WorkColumns over a file's arrays, for one search."""

    arrays: SearchArrays
    all_hosts: bool

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays.column(name)

    def having(self, field: str, value: str) -> np.ndarray:
        mask = np.zeros(len(self.arrays.work_ids), dtype=bool)
        mask[self.arrays.works_with(field, value, self.all_hosts)] = True
        return mask


def search(
    index: Path | IndexFile,
    query: str,
    *,
    limit: int = 20,
    all_hosts: bool = False,
    latest: bool = False,
) -> list[dict]:
    """Works matching `query`, best first, in DESIGN.md's --json shape; `index` is a path or an open
    index file (queries.index_store). Raises QueryError (malformed query), FileNotFoundError (no
    index), IndexUnreadable (damaged). Punctuation alone finds nothing."""
    parsed = parse_query(query)
    if parsed.is_empty():
        return []
    limit = max(int(limit), 0)
    if not isinstance(index, IndexFile):  # a fresh process maps the arrays file: no DuckDB
        arrays = mapped_arrays(Path(index))
        if arrays is not None:
            try:
                return _search(arrays, parsed, limit, all_hosts, latest)
            except IndexError:  # an arrays file whose arrays disagree: the index answers
                forget_mapped(Path(index))
    import duckdb

    opened = nullcontext(index) if isinstance(index, IndexFile) else pinned(Path(index))
    with opened as file:
        try:  # the query text never reaches SQL: a DuckDB error here is the index file's
            return _search(search_arrays(file), parsed, limit, all_hosts, latest)
        except duckdb.Error as e:
            from sharecrawl.crawl_io.crawldb.version_manifest import first_line  # imports Arrow

            raise IndexUnreadable.damaged(file.path, first_line(e)[:160]) from None


def _search(
    arrays: SearchArrays, parsed: AndQuery, limit: int, all_hosts: bool, latest: bool
) -> list[dict]:
    arrays.note_search()
    rows, scores = _rank(arrays, parsed, limit, all_hosts, latest)
    records = _display_rows(arrays, rows) if len(rows) else []
    return [
        result_record(rank, record | {"score": score}, arrays.host_urls)
        for rank, (record, score) in enumerate(zip(records, scores, strict=True), start=1)
    ]


def _rank(
    arrays: SearchArrays, query: AndQuery, limit: int, all_hosts: bool, latest: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Rows (into the works arrays) of the top `limit` works, and their scores."""
    works = _Works(arrays, all_hosts)
    words = query.words()
    if words:
        candidates, all_typos, all_scores = _match(works, query, words, limit)
        # scored now: a word on half the works need not have all of them looked up
        scores = all_scores[candidates] + arrays.prior[candidates]
        typos = all_typos[candidates]
    else:  # filters only: every work, most copied first
        (candidates,) = _select(works, query, (np.arange(len(arrays.work_ids)),))
        scores, typos = np.zeros(len(candidates)), None
    if len(candidates) == 0 or limit == 0:
        return candidates[:0], scores[:0]

    # Sort keys, least significant first (np.lexsort): work id breaks ties.
    keys: list[np.ndarray] = [arrays.work_ids[candidates]]
    keys.append(-arrays.column("copies")[candidates] if not words else -scores)
    if latest:  # newest episode first: season, then episode, descending, NULLs last
        for column in ("episode", "season"):
            values = arrays.column(column)[candidates]
            keys.append(np.where(np.isnan(values), np.inf, -values))
    if typos is not None and typos.any():
        if len(candidates) > limit:  # works with more typos than the k-th best have are out
            fewest = typos <= np.partition(typos, limit - 1)[limit - 1]
            keys = [key[fewest] for key in keys]
            candidates, scores, typos = candidates[fewest], scores[fewest], typos[fewest]
        keys.append(typos)
    if len(candidates) > limit and len(keys) == 2:  # only the k best need sorting
        primary = keys[-1]
        threshold = np.partition(primary, limit - 1)[limit - 1]
        near_top = primary <= threshold  # ties at the threshold are all kept, then sorted
        keys = [key[near_top] for key in keys]
        candidates, scores = candidates[near_top], scores[near_top]
    order = np.lexsort(keys)[:limit]
    return candidates[order], scores[order]


def _select(works: _Works, query: AndQuery, found: tuple) -> tuple:
    """Of `found` (candidates, then arrays of theirs; None stays None), the candidates passing
    the query's filters (and online, unless the search is of all hosts)."""
    keep = query.select(works, found[0])
    if not works.all_hosts:
        online = works.arrays.online[found[0]]
        keep = online if keep is None else keep & online
    if keep is None:
        return found
    return tuple(None if a is None else a[keep] for a in found)


def _match(
    works: _Works, query: AndQuery, words: Words, limit: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows of the works passing the filters that match the most query words (and every
    field-restricted one); and for every work, how many words it matches only through a term
    one edit away and its BM25F score (without the copies prior). Typos are looked for when
    fewer than `limit` works pass and match every word; one scoring pass either way, adding per
    word its typos' impacts then its own (the same sum, same order)."""
    arrays = works.arrays
    n_works = len(arrays.work_ids)
    matched = np.zeros(n_works, dtype=np.int16)
    required_matched = np.zeros(n_works, dtype=np.int16)
    found = arrays.term_postings({term for forms, _ in words for term in forms})
    exact = []
    for forms, mask in words:
        word_mask = mask if mask != ALL_FIELDS else None
        rows, impacts = _word_postings(n_works, found, forms, word_mask)
        exact.append((rows, impacts, word_mask))
        matched[rows] += 1
        if word_mask is not None:
            required_matched[rows] += 1
    n_required = sum(mask is not None for _, _, mask in exact)
    best, most = _most_matched(works, query, matched, required_matched, n_required, len(words))
    near = None
    if limit and (most < len(words) or len(best) < limit):
        near = [
            tuple(t for t in arrays.near_terms(forms[0]) if t not in forms)
            if forms and fuzzy_word(forms[0])
            else ()
            for forms, _ in words
        ]
        if any(near):
            found |= arrays.term_postings({term for forms in near for term in forms})
        else:
            near = None
    scores = np.zeros(n_works)
    typos = np.zeros(n_works, dtype=np.int16)
    for i, (rows, impacts, word_mask) in enumerate(exact):
        if near and near[i]:
            near_rows, near_impacts = _word_postings(n_works, found, near[i], word_mask)
            in_exact = np.zeros(n_works, dtype=bool)
            in_exact[rows] = True
            only_near = ~in_exact[near_rows]
            near_rows = near_rows[only_near]
            scores[near_rows] += near_impacts[only_near] * FUZZY_WEIGHT
            typos[near_rows] += 1
            matched[near_rows] += 1
            if word_mask is not None:
                required_matched[near_rows] += 1
        scores[rows] += impacts
    if near:
        best, _ = _most_matched(works, query, matched, required_matched, n_required, len(words))
    return best, typos, scores


def _most_matched(
    works: _Works,
    query: AndQuery,
    matched: np.ndarray,
    required_matched: np.ndarray,
    n_required: int,
    most: int,
) -> tuple[np.ndarray, int]:
    """Rows of the works passing the filters (and matching every field-restricted word) that
    match the most words, and how many that is (0: none). Looked for from `most` down: a word
    on half the works is only gathered when no work matches more than it."""
    for count in range(most, 0, -1):
        rows = np.flatnonzero(matched == count)
        if n_required:
            rows = rows[required_matched[rows] == n_required]
        (rows,) = _select(works, query, (rows,))
        if len(rows):
            return rows, count
    return np.zeros(0, dtype=np.intp), 0


def _word_postings(
    n_works: int, found: dict[str, tuple[np.ndarray, ...]], forms: tuple[str, ...], mask: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of the works holding one word's terms (in `mask`'s fields), best impact."""
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
    if sum(len(rows) for rows, _ in parts) * 16 < n_works:  # few: sorted, not over every work
        rows, impacts = (np.concatenate(p) for p in zip(*parts, strict=True))
        order = np.lexsort((-impacts, rows))  # by row, its best impact first
        rows, impacts = rows[order], impacts[order]
        first = np.ones(len(rows), dtype=bool)
        first[1:] = rows[1:] != rows[:-1]
        return rows[first], impacts[first]
    best = np.zeros(n_works, dtype=np.float32)
    for rows, impacts in parts:  # rows are distinct within one term's postings
        best[rows] = np.maximum(best[rows], impacts)
    rows = np.flatnonzero(best)  # impacts are always positive
    return rows, best[rows]


def _display_rows(arrays: SearchArrays, rows: np.ndarray) -> list[dict]:
    """The result columns of works `rows`, in that order."""
    if arrays.display is not None:
        return arrays.display.rows(rows)
    assert arrays.file is not None
    work_ids = arrays.work_ids[rows].tolist()
    with arrays.file.cursor() as cursor:  # the work ids travel as a parameter list
        result = cursor.execute(
            f"SELECT {RESULT_COLUMNS} FROM works WHERE work_id = ANY(?)", [work_ids]
        )
        columns = [d[0] for d in result.description]
        by_id = {row[0]: dict(zip(columns, row, strict=True)) for row in result.fetchall()}
    return [by_id[work_id] for work_id in work_ids]


def suggest(file: IndexFile, query: str, *, all_hosts: bool = False) -> str | None:
    """A near spelling of a query that found nothing: each word the index lacks replaced by
    the nearest indexed term (one edit for words under five letters, else two; fewest edits,
    then most works). None when no word has one or the respelled query finds nothing too."""
    import duckdb

    words = {m.group().casefold() for m in _SPELLED_RE.finditer(query)}
    fixes: dict[str, str] = {}
    try:
        with file.cursor() as cursor:
            forms = sorted({t for w in words for t in word_forms(w)})
            sql = "SELECT term FROM terms WHERE term = ANY(?)"
            known = {t for (t,) in cursor.execute(sql, [forms]).fetchall()}
            for word in sorted(words):
                if known.isdisjoint(word_forms(word)):
                    edits = 1 if len(word) < 5 else 2
                    row = cursor.execute(_NEAREST, {"w": word, "edits": edits}).fetchone()
                    if row:
                        fixes[word] = row[0]
    except duckdb.Error:  # a damaged index: search says so; no suggestion
        return None
    if not fixes:
        return None
    text = _SPELLED_RE.sub(lambda m: fixes.get(m.group().casefold(), m.group()), query)
    return text if search(file, text, limit=1, all_hosts=all_hosts) else None
