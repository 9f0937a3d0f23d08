"""Build the search index (a DuckDB file) from one crawldb version.

Tables in the index:
- `works`: copies grouped into works (same normalised artist + title; same series, season
  and episode; same film title + year; else the same name stem), with counts, the best copy
  (online first, then quality) and a static prior from the number of copies;
- `copies`: every media file with its work_id (for analysts and for listing copies);
- `terms`: term dictionary (term, term_id, df), sorted by term;
- `postings`: (term_id, work_id, impact, fields, visible) sorted by term_id: the BM25F score
  of the term in the work is precomputed, so a query only sums impacts;
- `hosts`: host, url, online (to build URLs of copies);
- `meta`: key/value pairs, among them the crawldb version the index was built from.

Text is split into words in Python (queries.text, the same code the queries use) once per
distinct string, and each distinct word's forms are computed once; everything per row is
done by DuckDB. guessit, the slowest step per name, runs in a child process meanwhile.

queries.search loads the postings, terms and works' filter columns into numpy arrays once
per index file: the file stays the single thing swapped (crawl_io.atomic) when rebuilt.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from itertools import chain
from pathlib import Path

import duckdb
import pyarrow as pa

from crawl_io import schema
from crawl_io.atomic import write_atomic
from queries import text
from queries.querylang import FIELD_BITS, FIELD_WEIGHTS

BM25_K1 = 1.2
BM25_B = 0.5  # names and tags are short; length matters less than in prose
PRIOR_WEIGHT = 0.3  # score bonus per ln(1 + copies): popular works win ties
LOSSLESS_FORMATS = ("flac", "ape", "wav", "wv", "alac", "aiff", "aif", "dsf", "dff", "tta")


_connections: dict[str, tuple[tuple[int, int], duckdb.DuckDBPyConnection]] = {}
_host_urls: dict[str, tuple[tuple[int, int], dict[str, str]]] = {}
_connections_lock = threading.Lock()


def open_index(index_path: Path) -> duckdb.DuckDBPyConnection:
    """A cursor on a cached read-only connection to the index, reopened when the file was
    swapped (DuckDB caches open databases by path, so a fresh connect would see the old one
    while any connection to it is open). Close the cursor when done."""
    key = str(Path(index_path).resolve())
    try:
        stat = os.stat(key)
    except FileNotFoundError:
        raise FileNotFoundError(f"no search index at {index_path}: run a crawl first") from None
    identity = (stat.st_ino, stat.st_mtime_ns)
    with _connections_lock:
        cached = _connections.get(key)
        if cached is None or cached[0] != identity:
            if cached is not None:
                cached[1].close()
            _connections[key] = (identity, duckdb.connect(key, read_only=True))
        return _connections[key][1].cursor()


def host_urls(index_path: Path) -> dict[str, str]:
    """host -> URL from the index's hosts table, cached until the index file is swapped."""
    key = str(Path(index_path).resolve())
    con = open_index(index_path)
    try:
        identity = _connections[key][0]
        cached = _host_urls.get(key)
        if cached is None or cached[0] != identity:
            urls = dict(con.execute("SELECT host, url FROM hosts").fetchall())
            _host_urls[key] = cached = (identity, urls)
        return cached[1]
    finally:
        con.close()


def index_version(index_path: Path) -> str | None:
    """The crawldb version the index at `index_path` was built from, or None."""
    try:
        con = open_index(index_path)
    except (FileNotFoundError, duckdb.Error):
        return None
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()
    except duckdb.Error:
        return None
    finally:
        con.close()
    return row[0] if row else None


def build_index(version_dir: Path, out_path: Path) -> None:
    """Build the index of `version_dir` into `out_path`, replacing it atomically."""

    def build(tmp_path: Path) -> None:
        tmp_path.unlink(missing_ok=True)
        try:
            with duckdb.connect(str(tmp_path)) as con:
                _build(con, Path(version_dir))
        finally:  # DuckDB's log of a failed build (write_atomic removes the file)
            Path(f"{tmp_path}.wal").unlink(missing_ok=True)

    write_atomic(out_path, build)


