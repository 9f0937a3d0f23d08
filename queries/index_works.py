"""From a crawldb version's media rows to works and postings: the SQL a full build runs over
every copy and an update over the works it touched, so both give the same rows.
- Strings are tokenised and words stemmed once each (tables `strings`, `words`), so an update
  handles only what it has not met.
- A work key comes from the copy alone (artist + title; series, season, episode; film title +
  year; else the name stem, in its folder when generic); its id is the top 53 bits of its MD5
  (exact in JavaScript), colliding keys rehashed with a counter in key order.
- Display columns are the copies' most common value (ties: the greatest); the best copy is
  the first in BEST_COPY_ORDER.
- A posting's weight is BM25F's term-frequency part, with a fixed pivot per field (pivoted
  normalisation, after Singhal, Buckley and Mitra), so it depends on its work alone; the idf
  is applied when read (queries.search_arrays).
A failed build or update closes its connection: what it registered needs no cleanup then."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from pathlib import Path

import duckdb
import pyarrow as pa

from sharecrawl.crawl_io import schema
from sharecrawl.crawl_io.crawldb.host_parts import read_parquet
from sharecrawl.crawl_io.crawldb.media_changes import INDEXED_COLUMNS
from sharecrawl.queries import text
from sharecrawl.queries.querylang import FIELD_BITS, FIELD_WEIGHTS
from sharecrawl.queries.sandbox import quote
from sharecrawl.queries.video_guess import Guess, start_guessing

LOSSLESS_FORMATS = ("flac", "ape", "wav", "wv", "alac", "aiff", "aif", "dsf", "dff", "tta")
TAGS = ("artist", "title", "album", "albumartist", "genre")
# The columns of a prepared media row (and of the index's `copies`, with work_id, online).
ROW_COLUMNS = (
    "host, share, path, size, mtime, kind, format, artist, title, album, albumartist, genre, "
    "year, bitrate_kbps, series, season, episode, folder, stem, filename, lossless, resolution"
)
# The strings a prepared row gives: its tags, name stem, folder and folder's own name.
STRING_COLUMNS = (*TAGS, "series", "stem", "folder", "parse_filename(folder, false, '/')")


def media_rows(con: duckdb.DuckDBPyConnection, parts: Sequence[Path]) -> str:
    """SQL for a FROM clause: the media parts' INDEXED_COLUMNS (for no parts, an empty relation
    registered on `con`); a read_parquet in the query binds faster than a relation."""
    columns = ", ".join(INDEXED_COLUMNS)
    if not parts:
        con.register("no_media", schema.MEDIA.empty_table().select(list(INDEXED_COLUMNS)))
        return "no_media"
    files = ", ".join(quote(str(p)) for p in parts)  # paths of the crawl dir's own parts
    return f"(SELECT {columns} FROM read_parquet([{files}], union_by_name = true))"


def load_hosts(con: duckdb.DuckDBPyConnection, version_dir: Path) -> None:
    """Table `hosts` (host, url, online, name) of the version, replacing any there; `name`
    is how people know the host: its NetBIOS name, else its DNS name, else its key."""
    con.register("hosts_src", read_parquet(version_dir / "hosts.parquet", schema.HOSTS))
    con.execute(
        f"""
        CREATE OR REPLACE TABLE hosts AS
        SELECT host, any_value(url) AS url, coalesce(bool_or(online), false) AS online,
               any_value({schema.HOST_NAME_SQL}) AS name
        FROM hosts_src GROUP BY host ORDER BY host
        """
    )
    con.unregister("hosts_src")


def is_lossless(format_sql: str) -> str:
    """SQL: whether the format `format_sql` is lossless."""
    return f"lower({format_sql}) IN ({', '.join(map(quote, LOSSLESS_FORMATS))})"


def prepare_rows(con: duckdb.DuckDBPyConnection, source: str, target: str) -> None:
    """Temp table `target` (ROW_COLUMNS): the media rows of relation `source`, cleaned, the path
    split into folder, file name and stem (string functions: cheaper than regular expressions)."""
    tags = ", ".join(f"nullif(trim(s.{tag}), '') AS {tag}" for tag in TAGS)
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {target} AS
        SELECT
            s.host, s.share, s.path, s.size, s.mtime,
            lower(coalesce(s.kind, 'audio')) AS kind,
            lower(s.format) AS format, {tags}, s.year, s.bitrate_kbps,
            nullif(trim(s.series), '') AS series, s.season, s.episode,
            CASE WHEN length(s.path) > length(s.filename)
                 THEN left(s.path, length(s.path) - length(s.filename) - 1) ELSE '' END
                AS folder,
            regexp_replace(s.filename, '\\.[^./]{{1,5}}$', '') AS stem,
            s.filename,
            {is_lossless("s.format")} AS lossless,
            CASE WHEN regexp_matches(s.path, '\\d\\d\\d[pPiI]') THEN
                try_cast(regexp_extract(lower(s.path),
                                        '(?:^|[^0-9])(\\d{{3,4}})[pi](?:[^a-z]|$)', 1)
                         AS INTEGER)
            END AS resolution
        FROM (SELECT *, parse_filename(path, false, '/') AS filename FROM {source}) s
        """
    )


