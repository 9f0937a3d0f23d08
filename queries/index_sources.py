"""What the search index reads from a crawldb version, made ready for grouping into works:
media rows with their paths split up, the hosts, and every distinct string's words.

The `strings` table of the index keeps each distinct tag value, folder, folder name and name
stem with its normalised form (text.normalised), its index terms (text.terms) and whether
it is a generic name (text.is_generic_name), so that an update tokenises only the strings
it has not met before. Python splits each string into words (the same text.words the
queries use) and computes each distinct word's forms once; DuckDB assembles the per-string
results, several times faster than text.terms string by string. The `words` table keeps
each word's forms (text.word_forms), so that an update stems only the words it has not met
before: a new string (a moved folder, a new file's name) is mostly of known words, and
stemming was half the cost of its strings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import chain
from pathlib import Path

import duckdb
import pyarrow as pa

from crawl_io import schema
from crawl_io.media_changes import INDEXED_COLUMNS
from queries import text
from queries.sandbox import quote
from queries.video_guess import Guess, start_guessing

LOSSLESS_FORMATS = ("flac", "ape", "wav", "wv", "alac", "aiff", "aif", "dsf", "dff", "tta")
# The columns of a prepared media row (and of the index's `copies`, with work_id, online).
ROW_COLUMNS = (
    "host, share, path, size, mtime, kind, format, artist, title, album, albumartist, genre, "
    "year, bitrate_kbps, series, season, episode, folder, stem, filename, lossless, resolution"
)
# The strings a prepared row gives: its tags, name stem, folder and folder's own name.
STRING_COLUMNS = (
    "artist",
    "title",
    "album",
    "albumartist",
    "genre",
    "series",
    "stem",
    "folder",
    "parse_filename(folder, false, '/')",
)


def media_rows(con: duckdb.DuckDBPyConnection, parts: Sequence[Path]) -> str:
    """A relation, as SQL text for a FROM clause, of the media parts' INDEXED_COLUMNS; of
    no parts, an empty one (registered on `con`). The parts are read by the query that
    names it, into a table (the index names no path). A read_parquet in the query rather
    than a relation of DuckDB's Python API: binding that relation cost 0.46 s more over the
    2,100 parts of 2 M media, 0.02 s over 83."""
    columns = ", ".join(INDEXED_COLUMNS)
    if not parts:
        con.register("no_media", schema.MEDIA.empty_table().select(list(INDEXED_COLUMNS)))
        return "no_media"
    files = ", ".join(quote(str(p)) for p in parts)  # paths of the crawl dir's own parts
    return f"(SELECT {columns} FROM read_parquet([{files}], union_by_name = true))"


def load_hosts(con: duckdb.DuckDBPyConnection, version_dir: Path) -> None:
    """Table `hosts` (host, url, online) of the version, replacing any there."""
    hosts_file = version_dir / "hosts.parquet"
    if hosts_file.exists():
        con.register("hosts_src", con.read_parquet(str(hosts_file)))
    else:
        con.register("hosts_src", schema.HOSTS.empty_table())
    con.execute(
        """
        CREATE OR REPLACE TABLE hosts AS
        SELECT host, any_value(url) AS url, coalesce(bool_or(online), false) AS online
        FROM hosts_src GROUP BY host ORDER BY host
        """
    )
    con.unregister("hosts_src")


def prepare_rows(con: duckdb.DuckDBPyConnection, source: str, target: str) -> None:
    """Temp table `target` (ROW_COLUMNS): the media rows of relation `source`, cleaned, the
    path split into folder, file name and stem. String functions rather than regular
    expressions on the whole path: several times cheaper per row; a resolution is looked
    for only in paths holding three digits."""
    lossless = ", ".join(f"'{f}'" for f in LOSSLESS_FORMATS)  # our constants
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {target} AS
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
            lower(s.format) IN ({lossless}) AS lossless,
            CASE WHEN regexp_matches(s.path, '\\d\\d\\d[pPiI]') THEN
                try_cast(regexp_extract(lower(s.path),
                                        '(?:^|[^0-9])(\\d{{3,4}})[pi](?:[^a-z]|$)', 1)
                         AS INTEGER)
            END AS resolution
        FROM (SELECT *, parse_filename(path, false, '/') AS filename FROM {source}) s
        """
    )


def start_guesses(con: duckdb.DuckDBPyConnection, rows: str) -> Callable[[], list[Guess]]:
    """Start guessing the videos of `rows` that have neither a series nor a title."""
    names = [
        name
        for (name,) in con.execute(
            f"SELECT DISTINCT filename FROM {rows} "
            "WHERE kind = 'video' AND series IS NULL AND title IS NULL ORDER BY filename"
        ).fetchall()
    ]
    return start_guessing(names)