def relabel_index(index_path: Path, version_dir: Path) -> None:
    """Record that the index also serves `version_dir` (whose media and hosts are unchanged):
    a copy with a new version label replaces it atomically, at the cost of a file copy."""

    def relabel(tmp_path: Path) -> None:
        shutil.copyfile(index_path, tmp_path)
        try:
            with duckdb.connect(str(tmp_path)) as con:
                con.execute("UPDATE meta SET value = ? WHERE key = 'version'", [version_dir.name])
                con.execute("CHECKPOINT")
        finally:
            Path(f"{tmp_path}.wal").unlink(missing_ok=True)

    write_atomic(index_path, relabel)


def _build(con: duckdb.DuckDBPyConnection, version_dir: Path) -> None:
    con.execute("SET enable_progress_bar = false")
    _load_sources(con, version_dir)
    guesses = _start_guessing(con)
    _tokenise_strings(con)
    _folder_strings(con)
    _apply_guesses(con, guesses())
    _group_works(con)
    _build_postings(con)
    con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    n_works = con.execute("SELECT count(*) FROM works").fetchone()[0]
    n_media = con.execute("SELECT count(*) FROM copies").fetchone()[0]
    con.executemany(
        "INSERT INTO meta VALUES (?, ?)",
        [
            ("version", version_dir.name),
            ("works", str(n_works)),
            ("media", str(n_media)),
            ("built_at", con.execute("SELECT now()::VARCHAR").fetchone()[0]),
        ],
    )
    con.execute("CHECKPOINT")


def _parquet_files(directory: Path) -> list[str]:
    return sorted(str(p) for p in directory.glob("*.parquet")) if directory.is_dir() else []


def _load_sources(con: duckdb.DuckDBPyConnection, version_dir: Path) -> None:
    """Temp table `m` (one row per media file, path split up) and table `hosts`."""
    media_files = _parquet_files(version_dir / "media")
    if media_files:
        # a temporary view, read once straight into `m` below: the index names no path
        con.register("media_src", con.read_parquet(media_files, union_by_name=True))
    else:
        _create_from_arrow(con, "media_src", schema.empty(schema.MEDIA), temp=True)
    hosts_file = version_dir / "hosts.parquet"
    if hosts_file.exists():
        con.execute(
            "CREATE TEMP TABLE hosts_src AS SELECT * FROM read_parquet(?)", [str(hosts_file)]
        )
    else:
        _create_from_arrow(con, "hosts_src", schema.empty(schema.HOSTS), temp=True)
    con.execute(
        """
        CREATE TABLE hosts AS
        SELECT host, any_value(url) AS url, coalesce(bool_or(online), false) AS online
        FROM hosts_src GROUP BY host ORDER BY host
        """
    )
    lossless = ", ".join(f"'{f}'" for f in LOSSLESS_FORMATS)
    # String functions rather than regular expressions on the whole path: they are several
    # times cheaper per row. A resolution is looked for only in paths holding three digits.
    con.execute(
        f"""
        CREATE TEMP TABLE m AS
        SELECT
            s.host, s.share, s.path, s.size, s.mtime,
            lower(coalesce(s.kind, 'audio')) AS kind,
            lower(s.format) AS format,
            nullif(trim(s.artist), '') AS artist,
            nullif(trim(s.title), '') AS title,
            nullif(trim(s.album), '') AS album,
            nullif(trim(s.albumartist), '') AS albumartist,
            nullif(trim(s.genre), '') AS genre,
            s.year, s.bitrate_kbps,
            nullif(trim(s.series), '') AS series, s.season, s.episode,
            CASE WHEN length(s.path) > length(s.filename)
                 THEN left(s.path, length(s.path) - length(s.filename) - 1) ELSE '' END
                AS folder,
            regexp_replace(s.filename, '\\.[^./]{{1,5}}$', '') AS stem,
            s.filename,
            coalesce(h.online, false) AS online,
            lower(s.format) IN ({lossless}) AS lossless,
            CASE WHEN regexp_matches(s.path, '\\d\\d\\d[pPiI]') THEN
                try_cast(regexp_extract(lower(s.path),
                                        '(?:^|[^0-9])(\\d{{3,4}})[pi](?:[^a-z]|$)', 1)
                         AS INTEGER)
            END AS resolution
        FROM (SELECT *, parse_filename(path, false, '/') AS filename FROM media_src) s
        LEFT JOIN hosts h USING (host)
        """
    )


