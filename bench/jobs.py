"""Benchmark: the round's listing jobs on mrjob's local runner against DuckDB on the same Parquet.

    .venv/bin/python bench/jobs.py [--sizes 1000000,2000000] [--hosts 4] [--repeat 5]

Generates a synthetic listing (hosts x artists x albums x tracks, in range partitions of 100
artists, too big on purpose so the split job has work), one Parquet part per host written as
a fetch writes it (partition after partition, each in canonical order), in a temporary
folder. For each size it times, best of `--repeat` runs each:
- the subtree-hash job alone (partition hash, counts, bytes), one runner start, against one
  DuckDB query computing the same per-partition result (checked equal);
- the round's listing job: hashes and the partition split's plan in one runner start, as
  Update runs them, against DuckDB computing the hashes and the per-folder costs the split
  aggregates (the depth-first split itself is sequential and has no SQL counterpart), and
  against the former way, two runner starts (the hash job, then the split job alone);
- the partition-split job alone against DuckDB's per-folder costs, in CPU seconds (its
  tasks' CPU, start-up included, and the runner's in this process; DuckDB's threads' CPU):
  on a shared machine CPU time is less noisy than wall time;
and prints records/s, the input-doubling cost, peak memory and, last, the ratios (goal <= 2).
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.progress import track
from sharecrawl.crawl_io.crawldb.crawldir import write_parquet
from sharecrawl.crawl_io.mediatypes import MEDIA_NAME
from sharecrawl.crawl_io.schema import LISTING
from sharecrawl.crawl_io.workers import server_pid, worker_context
from sharecrawl.jobs.membership import PartitionKey, share_root
from sharecrawl.jobs.mr_listing import SplitState, run_listing_jobs
from sharecrawl.jobs.runner import JobRunner
from sharecrawl.jobs.scan_cost import HostCost, Limits
from sharecrawl.jobs.subtree_hash import in_partition_order

GOAL = 2.0
ALBUMS, TRACKS, ARTISTS_PER_PARTITION = 10, 10, 100  # a track folder row per album


def _s(values: np.ndarray, fmt: str) -> pa.Array:
    return pa.array(np.char.mod(fmt, values).astype(object), pa.string())


def host_listing(host: str, n_rows: int) -> tuple[pa.Table, list[PartitionKey]]:
    """About n_rows rows: artist folders, album folders, 8 .mp3 + cover.jpg + info.txt each."""
    per_artist = 1 + ALBUMS * (1 + TRACKS)
    artists = max(1, n_rows // per_artist)
    artist = np.arange(artists)
    a_names = _s(artist, "artist%06d")
    album_artist = np.repeat(artist, ALBUMS)
    album = np.tile(np.arange(ALBUMS), artists)
    album_paths = pc.binary_join_element_wise(
        _s(album_artist, "artist%06d"), _s(album, "album%02d"), "/"
    )
    track_album = np.repeat(np.arange(len(album_paths)), TRACKS)
    track = np.tile(np.arange(TRACKS), len(album_paths))
    ext = np.where(track < 8, "mp3", np.where(track == 8, "jpg", "txt"))
    t_names = pa.array(np.char.add(np.char.mod("%02d-track.", track), ext).astype(object))
    t_paths = pc.binary_join_element_wise(album_paths.take(pa.array(track_album)), t_names, "/")
    paths = pa.concat_arrays([a_names, album_paths, t_paths])
    names = pa.concat_arrays([a_names, _s(album, "album%02d"), t_names])
    n = len(paths)
    is_dir = np.zeros(n, bool)
    is_dir[: artists + len(album_paths)] = True
    sizes = np.where(is_dir, 0, 3_000_000 + np.arange(n) % 1000)
    top_artist = np.concatenate([artist, album_artist, np.repeat(album_artist, TRACKS)])
    block = top_artist // ARTISTS_PER_PARTITION
    keys = []
    for b in range(int(block.max()) + 1):
        lo = None if b == 0 else f"artist{b * ARTISTS_PER_PARTITION:06d}"
        hi = f"artist{(b + 1) * ARTISTS_PER_PARTITION:06d}" if b < block.max() else None
        keys.append(PartitionKey(host, "s", "", lo, hi))
    ids = pa.array([k.id for k in keys]).take(pa.array(block))
    table = pa.table(
        {
            "host": pa.array([host] * n),
            "share": pa.array(["s"] * n),
            "path": paths,
            "name": names,
            "is_dir": is_dir,
            "size": sizes,
            "mtime": pa.array(
                1_700_000_000_000_000 + np.arange(n) % 86_400_000_000, pa.timestamp("us", tz="UTC")
            ),
            "partition_id": ids,
        }
    ).cast(LISTING)
    return in_partition_order(table), keys


def generate(folder: Path, n_rows: int, hosts: int) -> tuple[list[Path], list[dict], int]:
    parts, partitions, total = [], [], 0
    for h in range(hosts):
        host = f"host{h}"
        table, keys = host_listing(host, n_rows // hosts)
        total += table.num_rows
        write_parquet(table, folder / f"{host}.parquet")
        parts.append(folder / f"{host}.parquet")
        root = share_root(host, "s")
        partitions.append(
            {
                "partition_id": root.id,
                "host": host,
                "share": "s",
                "root": "",
                "lo": None,
                "hi": None,
                "parent_id": None,
            }
        )
        partitions += [
            {
                "partition_id": k.id,
                "host": host,
                "share": "s",
                "root": "",
                "lo": k.lo,
                "hi": k.hi,
                "parent_id": root.id,
            }
            for k in keys
        ]
    return parts, partitions, total


HASH_SQL = """
SELECT partition_id,
       md5(string_agg(path || chr(0) || CASE WHEN is_dir THEN 'd' ELSE 'f' END || chr(0)
                      || size || chr(0) || epoch_us(mtime) || chr(10), ''
                      ORDER BY replace(path, '/', chr(0)))) AS hash,
       count(*) FILTER (is_dir) AS n_folders, count(*) FILTER (NOT is_dir) AS n_files,
       count(*) FILTER (NOT is_dir AND regexp_matches(name, $media_name, 'i')) AS n_media,
       coalesce(sum(size) FILTER (NOT is_dir), 0) AS bytes