def key_media(con: duckdb.DuckDBPyConnection, source: str, *, few: bool = False) -> None:
    """Temp table `mk`: the prepared rows of `source`, videos with neither series nor title filled
    by guessit (in a child process meanwhile), with their work keys; their strings added."""
    prepare_rows(con, source, "m")
    blank = con.execute(
        "SELECT DISTINCT filename FROM m "
        "WHERE kind = 'video' AND series IS NULL AND title IS NULL ORDER BY filename"
    )
    guesses = start_guessing([name for (name,) in blank.fetchall()])
    add_row_strings(con, "m")
    if _apply_guesses(con, "m", guesses()):
        add_row_strings(con, "m")  # the titles and series guessed
    key_rows(con, "m", "mk", few=few)
    con.execute("DROP TABLE m")


# the columns of a Guess (queries.video_guess)
_GUESSES = pa.schema(
    [("filename", pa.string()), ("g_title", pa.string()), ("g_series", pa.string())]
    + [(c, pa.int32()) for c in ("g_season", "g_episode", "g_year", "g_resolution")]
)


def _apply_guesses(con: duckdb.DuckDBPyConnection, rows: str, guesses: list[Guess]) -> bool:
    """Fill the blanks of `rows` from the guesses; whether there were any."""
    if not guesses:
        return False
    columns = zip(*guesses, strict=True)
    con.register(
        "guesses", pa.table(dict(zip(_GUESSES.names, columns, strict=True)), schema=_GUESSES)
    )
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
    con.unregister("guesses")
    return True


def create_strings(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE TABLE strings (v VARCHAR, norm VARCHAR, terms VARCHAR[], generic BOOLEAN)")
    con.execute(
        "CREATE TABLE words (word VARCHAR, surface VARCHAR, forms VARCHAR[], "
        "indexable BOOLEAN, generic BOOLEAN)"
    )


STRINGS_CHUNK = 100_000  # strings tokenised at a time: a build's Python objects stay bounded


def add_row_strings(con: duckdb.DuckDBPyConnection, rows: str) -> None:
    """Add to `strings` every string of `rows` not there yet."""
    selects = " UNION ".join(f"SELECT {c} AS v FROM {rows}" for c in STRING_COLUMNS)
    # an anti join, which hashes the few new values, not a NOT IN, which hashes `strings`
    new = con.sql(
        f"SELECT x.v FROM ({selects}) x ANTI JOIN strings s ON s.v = x.v "
        "WHERE x.v IS NOT NULL ORDER BY x.v"
    )
    values = new.to_arrow_table().column(0)  # Arrow's strings: compact, unlike Python's
    for start in range(0, len(values), STRINGS_CHUNK):
        _add_strings(con, values.slice(start, STRINGS_CHUNK).to_pylist())


def _add_strings(con: duckdb.DuckDBPyConnection, values: list[str]) -> None:
    """Add to `strings` those `values` (distinct, none there yet), their words to `words`."""
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
    con.unregister("string_words")


def _add_words(con: duckdb.DuckDBPyConnection, distinct_words: list[str]) -> None:
    """Add to `words` the forms of those of `distinct_words` (distinct) not there yet."""
    con.register("met_words", pa.table({"word": pa.array(distinct_words, pa.string())}))
    new = con.sql("SELECT word FROM met_words ANTI JOIN words USING (word) ORDER BY word")
    new_words = new.to_arrow_table().column(0).to_pylist()
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
    con.from_arrow(word_forms).insert_into("words")


BM25_K1 = 1.2
BM25_B = 0.5  # names and tags are short; length matters less than in prose
# Typical number of distinct terms (surface forms, stems, loose spellings) of a work's field:
# the pivot of its length normalisation.
FIELD_PIVOTS: dict[str, float] = dict(
    artist=3.0, title=4.0, album=4.0, albumartist=3.0, genre=2.0, series=4.0, folder=12.0, name=6.0
)
FIELD_COLUMNS = {field: "stem" if field == "name" else field for field in FIELD_BITS}
PRIOR_WEIGHT = 0.3  # score bonus per ln(1 + copies): popular works win ties
# Copies of a work, best first (and the best copy is the first): a total order.
BEST_COPY_ORDER = (
    "(NOT online, NOT lossless, -coalesce(resolution, 0), -coalesce(bitrate_kbps, 0), "
    "-coalesce(size, 0), host, share, path)"
)
# A work's best copy, as works_select takes it from its copies (name: the stem).
BEST_COPY = (
    "kind series season episode name host share path format bitrate_kbps size online resolution"
).split()
# The columns whose most common value among a work's copies is the work's.
_MODE_COLUMNS = ("artist", "title", "album", "year")
# The columns of copies a work's row is made of (works_select): the long folder and file
# names left out of what a query reads and holds.
_GROUPED_COLUMNS = (
    "work_id, host, share, path, size, mtime, kind, format, artist, title, album, year, "
    "bitrate_kbps, series, season, episode, stem, lossless, resolution, online"
)


def work_id_sql(key: str, attempt: int = 0) -> str:
    salted = key if attempt == 0 else f"{key} || '#{attempt}'"
    return f"(md5_number({salted}) >> 75)::BIGINT"


def key_rows(con: duckdb.DuckDBPyConnection, rows: str, target: str, *, few: bool = False) -> None:
    """Temp table `target`: the prepared rows of `rows` with their work keys. `few` rows first take
    their strings out of the big `strings` table in one pass."""
    strings = "strings"
    if few:
        strings = "row_strings"
        con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE row_strings AS
            SELECT v, norm, generic FROM strings WHERE v IN (
                SELECT unnest([artist, title, series, stem, parse_filename(folder, false, '/')])
                FROM {rows})
            """
        )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {target} AS
        SELECT m.*,
            CASE
                WHEN m.kind = 'video' AND sr.norm <> '' AND m.episode IS NOT NULL THEN
                    'e|' || sr.norm || '|' || coalesce(m.season, 0) || '|' || m.episode
                WHEN m.kind = 'video' AND ti.norm <> '' THEN
                    'f|' || ti.norm || '|' || coalesce(m.year::VARCHAR, '')
                WHEN ar.norm <> '' AND ti.norm <> '' THEN
                    'a|' || m.kind || '|' || ar.norm || '|' || ti.norm
                WHEN st.generic THEN
                    'g|' || m.kind || '|' || coalesce(fo.norm, '') || '|' || st.norm
                ELSE 'n|' || m.kind || '|' || st.norm
            END AS work_key
        FROM {rows} m
        LEFT JOIN {strings} ar ON ar.v = m.artist
        LEFT JOIN {strings} ti ON ti.v = m.title
        LEFT JOIN {strings} sr ON sr.v = m.series
        LEFT JOIN {strings} st ON st.v = m.stem
        LEFT JOIN {strings} fo ON fo.v = parse_filename(m.folder, false, '/')
        """
    )
    if few:
        con.execute("DROP TABLE row_strings")