def _create_from_arrow(
    con: duckdb.DuckDBPyConnection, name: str, table: pa.Table, *, temp: bool = False
) -> None:
    """CREATE TABLE `name` from an Arrow table (names here are ours, never user text)."""
    con.register("_arrow_source", table)
    try:
        kind = "TEMP TABLE" if temp else "TABLE"
        con.execute(f"CREATE {kind} {name} AS SELECT * FROM _arrow_source")
    finally:
        con.unregister("_arrow_source")


def _tokenise_strings(con: duckdb.DuckDBPyConnection) -> None:
    """Temp table `strings` (v, norm, terms, generic): every distinct tag value, folder,
    folder's last name and name stem with its normalised form (text.normalised), its index
    terms (text.terms) and whether it is a generic name (text.is_generic_name)."""
    values = con.sql(
        """
        SELECT v FROM (
            SELECT artist AS v FROM m UNION SELECT title FROM m UNION SELECT album FROM m
            UNION SELECT albumartist FROM m UNION SELECT genre FROM m
            UNION SELECT series FROM m UNION SELECT stem FROM m UNION SELECT folder FROM m
            UNION SELECT parse_filename(folder, false, '/') FROM (SELECT DISTINCT folder FROM m)
        ) WHERE v IS NOT NULL
        """
    )
    _add_strings(con, values.to_arrow_table().column(0).to_pylist(), create=True)
    con.execute("CREATE TEMP VIEW tag_strings AS SELECT v, norm, terms FROM strings")
    con.execute(
        "CREATE TEMP VIEW stem_strings AS SELECT v AS stem, norm, terms, generic FROM strings"
    )


def _add_strings(con: duckdb.DuckDBPyConnection, values: list[str], *, create: bool) -> None:
    """Add `values` (distinct, not yet there) to temp table `strings`.

    Python splits each string into words (the same text.words the queries use) and computes
    the forms of each distinct word once; DuckDB assembles the per-string results, which is
    several times faster than text.terms and text.normalised string by string.
    """
    words = [text.words(v) for v in values]
    distinct_words = sorted(set(chain.from_iterable(words)))
    forms = [text.word_forms(w) for w in distinct_words]
    string_words = pa.table({"v": pa.array(values, pa.string()),
                             "words": pa.array(words, pa.list_(pa.string()))})  # fmt: skip
    word_forms = pa.table(
        {
            "word": pa.array(distinct_words, pa.string()),
            "surface": pa.array([f[0] for f in forms], pa.string()),
            "forms": pa.array([list(f) for f in forms], pa.list_(pa.string())),
            "indexable": pa.array([text.indexable(f[0]) for f in forms], pa.bool_()),
            "generic": pa.array([text.is_generic_word(f[0]) for f in forms], pa.bool_()),
        }
    )
    con.register("string_words", string_words)
    con.register("word_forms", word_forms)
    # Strings without words (punctuation only) normalise to '' and are generic, as in text.
    action = "CREATE TEMP TABLE strings AS" if create else "INSERT INTO strings"
    try:
        con.execute(
            f"""
            {action}
            WITH sw AS (
                SELECT v, unnest(words) AS word, generate_subscripts(words, 1) AS pos
                FROM string_words
            )
            SELECT s.v,
                coalesce(x.norm, '') AS norm,
                coalesce(x.terms, []::VARCHAR[]) AS terms,
                coalesce(x.generic, true) AS generic
            FROM string_words s LEFT JOIN (
                SELECT sw.v,
                    string_agg(wf.surface, ' ' ORDER BY sw.pos) AS norm,
                    list_distinct(flatten(list(wf.forms) FILTER (WHERE wf.indexable))) AS terms,
                    bool_and(wf.generic) FILTER (WHERE wf.indexable) AS generic
                FROM sw JOIN word_forms wf USING (word)
                GROUP BY sw.v
            ) x USING (v)
            """
        )
    finally:
        con.unregister("string_words")
        con.unregister("word_forms")


