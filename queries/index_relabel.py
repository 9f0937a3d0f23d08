"""Works whose copies are unchanged but some of which are on a host that went on or off line
(an update's "relabel" works), brought up to date from the copies on those hosts alone.

Such a work keeps its terms, counts, modes and newest copy; what changes is its number of
online copies and hosts, and perhaps its best copy (queries.index_works BEST_COPY_ORDER,
online first). Grouping it anew read every copy it has: a popular work has thousands, and
the hosts that switched hold few of them. So:

- its online counts move by the copies and hosts that switched (all of a host's copies
  share its online state);
- its best copy is the first of its old best copy and its copies on the switched hosts: a
  copy elsewhere did not change, and came after the old best. This holds unless the old
  best is on a host that went off line (it moves back past copies that did not change):
  those works are grouped anew from all their copies (temp table `regroup`);
- when the best copy changes, so do the columns taken from it (kind, series, season,
  episode; the title when the copies have none: the best copy's name), and the title's
  mode is read again for those works alone, from the one column.
"""

from __future__ import annotations

import duckdb

from queries.index_sources import LOSSLESS_FORMATS
from queries.index_works import BEST_COPY_ORDER, mode_select

# The columns of a work's best copy (as works_select builds it) and of its order.
_BEST = (
    "kind, series, season, episode, name, host, share, path, format, bitrate_kbps, size, "
    "online, resolution, lossless"
)


def note_switched(con: duckdb.DuckDBPyConnection) -> None:
    """Temp tables `moved`: the copies on the hosts of temp table `switched`, as they will
    be (online as in `hosts`), and `relabel` (work_id): their works. Taken before an update
    deletes and adds copies: those are of works grouped anew, which relabel_works skips."""
    con.execute(
        """
        CREATE TEMP TABLE moved AS
        SELECT c.work_id, c.kind, c.series, c.season, c.episode, c.stem AS name, c.host,
               c.share, c.path, c.format, c.bitrate_kbps, c.size,
               coalesce(h.online, false) AS online, c.resolution, c.lossless
        FROM copies c JOIN switched s USING (host) LEFT JOIN hosts h USING (host)
        """
    )
    con.execute("CREATE TEMP TABLE relabel AS SELECT DISTINCT work_id FROM moved")


def relabel_works(con: duckdb.DuckDBPyConnection) -> None:
    """Update in `works` the works of temp table `relabel` (work_id; note_switched), whose
    copies did not change but for the online state of those on the hosts that switched
    (temp table `moved`). Temp table `regroup` (work_id): the ones left to group anew from
    their copies."""
    con.execute(
        """
        CREATE TEMP TABLE regroup AS
        SELECT w.work_id FROM works w SEMI JOIN relabel USING (work_id)
        WHERE w.best_host IN (
            SELECT s.host FROM switched s LEFT JOIN hosts h USING (host)
            WHERE NOT coalesce(h.online, false)
        )
        """
    )
    lossless = ", ".join(f"'{f}'" for f in LOSSLESS_FORMATS)  # our constants
    # `lossless` as prepare_rows computes it from the (lower case) format: the old best
    # copy's is the same value, and so is its place in BEST_COPY_ORDER.
    con.execute(
        "DELETE FROM moved WHERE work_id NOT IN (SELECT work_id FROM relabel) "
        "OR work_id IN (SELECT work_id FROM regroup)"
    )
    con.execute(
        f"""
        CREATE TEMP TABLE relabelled AS
        WITH counted AS (
            SELECT work_id,
                sum(CASE WHEN online THEN 1 ELSE -1 END) AS d_copies,
                count(DISTINCT host) FILTER (WHERE online)
                    - count(DISTINCT host) FILTER (WHERE NOT online) AS d_hosts
            FROM moved GROUP BY work_id
        ),
        candidates AS (
            SELECT *, true AS changed FROM moved
            UNION ALL
            SELECT w.work_id, w.kind, w.series, w.season, w.episode, NULL, w.best_host,
                   w.best_share, w.best_path, w.best_format, w.best_bitrate_kbps, w.best_size,
                   w.best_online, w.best_resolution,
                   lower(w.best_format) IN ({lossless}), false
            FROM works w SEMI JOIN moved m USING (work_id)
            WHERE w.best_host NOT IN (SELECT host FROM switched)
        ),
        best AS (
            SELECT work_id,
                arg_min({{{", ".join(f"'{c}': {c}" for c in _BEST.split(", "))},
                          'changed': changed}}, {BEST_COPY_ORDER}) AS b
            FROM candidates GROUP BY work_id
        )
        SELECT work_id, d_copies, d_hosts, b FROM counted JOIN best USING (work_id)
        """
    )
    con.execute(
        f"""
        CREATE TEMP TABLE relabelled_titles AS
        WITH c AS (
            SELECT work_id, title FROM copies
            SEMI JOIN (SELECT work_id FROM relabelled WHERE b.changed) USING (work_id)
        )
        {mode_select("title")}
        """
    )
    # A work's row replaced whole: DuckDB updates string columns in place several times
    # slower than it deletes and appends rows.
    con.execute(
        """
        CREATE TEMP TABLE relabelled_works AS
        SELECT w.* REPLACE (
            w.online_copies + r.d_copies AS online_copies,
            w.online_hosts + r.d_hosts AS online_hosts,
            r.b.kind AS kind,
            CASE WHEN r.b.changed
                THEN coalesce(t.title, CASE WHEN r.b.series IS NULL THEN r.b.name END)
                ELSE w.title END AS title,
            r.b.series AS series, r.b.season AS season, r.b.episode AS episode,
            r.b.host AS best_host, r.b.share AS best_share, r.b.path AS best_path,
            r.b.format AS best_format, r.b.bitrate_kbps AS best_bitrate_kbps,
            r.b.size AS best_size, r.b.online AS best_online,
            r.b.resolution AS best_resolution
        )
        FROM works w JOIN relabelled r USING (work_id)
        LEFT JOIN relabelled_titles t USING (work_id)
        """
    )
    con.execute("DELETE FROM works WHERE work_id IN (SELECT work_id FROM relabelled)")
    con.execute("INSERT INTO works BY NAME SELECT * FROM relabelled_works")
    con.execute("DROP TABLE relabelled_works")
    con.execute("DROP TABLE moved")
    con.execute("DROP TABLE relabelled")
    con.execute("DROP TABLE relabelled_titles")