FROM read_parquet($parts)
GROUP BY partition_id
"""

FOLDER_COST_SQL = """
SELECT host, share, regexp_replace(path, '(^|/)[^/]*$', '') AS folder,
       count(*) AS n_media, sum(strlen(path)) AS mem_bytes
FROM read_parquet($parts)
WHERE NOT is_dir AND regexp_matches(name, $media_name, 'i')
GROUP BY ALL
"""


def cpu_s() -> float:
    """CPU seconds of this process (DuckDB's threads included), its reaped children, and the
    fork server's (the local runner's tasks, jobs.runner.run_job)."""
    own, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    server = 0.0
    if pid := server_pid():
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        server = (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")  # cutime cstime
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime + server


class TaskMemory:
    """The peak resident memory of the fork server's children (the jobs' tasks), sampled:
    they are not this process's children, so getrusage does not see them."""

    def __init__(self) -> None:
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            if not (pid := server_pid()):
                continue
            try:
                kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            except OSError:
                continue
            for kid in kids:
                try:
                    status = Path(f"/proc/{kid}/status").read_text()
                except OSError:
                    continue  # gone meanwhile
                for line in status.splitlines():
                    if line.startswith("VmHWM:"):
                        self.peak_kib = max(self.peak_kib, int(line.split()[1]))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak_kib