def apply_guesses(con: duckdb.DuckDBPyConnection, rows: str, guesses: list[Guess]) -> bool:
    """Fill the blanks of `rows` from the guesses (their new strings: add_row_strings);
    whether there were any (else there is no new string to look for)."""
    if not guesses:
        return False
    table = pa.table(
        {
            "filename": pa.array([g[0] for g in guesses], pa.string()),
            "g_title": pa.array([g[1] for g in guesses], pa.string()),
            "g_series": pa.array([g[2] for g in guesses], pa.string()),
            "g_season": pa.array([g[3] for g in guesses], pa.int32()),
            "g_episode": pa.array([g[4] for g in guesses], pa.int32()),
            "g_year": pa.array([g[5] for g in guesses], pa.int32()),
            "g_resolution": pa.array([g[6] for g in guesses], pa.int32()),
        }
    )
    con.register("guesses", table)
    try:
        con.execute(
            f"""
            UPDATE {rows} AS m SET
                title = g.g_title, series = g.g_series,
                season = coalesce(m.season, g.g_season),
                episode = coalesce(m.episode, g.g_episode),
                year = coalesce(m.year, g.g_year),
                resolution = coalesce(m.resolution, g.g_resolution)
            FROM guesses g
            WHERE m.filename = g.filename AND m.kind = 'video'
              AND m.series IS NULL AND m.title IS NULL
            """
        )
    finally:
        con.unregister("guesses")
    return True


def create_strings(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE TABLE strings (v VARCHAR, norm VARCHAR, terms VARCHAR[], generic BOOLEAN)")
    _create_words(con)


def _create_words(con: duckdb.DuckDBPyConnection) -> None:
    """Table `words`, if missing (an index built before it existed gains it on update)."""
    con.execute(
        "CREATE TABLE IF NOT EXISTS words (word VARCHAR, surface VARCHAR, forms VARCHAR[], "
        "indexable BOOLEAN, generic BOOLEAN)"
    )


def add_row_strings(con: duckdb.DuckDBPyConnection, rows: str) -> None:
    """Add to `strings` every string of `rows` not there yet."""
    selects = " UNION ".join(f"SELECT {c} AS v FROM {rows}" for c in STRING_COLUMNS)
    # an anti join, which hashes the few new values, not a NOT IN, which hashes `strings`
    values = con.sql(
        f"SELECT x.v FROM ({selects}) x ANTI JOIN strings s ON s.v = x.v "
        "WHERE x.v IS NOT NULL ORDER BY x.v"
    )
    add_strings(con, values.to_arrow_table().column(0).to_pylist())


def add_strings(con: duckdb.DuckDBPyConnection, values: list[str]) -> None:
    """Add `values` (distinct, not yet there) to `strings`."""
    if not values:
        return
    words = [text.words(v) for v in values]
    joined = [text.compounds(v) for v in values]
    distinct_words = sorted(set(chain.from_iterable(words)) | set(chain.from_iterable(joined)))
    _add_words(con, distinct_words)
    string_words = pa.table(
        {
            "v": pa.array(values, pa.string()),
            "words": pa.array(words, pa.list_(pa.string())),
            "joined": pa.array(joined, pa.list_(pa.string())),
        }
    )
    con.register("string_words", string_words)
    # Strings without words (punctuation only) normalise to '' and are generic, as in text.
    # A compound's joined form adds terms, not words: the normalised form is of the words.
    try:
        con.execute(
            """
            INSERT INTO strings
            WITH sw AS (
                SELECT v, unnest(words) AS word, generate_subscripts(words, 1) AS pos,
                       false AS extra
                FROM string_words
                UNION ALL
                SELECT v, unnest(joined), generate_subscripts(joined, 1), true
                FROM string_words
            )
            SELECT s.v,
                coalesce(x.norm, '') AS norm,
                coalesce(x.terms, []::VARCHAR[]) AS terms,
                coalesce(x.generic, true) AS generic
            FROM string_words s LEFT JOIN (
                SELECT sw.v,
                    string_agg(wf.surface, ' ' ORDER BY sw.pos) FILTER (WHERE NOT sw.extra)
                        AS norm,
                    list_distinct(flatten(list(wf.forms) FILTER (WHERE wf.indexable))) AS terms,
                    bool_and(wf.generic) FILTER (WHERE wf.indexable AND NOT sw.extra)
                        AS generic
                FROM sw JOIN words wf USING (word)
                GROUP BY sw.v
            ) x USING (v)
            """
        )
    finally:
        con.unregister("string_words")


def _add_words(con: duckdb.DuckDBPyConnection, distinct_words: list[str]) -> None:
    """Add to `words` the forms of those of `distinct_words` (distinct) not there yet."""
    _create_words(con)
    con.register("met_words", pa.table({"word": pa.array(distinct_words, pa.string())}))
    try:
        new = con.sql("SELECT word FROM met_words ANTI JOIN words USING (word) ORDER BY word")
        new_words = new.to_arrow_table().column(0).to_pylist()
    finally:
        con.unregister("met_words")
    if not new_words:
        return
    forms = [text.word_forms(w) for w in new_words]
    word_forms = pa.table(
        {
            "word": pa.array(new_words, pa.string()),
            "surface": pa.array([f[0] for f in forms], pa.string()),
            "forms": pa.array([list(f) for f in forms], pa.list_(pa.string())),
            "indexable": pa.array([text.indexable(f[0]) for f in forms], pa.bool_()),
            "generic": pa.array([text.is_generic_word(f[0]) for f in forms], pa.bool_()),
        }
    )
    con.register("word_forms", word_forms)
    try:
        con.execute("INSERT INTO words SELECT * FROM word_forms")
    finally:
        con.unregister("word_forms")