def _folder_strings(con: duckdb.DuckDBPyConnection) -> None:
    """Temp table `folder_strings`: a folder's terms, and its last name normalised."""
    con.execute(
        """
        CREATE TEMP TABLE folder_strings AS
        SELECT f.folder, coalesce(l.norm, '') AS last_norm, s.terms
        FROM (SELECT DISTINCT folder FROM m) f
        JOIN strings s ON s.v = f.folder
        LEFT JOIN strings l ON l.v = parse_filename(f.folder, false, '/')
        """
    )


def _guess(filename: str) -> tuple[object, ...]:
    from crawl_io.tags.video_names import guess_video_name  # guessit loads only here

    try:
        video = guess_video_name(filename)
    except Exception:  # guessit may fail on odd names; the name stem still identifies it
        return (filename, None, None, None, None, None, None)
    is_episode = video.is_episode and video.episode is not None
    return (
        filename,
        None if is_episode else video.title,
        video.title if is_episode else None,
        video.season if is_episode else None,
        video.episode if is_episode else None,
        video.year,
        video.resolution,
    )


def _guess_all(filenames: list[str]) -> list[tuple[object, ...]]:
    return [_guess(name) for name in filenames]


# guessit takes ~15 ms a name: with more names than this, it runs in a child process
# (`python -m queries.index`) while DuckDB and the tokeniser work.
_GUESS_IN_BACKGROUND = 100


def _start_guessing(con: duckdb.DuckDBPyConnection) -> Callable[[], list[tuple[object, ...]]]:
    """Start guessing series/season/episode (or film title/year) from the names of videos
    the crawler left without a series and a title; returns a function giving the guesses.

    guessit runs once per distinct file name and only for videos that have neither a
    series nor a title.
    """
    names = [name for (name,) in con.execute(
        "SELECT DISTINCT filename FROM m WHERE kind = 'video' AND series IS NULL AND title IS NULL"
    ).fetchall()]  # fmt: skip
    if len(names) < _GUESS_IN_BACKGROUND:
        return lambda: _guess_all(names)
    # A plain child process, not multiprocessing: spawn would re-import the caller's
    # __main__, and fork is unsafe with DuckDB's threads running.
    project = str(Path(__file__).resolve().parents[1])
    env = os.environ | {"PYTHONPATH": os.pathsep.join(
        p for p in (project, os.environ.get("PYTHONPATH")) if p
    )}  # fmt: skip
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "queries.index", "--guess"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True,
        )  # fmt: skip
        assert child.stdin is not None
        child.stdin.write(json.dumps(names))
        child.stdin.close()
    except OSError:
        return lambda: _guess_all(names)

    def result() -> list[tuple[object, ...]]:
        assert child.stdout is not None
        output = child.stdout.read()
        if child.wait() != 0:  # the child failed: guess here rather than lose the names
            return _guess_all(names)
        return [tuple(row) for row in json.loads(output)]

    return result


def _apply_guesses(con: duckdb.DuckDBPyConnection, rows: list[tuple[object, ...]]) -> None:
    """Fill the blanks of `m` from the guesses, and tokenise the titles and series found."""
    if not rows:
        return
    table = pa.table(
        {
            "filename": pa.array([r[0] for r in rows], pa.string()),
            "g_title": pa.array([r[1] for r in rows], pa.string()),
            "g_series": pa.array([r[2] for r in rows], pa.string()),
            "g_season": pa.array([r[3] for r in rows], pa.int32()),
            "g_episode": pa.array([r[4] for r in rows], pa.int32()),
            "g_year": pa.array([r[5] for r in rows], pa.int32()),
            "g_resolution": pa.array([r[6] for r in rows], pa.int32()),
        }
    )
    _create_from_arrow(con, "guesses", table, temp=True)
    con.execute(
        """
        UPDATE m SET
            title = g.g_title, series = g.g_series,
            season = coalesce(m.season, g.g_season), episode = coalesce(m.episode, g.g_episode),
            year = coalesce(m.year, g.g_year), resolution = coalesce(m.resolution, g.g_resolution)
        FROM guesses g
        WHERE m.filename = g.filename AND m.kind = 'video'
          AND m.series IS NULL AND m.title IS NULL
        """
    )
    new_values = con.execute(
        """
        SELECT DISTINCT v FROM (SELECT g_title AS v FROM guesses UNION ALL
                                SELECT g_series FROM guesses)
        WHERE v IS NOT NULL AND v NOT IN (SELECT v FROM strings)
        """
    ).fetchall()
    if new_values:
        _add_strings(con, [v for (v,) in new_values], create=False)