def best_of(repeat: int, fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """The least wall and the least CPU seconds of `repeat` runs, each on its own (the
    machine is shared: noise only adds), and a result."""
    wall, cpu, result = float("inf"), float("inf"), None
    for _ in range(repeat):
        start, cpu_start = time.perf_counter(), cpu_s()
        result = fn()
        wall = min(wall, time.perf_counter() - start)
        time.sleep(0.1)  # the fork server reaps the tasks that just ended
        cpu = min(cpu, cpu_s() - cpu_start)
    return wall, cpu, result


def bench_size(n_rows: int, hosts: int, repeat: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-jobs-") as tmp:
        folder = Path(tmp)
        parts, partitions, total = generate(folder, n_rows, hosts)
        costs = {f"host{h}": HostCost(0.015, 0.15) for h in range(hosts)}
        state = SplitState(
            partitions, costs, Limits(), rescanned={p["partition_id"] for p in partitions}
        )
        local = JobRunner("local")
        con = duckdb.connect()
        con.execute("SET threads TO 2")
        params = {"parts": [str(p) for p in parts], "media_name": MEDIA_NAME}  # the jobs' test
        t_hash_db, _, db = best_of(repeat, lambda: con.execute(HASH_SQL, params).fetchall())
        t_cost_db, c_cost_db, _ = best_of(
            repeat, lambda: con.execute(FOLDER_COST_SQL, params).fetchall()
        )
        con.close()
        t_hash, _, alone = best_of(
            repeat, lambda: run_listing_jobs(parts, folder / "hash", None, local, jobs=("hash",))
        )
        t_round, _, both = best_of(
            repeat, lambda: run_listing_jobs(parts, folder / "round", state, local)
        )
        t_split, c_split, split_alone = best_of(
            repeat, lambda: run_listing_jobs(parts, folder / "split", state, local, jobs=("split",))
        )
    assert split_alone.plan == both.plan, "the split alone plans otherwise"
    for job in (alone, both):
        mismatch = sum(
            job.summaries.get(pid)
            != {"hash": h, "n_folders": f, "n_files": n, "n_media": m, "bytes": b}
            for pid, h, f, n, m, b in db
        )
        assert mismatch == 0 and len(job.summaries) == len(db), f"{mismatch} partitions differ"
    creates = len(both.plan["create"])
    print(
        f"{total:>10,} rows  subtree-hash job {t_hash:5.1f}s ({total / t_hash:>9,.0f} rows/s)"
        f"  duckdb {t_hash_db:5.1f}s  ratio {t_hash / t_hash_db:4.1f}"
    )
    print(
        f"{total:>10,} rows  round's listing job (hash + split, one start) {t_round:5.1f}s "
        f"({creates} ranges planned)  duckdb hash + folder costs {t_hash_db + t_cost_db:5.1f}s"
        f"  ratio {t_round / (t_hash_db + t_cost_db):4.1f}"
    )
    print(
        f"{total:>10,} rows  two runner starts (hash job {t_hash:5.1f}s + split job "
        f"{t_split:5.1f}s) {t_hash + t_split:5.1f}s  one start {t_round:5.1f}s  ratio "
        f"{t_round / (t_hash + t_split):4.2f}"
    )
    print(
        f"{total:>10,} rows  partition-split job alone {c_split:5.1f} CPU s  duckdb folder "
        f"costs {c_cost_db:5.1f} CPU s  ratio {c_split / c_cost_db:4.1f}"
    )
    return {
        "rows": total,
        "hash": t_hash,
        "hash_db": t_hash_db,
        "round": t_round,
        "round_db": t_hash_db + t_cost_db,
        "split": c_split,
        "split_db": c_cost_db,
        "two_starts": t_hash + t_split,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        default="1000000,2000000",
        help="listing sizes in rows; the first two should differ 2x",
    )
    parser.add_argument("--hosts", type=int, default=4, help="listing parts (one per host)")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each, the best kept")
    args = parser.parse_args()
    logging.getLogger("mrjob").setLevel(logging.ERROR)  # as the CLI: no mrjob.conf
    sizes = args.sizes.split(",")
    worker_context()  # the fork server boots, as a crawl boots it while its round starts
    memory = TaskMemory()
    results = [bench_size(int(n), args.hosts, args.repeat) for n in track(sizes, "listing sizes")]
    names = {
        "hash": "subtree-hash job",
        "round": "round's listing job",
        "split": "partition-split job alone (CPU)",
    }
    if len(results) >= 2:
        a, b = results[0], results[1]
        grow = b["rows"] / a["rows"]
        for key, name in names.items():
            cost = b[key] / a[key]
            verdict = "ok" if cost <= 1.1 * grow else "OVER"
            print(
                f"{name}: {grow:.1f}x the input costs {cost:.2f}x the time "
                f"(limit {1.1 * grow:.1f}x) {verdict}"
            )
    children = memory.stop() / 1024
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory: job tasks {children:,.0f} MiB, this process with DuckDB {own:,.0f} MiB")
    for r in results:
        print(
            f"ratio job/duckdb at {r['rows']:,} rows: subtree-hash {r['hash'] / r['hash_db']:.1f}"
            f", partition-split (CPU) {r['split'] / r['split_db']:.1f}, round's job "
            f"{r['round'] / r['round_db']:.1f} (goal <= {GOAL:g})"
        )
    last = results[-1]
    print(
        f"ratio one runner start/two at {last['rows']:,} rows: "
        f"{last['round'] / last['two_starts']:.2f}; round's job/duckdb "
        f"{last['round'] / last['round_db']:.1f} (goal <= {GOAL:g})"
    )


if __name__ == "__main__":
    main()