def assign_work_ids(con: duckdb.DuckDBPyConnection, keyed: str, *, existing: bool) -> None:
    """Temp table `keyed_ids` (work_key, work_id) for the keys of `keyed`: a key in `works` keeps
    its id (`existing`), a new one gets its hash, distinct from every id in use."""
    known = "LEFT JOIN works w USING (work_key)" if existing else ""
    kept = "w.work_id" if existing else "NULL::BIGINT"
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE keyed_ids AS
        SELECT k.work_key, coalesce({kept}, {work_id_sql("k.work_key")}) AS work_id,
               {kept} IS NOT NULL AS fixed
        FROM (SELECT DISTINCT work_key FROM {keyed}) k {known}
        """
    )
    # A new key clashes with a new key before it or with any id in `works` (those of the keys
    # `keyed` kept among them): asking `works` for ids beats ranking its every key.
    in_works = "OR work_id IN (SELECT work_id FROM works)" if existing else ""
    clash_sql = f"""
        SELECT work_key FROM (
            SELECT work_key, work_id,
                   row_number() OVER (PARTITION BY work_id ORDER BY work_key) AS n
            FROM keyed_ids WHERE NOT fixed
        ) WHERE n > 1 {in_works}
    """
    attempt = 0
    while True:
        clashing = [key for (key,) in con.execute(clash_sql).fetchall()]
        if not clashing:
            return
        attempt += 1
        con.execute(
            f"UPDATE keyed_ids SET work_id = {work_id_sql('work_key', attempt)} "
            "WHERE work_key = ANY(?)",
            [clashing],
        )


def copies_select(keyed: str) -> str:
    """The `copies` rows of the keyed rows `keyed` (with `keyed_ids` and `hosts`)."""
    columns = ", ".join(f"k.{c.strip()}" for c in ROW_COLUMNS.split(","))
    return f"""
        SELECT i.work_id, {columns}, coalesce(h.online, false) AS online
        FROM {keyed} k JOIN keyed_ids i USING (work_key) LEFT JOIN hosts h USING (host)
    """


def mode_select(column: str, rows: str = "c", count: str = "count(*)") -> str:
    """The most common non-null value of `column` per work of relation `rows` (ties: the
    greatest), each row counting `count` copies."""
    return f"""
        SELECT work_id, arg_max(v, (n, v)) AS {column} FROM (
            SELECT work_id, {column} AS v, {count} AS n FROM {rows}
            WHERE {column} IS NOT NULL GROUP BY ALL
        ) GROUP BY work_id
    """


def best_columns(struct: str) -> str:
    """The `works` columns of the best copy in `struct`, a BEST_COPY struct."""
    return ", ".join(f"{struct}.{c} AS best_{c}" for c in BEST_COPY[5:])


def works_select(keys: str, copies: str = "copies", *, materialize: bool = False) -> str:
    """The `works` rows of the works in `keys` (work_id, work_key) with copies in relation `copies`
    (every copy of those works). A query is read once into memory (`materialize`)."""
    cte = "MATERIALIZED " if materialize else ""
    best = ", ".join(f"'{c}': {'stem' if c == 'name' else c}" for c in BEST_COPY)
    modes = "\n".join(
        f"LEFT JOIN ({mode_select(column, 'tags', 'sum(n)')}) USING (work_id)"
        for column in _MODE_COLUMNS
    )
    return f"""
        WITH c AS {cte}(SELECT {_GROUPED_COLUMNS} FROM {copies}),
        -- the copies of a work mostly share their tags: the modes count these few rows
        tags AS (SELECT work_id, {", ".join(_MODE_COLUMNS)}, count(*) AS n FROM c GROUP BY ALL),
        grouped AS (
            SELECT
                work_id,
                count(*) AS copies,
                count(DISTINCT host) AS hosts,
                count(*) FILTER (WHERE online) AS online_copies,
                count(DISTINCT host) FILTER (WHERE online) AS online_hosts,
                arg_min({{{best}}}, {BEST_COPY_ORDER}) AS b,
                max(mtime) AS newest_mtime
            FROM c GROUP BY work_id
        )
        SELECT
            g.work_id, k.work_key,
            b.kind AS kind, artist,
            coalesce(title, CASE WHEN b.series IS NULL THEN b.name END) AS title,
            album, year, b.series AS series, b.season AS season, b.episode AS episode,
            copies, hosts, online_copies, online_hosts,
            {best_columns("b")}, newest_mtime,
            ({PRIOR_WEIGHT} * ln(1 + copies))::FLOAT AS prior
        FROM grouped g
        JOIN {keys} k USING (work_id)
        {modes}
    """


def work_postings(con: duckdb.DuckDBPyConnection, copies: str = "copies") -> None:
    """Temp table `new_postings` (work_id, term, fields, weight) of the works in `copies`."""
    values = " UNION ALL ".join(
        f"SELECT DISTINCT work_id, {FIELD_BITS[field]} AS field, {column} AS v FROM c"
        for field, column in FIELD_COLUMNS.items()
    )
    # every field's values first, then one join with `strings` (a big table: read once)
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE wf AS
        WITH c AS (SELECT work_id, {", ".join(FIELD_COLUMNS.values())} FROM {copies})
        SELECT DISTINCT work_id, field, unnest(s.terms) AS term
        FROM ({values}) x JOIN strings s USING (v)
        """
    )
    lengths = ", ".join(
        f"coalesce(sum(len) FILTER (WHERE field = {bit}), 0) AS len_{bit}"
        for bit in FIELD_BITS.values()
    )
    # the sum over fields in a fixed order, so that every build computes the same float
    tfw = " + ".join(
        f"CASE WHEN tf.fields & {FIELD_BITS[f]} <> 0 THEN {FIELD_WEIGHTS[f]} / "
        f"(1 - {BM25_B} + {BM25_B} * wl.len_{FIELD_BITS[f]} / {FIELD_PIVOTS[f]}) ELSE 0 END"
        for f in FIELD_BITS
    )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE new_postings AS
        WITH work_lens AS (
            SELECT work_id, {lengths}
            FROM (SELECT work_id, field, count(*) AS len FROM wf GROUP BY ALL)
            GROUP BY work_id
        ),
        tf AS (SELECT work_id, term, bit_or(field)::UTINYINT AS fields FROM wf GROUP BY ALL),
        weighted AS (
            SELECT tf.work_id, tf.term, tf.fields, ({tfw}) AS tfw
            FROM tf JOIN work_lens wl USING (work_id)
        )
        SELECT work_id, term, fields,
               (tfw * ({BM25_K1} + 1) / (tfw + {BM25_K1}))::FLOAT AS weight
        FROM weighted
        """
    )
    con.execute("DROP TABLE wf")
