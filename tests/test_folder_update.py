"""A host's folder rows brought up to date from the stored ones (jobs.folder_update) are the
rows folder_summaries computes over every row, whatever was added, removed or changed."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from sharecrawl.jobs.folder_update import changed_folders, updated_folder_summaries
from sharecrawl.jobs.subtree_hash import folder_summaries
from tests.test_jobs import listing

# Trees of few names, so that folders are shared and most of a tree is unchanged by a change.
trees = st.dictionaries(
    st.lists(st.sampled_from(["a", "b", "c", "é d"]), min_size=1, max_size=4).map("/".join),
    st.tuples(st.integers(0, 10**6), st.integers(0, 2 * 10**15)),
    min_size=1,
    max_size=30,
)


def rows_by_path(table: pa.Table) -> dict[str, tuple]:
    return {
        r["path"]: (r["is_dir"], r["size"], r["mtime"])
        for r in table.select(["path", "is_dir", "size", "mtime"]).to_pylist()
    }


def changed_rows(before: pa.Table, after: pa.Table) -> pa.Table:
    """The rows, before and after, of every path whose row differs (or exists on one side)."""
    old, new = rows_by_path(before), rows_by_path(after)
    paths = {p for p in old.keys() | new.keys() if old.get(p) != new.get(p)}
    return pa.concat_tables(
        [
            t.filter(pa.array([p in paths for p in t["path"].to_pylist()], pa.bool_()))
            for t in (before, after)
        ]
    )


def by_path(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: r["path"])


@settings(max_examples=80, deadline=None)
@given(trees, st.data(), st.booleans())
def test_an_update_equals_hashing_every_folder(before, data, superset) -> None:
    """A few files changed, deleted (a folder emptied, at times) and added beside existing
    ones or in a new folder, the rest of the tree as it was (so that the stored hashes of
    unchanged folders are what the update stands on); `changed` exactly the differing rows,
    or a superset of them."""
    paths = sorted(before)
    after = dict(before)
    for path in data.draw(st.lists(st.sampled_from(paths), max_size=3)):
        if data.draw(st.booleans()):
            after.pop(path, None)
        else:
            after[path] = (before[path][0] + 1, before[path][1])
    for path in data.draw(st.lists(st.sampled_from(paths), max_size=2)):
        folder = path.rpartition("/")[0]
        new_name = data.draw(st.sampled_from(["new.mp3", "n/ew.mp3"]))
        after[f"{folder}/{new_name}" if folder else new_name] = (7, 7)
    old, new = listing("h", "p", before), listing("h", "p", after)
    changed = changed_rows(old, new)
    if superset:
        changed = pa.concat_tables([changed, new])
    updated = updated_folder_summaries(new, folder_summaries(old), changed)
    assert updated is not None
    assert by_path(updated) == by_path(folder_summaries(new))


def test_nothing_changed_gives_the_stored_rows_and_a_missing_one_gives_none() -> None:
    files = {"a/b/1.mp3": (10, 1), "a/2.mp3": (20, 2), "c/3.mp3": (30, 3)}
    table = listing("h", "p", files)
    known = folder_summaries(table)
    nothing = table.slice(0, 0)
    assert by_path(updated_folder_summaries(table, known, nothing)) == by_path(known)
    without_c = known.filter(pa.array([p != "c" for p in known["path"].to_pylist()]))
    assert updated_folder_summaries(table, without_c, nothing) is None
    # c's row is not needed when c is one of the folders that changed
    changed = table.filter(pa.array([p == "c/3.mp3" for p in table["path"].to_pylist()]))
    assert by_path(updated_folder_summaries(table, without_c, changed)) == by_path(known)


def test_the_folders_that_may_change_are_the_changed_paths_and_their_ancestors() -> None:
    changed = listing("h", "p", {"a/b/c.mp3": (1, 1)}).slice(0, 1)
    assert changed["path"].to_pylist() == ["a/b/c.mp3"]
    keys = changed_folders(changed).to_pylist()
    assert keys == ["h\x00s\x00a", "h\x00s\x00a/b", "h\x00s\x00a/b/c.mp3"]