def _group_works(con: duckdb.DuckDBPyConnection) -> None:
    """Tables `works` and `copies`; temp table `mw` (media rows with their work_id)."""
    con.execute(
        """
        CREATE TEMP TABLE mk AS
        SELECT m.*,
            CASE
                WHEN m.kind = 'video' AND sr.norm <> '' AND m.episode IS NOT NULL THEN
                    'e|' || sr.norm || '|' || coalesce(m.season, 0) || '|' || m.episode
                WHEN m.kind = 'video' AND ti.norm <> '' THEN
                    'f|' || ti.norm || '|' || coalesce(m.year::VARCHAR, '')
                WHEN ar.norm <> '' AND ti.norm <> '' THEN
                    'a|' || m.kind || '|' || ar.norm || '|' || ti.norm
                WHEN st.generic THEN
                    'g|' || m.kind || '|' || fo.last_norm || '|' || st.norm
                ELSE 'n|' || m.kind || '|' || st.norm
            END AS work_key
        FROM m
        LEFT JOIN tag_strings ar ON ar.v = m.artist
        LEFT JOIN tag_strings ti ON ti.v = m.title
        LEFT JOIN tag_strings sr ON sr.v = m.series
        LEFT JOIN stem_strings st ON st.stem = m.stem
        LEFT JOIN folder_strings fo ON fo.folder = m.folder
        """
    )
    con.execute(
        f"""
        CREATE TABLE works AS
        WITH grouped AS (
            SELECT
                work_key,
                count(*) AS copies,
                count(DISTINCT host) AS hosts,
                count(*) FILTER (WHERE online) AS online_copies,
                count(DISTINCT host) FILTER (WHERE online) AS online_hosts,
                mode(artist) AS artist, mode(title) AS title, mode(album) AS album,
                mode(year) AS year,
                arg_max(
                    {{'kind': kind, 'series': series, 'season': season, 'episode': episode,
                      'name': stem, 'host': host, 'share': share, 'path': path,
                      'format': format, 'bitrate_kbps': bitrate_kbps, 'size': size,
                      'online': online, 'resolution': resolution}},
                    (online, lossless, coalesce(resolution, 0), coalesce(bitrate_kbps, 0),
                     coalesce(size, 0), host, share, path)
                ) AS b,
                max(mtime) AS newest_mtime
            FROM mk GROUP BY work_key
        )
        SELECT
            (row_number() OVER (ORDER BY work_key))::INTEGER AS work_id,
            work_key,
            b.kind AS kind, artist,
            coalesce(title, CASE WHEN b.series IS NULL THEN b.name END) AS title,
            album, year, b.series AS series, b.season AS season,
            b.episode AS episode,
            copies, hosts, online_copies, online_hosts,
            b.host AS best_host, b.share AS best_share, b.path AS best_path,
            b.format AS best_format, b.bitrate_kbps AS best_bitrate_kbps, b.size AS best_size,
            b.online AS best_online, b.resolution AS best_resolution,
            newest_mtime,
            ({PRIOR_WEIGHT} * ln(1 + copies))::FLOAT AS prior
        FROM grouped
        ORDER BY work_id
        """
    )
    con.execute(
        """
        CREATE TEMP TABLE mw AS
        SELECT w.work_id, mk.* EXCLUDE (work_key)
        FROM mk JOIN works w USING (work_key)
        """
    )
    con.execute("DROP TABLE mk")
    con.execute(
        """
        CREATE TABLE copies AS
        SELECT work_id, host, share, path, kind, format, bitrate_kbps, size, mtime, online
        FROM mw ORDER BY work_id  -- grouped by work; a full sort by path costs seconds
        """
    )


