"""Listing speed of SMBSource against Samba's C client, on one generated tree on real smbd.

Prints entries/s of SMBSource's recursive listing (depth first, as the crawler walks) and of
`smbclient //127.0.0.1/media -p PORT -N -c 'recurse; ls'` timed in the same run; aggregate
entries/s with 4 hosts listed at once in 4 processes; READ requests and bytes per media file
(mp3, flac, ogg, m4a) when tags are read through RangeFile. The last line is the ratio
SMBSource / smbclient (goal >= 1.0).

    .venv/bin/python bench/smb_listing.py [--artists 100]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from crawl_io.rangefile import RangeFile
from crawl_io.smb import SMBSource
from crawl_io.sources import Credentials, parse_host_url
from tests.smbd import (
    SmbServer,
    chmod_tree,
    make_base_dir,
    remove_tree,
    smbd_skip_reason,
    start_smbd,
)

ALBUMS, TRACKS = 20, 24
MEDIA_FORMATS = ("mp3", "flac", "ogg", "m4a")


def make_listing_tree(share: Path, artists: int) -> int:
    """artists x ALBUMS folders of TRACKS empty files: returns the number of entries."""
    count = 0
    for a in range(artists):
        artist = share / f"Artist {a:03d} - Исполнитель"
        for b in range(ALBUMS):
            album = artist / f"{1990 + b} - Album number {b:02d}"
            album.mkdir(parents=True)
            for t in range(TRACKS):
                (album / f"{t + 1:02d} - Some song title number {t + 1}.mp3").touch()
            count += TRACKS + 1
        count += 1
    return count


def walk_count(source: SMBSource, share: str, path: str = "") -> int:
    count = 0
    stack = [path]
    while stack:
        folder = stack.pop()
        entries = source.listdir(share, folder)
        count += len(entries)
        # reversed so that the first child is listed first: canonical depth-first order
        for entry in reversed(entries):
            if entry.is_dir:
                stack.append(f"{folder}/{entry.name}" if folder else entry.name)
    return count


def time_smbsource(url: str) -> tuple[int, float]:
    started = time.perf_counter()
    with SMBSource(parse_host_url(url), Credentials(None), timeout_s=30) as source:
        count = walk_count(source, "media")
    return count, time.perf_counter() - started


def time_smbclient(server: SmbServer) -> tuple[int, float]:
    command = ["smbclient", "//127.0.0.1/media", "-p", str(server.port), "-N"]
    started = time.perf_counter()
    out = subprocess.run(
        [*command, "-c", "recurse; ls"], capture_output=True, text=True, check=True
    ).stdout
    elapsed = time.perf_counter() - started
    entries = sum(
        1
        for line in out.splitlines()
        if line.startswith("  ") and not line.strip().startswith((". ", ".. "))
    )
    return entries, elapsed


def _list_in_process(url: str, queue: multiprocessing.Queue) -> None:
    queue.put(time_smbsource(url))


def aggregate(urls: list[str]) -> tuple[int, float]:
    """All hosts at once, a process per host (smbprotocol's parsing is CPU-bound)."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    processes = [context.Process(target=_list_in_process, args=(u, queue)) for u in urls]
    started = time.perf_counter()
    for p in processes:
        p.start()
    results = [queue.get() for _ in processes]
    for p in processes:
        p.join()
    return sum(n for n, _ in results), time.perf_counter() - started


def make_media_files(folder: Path) -> list[Path]:
    """60 s tagged tone files made by ffmpeg (realistic sizes: 0.5-5 MB)."""
    folder.mkdir(parents=True, exist_ok=True)
    codecs = {
        "mp3": ["-b:a", "128k"],
        "flac": [],
        "ogg": ["-c:a", "libvorbis", "-q:a", "8"],
        "m4a": [],
    }
    made = []
    for fmt in MEDIA_FORMATS:
        for n in range(5):
            dest = folder / f"Мадонна - Track {n:02d}.{fmt}"
            subprocess.run(
                ["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", f"sine=f={220 + 40 * n}:d=60"]
                + codecs[fmt]
                + ["-metadata", "artist=Мадонна", "-metadata", f"title=Track {n}"]
                + ["-metadata", "album=Bench", "-metadata", f"track={n + 1}", str(dest)],
                check=True,
            )
            made.append(dest)
    return made


def tag_costs(url: str, share_root: Path, files: list[Path]) -> dict[str, tuple[float, float]]:
    try:
        from crawl_io.tags import read_tags
    except ImportError:  # the tag reader is another module's; mutagen alone in the meantime
        import mutagen

        def read_tags(fileobj, name):  # type: ignore[no-redef]
            return mutagen.File(fileobj)

    costs: dict[str, list[tuple[int, int, int]]] = {f: [] for f in MEDIA_FORMATS}
    with SMBSource(parse_host_url(url), Credentials(None), timeout_s=30) as source:
        for path in files:
            rel = path.relative_to(share_root).as_posix()
            size = path.stat().st_size
            fileobj = RangeFile(source, "media", rel, size)
            read_tags(fileobj, path.name)
            costs[path.suffix[1:]].append((fileobj.requests, fileobj.bytes_read, size))
    for fmt, rows in costs.items():
        whole = sum(1 for _, read, size in rows if read >= size)
        print(
            f"  {fmt:5s} median {statistics.median(r for r, _, _ in rows):.0f} READs, "
            f"{statistics.median(b for _, b, _ in rows) / 1024:.0f} KiB of "
            f"{statistics.median(s for _, _, s in rows) / 1024:.0f} KiB files; "
            f"whole file read: {whole}/{len(rows)}"
        )
    return {
        f: (statistics.median(r for r, _, _ in rows), statistics.median(b for _, b, _ in rows))
        for f, rows in costs.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artists", type=int, default=100, help="100 -> 50 100 entries")
    parser.add_argument("--hosts", type=int, default=4)
    args = parser.parse_args()
    reason = smbd_skip_reason()
    if reason or not shutil.which("smbclient"):
        print(f"smb_listing: cannot run: {reason or 'smbclient is not installed'}")
        return 1
    base = make_base_dir()
    servers: list[SmbServer] = []
    try:
        tree = base / "tree"
        entries = make_listing_tree(tree / "media", args.artists)
        media = make_media_files(tree / "media" / "zz media") if shutil.which("ffmpeg") else []
        entries += len(media) + (1 if media else 0)
        chmod_tree(tree)
        for i in range(args.hosts):
            servers.append(start_smbd(base / f"server{i}", tree, audit=False))
        print(f"tree: {entries} entries; smbd {args.hosts} servers on 127.0.0.1")

        # Warm both clients once (page cache, smbd's caches), then time alternately.
        time_smbclient(servers[0])
        time_smbsource(servers[0].url)
        ours, theirs = [], []
        for _ in range(2):
            n_ref, t_ref = time_smbclient(servers[0])
            n_ours, t_ours = time_smbsource(servers[0].url)
            assert n_ours == entries, (n_ours, entries)
            theirs.append(n_ref / t_ref)
            ours.append(n_ours / t_ours)
        ref_rate, our_rate = statistics.median(theirs), statistics.median(ours)
        print(f"smbclient 'recurse; ls': {ref_rate:,.0f} entries/s (entries seen: {n_ref})")
        print(f"SMBSource listing:       {our_rate:,.0f} entries/s")

        n_all, t_all = aggregate([s.url for s in servers])
        print(f"{args.hosts} hosts at once, a process each: {n_all / t_all:,.0f} entries/s")

        if media:
            print("tag reads through RangeFile over SMB (per media file):")
            tag_costs(servers[0].url, tree / "media", media)
        else:
            print("tag reads: skipped (ffmpeg is not installed to make media files)")
        print(f"ratio SMBSource / smbclient entries per second: {our_rate / ref_rate:.2f}")
        return 0
    finally:
        for server in servers:
            server.stop()
        remove_tree(base)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