def _build_postings(con: duckdb.DuckDBPyConnection) -> None:
    """Tables `terms` and `postings` with BM25F impacts (field-weighted, length-normalised)."""
    bit = FIELD_BITS
    con.execute(
        f"""
        CREATE TEMP TABLE wf AS
        SELECT DISTINCT work_id, field, term FROM (
            SELECT work_id, {bit["artist"]} AS field, unnest(s.terms) AS term
            FROM (SELECT DISTINCT work_id, artist AS v FROM mw) x JOIN tag_strings s USING (v)
            UNION ALL
            SELECT work_id, {bit["title"]}, unnest(s.terms)
            FROM (SELECT DISTINCT work_id, title AS v FROM mw) x JOIN tag_strings s USING (v)
            UNION ALL
            SELECT work_id, {bit["album"]}, unnest(s.terms)
            FROM (SELECT DISTINCT work_id, album AS v FROM mw) x JOIN tag_strings s USING (v)
            UNION ALL
            SELECT work_id, {bit["albumartist"]}, unnest(s.terms)
            FROM (SELECT DISTINCT work_id, albumartist AS v FROM mw) x
            JOIN tag_strings s USING (v)
            UNION ALL
            SELECT work_id, {bit["genre"]}, unnest(s.terms)
            FROM (SELECT DISTINCT work_id, genre AS v FROM mw) x JOIN tag_strings s USING (v)
            UNION ALL
            SELECT work_id, {bit["series"]}, unnest(s.terms)
            FROM (SELECT DISTINCT work_id, series AS v FROM mw) x JOIN tag_strings s USING (v)
            UNION ALL
            SELECT work_id, {bit["folder"]}, unnest(s.terms)
            FROM (SELECT DISTINCT work_id, folder FROM mw) x JOIN folder_strings s USING (folder)
            UNION ALL
            SELECT work_id, {bit["name"]}, unnest(s.terms)
            FROM (SELECT DISTINCT work_id, stem FROM mw) x JOIN stem_strings s USING (stem)
        )
        """
    )
    weights = ", ".join(f"({bit[name]}, {weight})" for name, weight in FIELD_WEIGHTS.items())
    n_works = max(con.execute("SELECT count(*) FROM works").fetchone()[0], 1)
    con.execute(
        f"""
        CREATE TEMP TABLE tf AS
        WITH field_len AS (
            SELECT work_id, field, count(*) AS len FROM wf GROUP BY work_id, field
        ),
        avg_len AS (SELECT field, avg(len) AS avg_len FROM field_len GROUP BY field),
        weight(field, weight) AS (VALUES {weights})
        SELECT
            wf.work_id, wf.term,
            sum(weight.weight / (1 - {BM25_B} + {BM25_B} * fl.len / al.avg_len)) AS tfw,
            bit_or(wf.field)::UTINYINT AS fields
        FROM wf
        JOIN field_len fl USING (work_id, field)
        JOIN avg_len al USING (field)
        JOIN weight USING (field)
        GROUP BY wf.work_id, wf.term
        """
    )
    con.execute("DROP TABLE wf")
    con.execute(
        """
        CREATE TABLE terms AS
        SELECT (row_number() OVER (ORDER BY term))::INTEGER AS term_id, term, df
        FROM (SELECT term, count(*) AS df FROM tf GROUP BY term)
        ORDER BY term
        """
    )
    # Lucene's idf, always positive, so that tiny collections still rank.
    con.execute(
        f"""
        CREATE TABLE postings AS
        SELECT
            t.term_id, tf.work_id,
            (ln(1 + ({n_works} - t.df + 0.5) / (t.df + 0.5))
             * tf.tfw * ({BM25_K1} + 1) / (tf.tfw + {BM25_K1}))::FLOAT AS impact,
            tf.fields,
            w.online_copies > 0 AS visible
        FROM tf JOIN terms t USING (term) JOIN works w USING (work_id)
        ORDER BY t.term_id, tf.work_id
        """
    )
    con.execute("DROP TABLE tf")


if __name__ == "__main__" and sys.argv[1:] == ["--guess"]:
    # The guessing child of _start_guessing: JSON list of names in, JSON guesses out.
    json.dump(_guess_all(json.load(sys.stdin)), sys.stdout)
