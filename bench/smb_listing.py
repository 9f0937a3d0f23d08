"""Listing speed of SMBSource against Samba's C client, on one generated tree on real smbd.

Prints entries/s of SMBSource's recursive listing (depth first, as the crawler walks) and of
`smbclient //127.0.0.1/media -p PORT -N -c 'recurse; ls'`, alternately in the same run, each
run with the load average (the machine is shared); aggregate entries/s with 4 hosts listed at
once (SMBSource in 4 processes, and 4 smbclients); READ requests and bytes per media file (mp3,
flac, ogg, m4a; made from the repository's templates, no ffmpeg needed) when tags are read
through RangeFile. The last line is the ratio SMBSource / smbclient (goal >= 1.0).

    .venv/bin/python bench/smb_listing.py [--artists 100] [--runs 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.progress import track
from sharecrawl.crawl_io.rangefile import RangeFile
from sharecrawl.crawl_io.smb import SMBSource
from sharecrawl.crawl_io.sources import Credentials, parse_host_url
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


def _list_in_process(url: str, queue: multiprocessing.Queue, go: threading.Event) -> None:
    queue.put("ready")
    go.wait()
    queue.put(time_smbsource(url))


def aggregate(urls: list[str]) -> tuple[int, float]:
    """All hosts at once, a process per host (the GIL would serialise threads). Timed from when
    every process has started and imported its modules: the crawler's workers are long-lived."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    go = context.Event()
    processes = [context.Process(target=_list_in_process, args=(u, queue, go)) for u in urls]
    for p in processes:
        p.start()
    for _ in processes:
        queue.get()
    started = time.perf_counter()
    go.set()
    results = [queue.get() for _ in processes]
    elapsed = time.perf_counter() - started
    for p in processes:
        p.join()
    return sum(n for n, _ in results), elapsed


def aggregate_smbclient(servers: list[SmbServer]) -> tuple[int, float]:
    """The reference for `aggregate`: one smbclient per host, all at once."""
    started = time.perf_counter()
    with ThreadPoolExecutor(len(servers)) as pool:
        results = list(pool.map(time_smbclient, servers))
    return sum(n for n, _ in results), time.perf_counter() - started


def make_media_files(folder: Path) -> list[Path]:
    """5 tagged files per format from the repository's templates (tags written by mutagen),
    their audio repeated to realistic sizes (0.5-5 MB) with tags where encoders put them: at
    the head (ID3v2, FLAC and Vorbis headers) and an MP4 `moov` atom after the audio."""
    from sharecrawl.demolan.templates import template_path, write_tagged

    made = []
    for fmt in MEDIA_FORMATS:
        template = template_path(fmt).read_bytes()
        for n in range(5):
            dest = folder / f"Мадонна - Track {n:02d}.{fmt}"
            tags = {"artist": "Мадонна", "title": f"Track {n}", "album": "Bench", "track": n + 1}
            write_tagged(fmt, dest, tags)
            target = int(MEDIA_SIZES[fmt] * (1 + n / 4))
            dest.write_bytes(PADDERS[fmt](dest.read_bytes(), template, target))
            made.append(dest)
    return made


MEDIA_SIZES = {"mp3": 960_000, "flac": 2_400_000, "ogg": 1_500_000, "m4a": 1_000_000}


def _repeat_to(data: bytes, piece: bytes, target: int) -> bytes:
    return data + piece * max(0, (target - len(data)) // len(piece))


def _pad_mp3(data: bytes, template: bytes, target: int) -> bytes:
    """The template is MPEG frames only (no tags): append copies after the tagged file."""
    return _repeat_to(data, template, target)


def _pad_flac(data: bytes, template: bytes, target: int) -> bytes:
    """Append copies of the template's audio frames (everything after its metadata blocks)."""
    offset = 4  # 'fLaC'
    while True:
        header = template[offset]
        offset += 4 + int.from_bytes(template[offset + 1 : offset + 4], "big")
        if header & 0x80:  # last metadata block
            break
    return _repeat_to(data, template[offset:], target)


def _pad_ogg(data: bytes, template: bytes, target: int) -> bytes:
    """Repeat the audio pages (renumbered, granules running on) before the final page."""
    import io

    from mutagen.ogg import OggPage

    pages = []
    stream = io.BytesIO(data)
    while stream.tell() < len(data):
        pages.append(OggPage(stream))
    headers = [p for p in pages if p.position == 0]
    body, final = pages[len(headers) : -1], pages[-1]
    if not body:
        return data
    per_copy = sum(len(p.write()) for p in body)
    copies = max(1, (target - len(data)) // per_copy)
    out = [p.write() for p in headers]
    sequence, position, previous = len(headers), 0, 0
    for _ in range(copies):
        previous = 0
        for page in body:
            clone = OggPage(io.BytesIO(page.write()))
            position += page.position - previous
            previous = page.position
            clone.sequence, clone.position = sequence, position
            out.append(clone.write())
            sequence += 1
    final.sequence, final.position = sequence, position + final.position - previous
    out.append(final.write())
    return b"".join(out)


def _pad_m4a(data: bytes, template: bytes, target: int) -> bytes:
    """Grow the `mdat` atom at its end (sample offsets stay valid); `moov` keeps its place."""
    offset = 0
    while offset < len(data):
        size, kind = struct.unpack_from(">I4s", data, offset)
        if kind == b"mdat" and size > 8:
            grow = max(0, target - len(data))
            filler = data[offset + 8 : offset + size] * (grow // (size - 8) + 1)
            end = offset + size
            header = struct.pack(">I4s", size + grow, b"mdat")
            return data[:offset] + header + data[offset + 8 : end] + filler[:grow] + data[end:]
        offset += size
    return data


PADDERS = {"mp3": _pad_mp3, "flac": _pad_flac, "ogg": _pad_ogg, "m4a": _pad_m4a}


def tag_costs(url: str, share_root: Path, files: list[Path]) -> None:
    """Print READ requests and bytes per media file when tags are read through RangeFile."""
    from sharecrawl.crawl_io.tags import read_tags

    costs: dict[str, list[tuple[int, int, int]]] = {f: [] for f in MEDIA_FORMATS}
    with SMBSource(parse_host_url(url), Credentials(None), timeout_s=30) as source:
        for path in files:
            rel = path.relative_to(share_root).as_posix()
            size = path.stat().st_size
            fileobj = RangeFile(source, "media", rel, size)
            row = read_tags(fileobj, path.name)
            assert row.get("artist") == "Мадонна", (path.name, row)
            costs[path.suffix[1:]].append((fileobj.requests, fileobj.bytes_read, size))
    for fmt, rows in costs.items():
        whole = sum(1 for _, read, size in rows if read >= size)
        print(
            f"  {fmt:5s} median {statistics.median(r for r, _, _ in rows):.0f} READs, "
            f"{statistics.median(b for _, b, _ in rows) / 1024:.0f} KiB of "
            f"{statistics.median(s for _, _, s in rows) / 1024:.0f} KiB files; "
            f"whole file read: {whole}/{len(rows)}"
        )


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artists", type=int, default=100, help="100 -> 50 121 entries")
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each client")
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
        media = make_media_files(tree / "media" / "zz media")
        entries += len(media) + 1
        chmod_tree(tree)
        for i in range(args.hosts):
            servers.append(start_smbd(base / f"server{i}", tree, audit=False))
        print(f"tree: {entries} entries; {args.hosts} smbd on 127.0.0.1; {os.cpu_count()} CPUs")

        # Warm both clients once (page cache, smbd's caches), then time alternately.
        time_smbclient(servers[0])
        time_smbsource(servers[0].url)
        ours, theirs = [], []
        for run in track(range(1, args.runs + 1), "timed runs"):
            n_ref, t_ref = time_smbclient(servers[0])
            print(f"  run {run}: smbclient {n_ref / t_ref:8,.0f} entries/s ({n_ref})  {load()}")
            n_ours, t_ours = time_smbsource(servers[0].url)
            print(f"  run {run}: SMBSource {n_ours / t_ours:8,.0f} entries/s ({n_ours})  {load()}")
            assert n_ours == entries, (n_ours, entries)
            theirs.append(n_ref / t_ref)
            ours.append(n_ours / t_ours)
        ref_rate, our_rate = statistics.median(theirs), statistics.median(ours)
        print(f"smbclient 'recurse; ls': median {ref_rate:,.0f} entries/s")
        print(f"SMBSource listing:       median {our_rate:,.0f} entries/s")

        hosts = f"{args.hosts} hosts at once"
        n_all, t_all = aggregate([s.url for s in servers])
        print(f"{hosts}, SMBSource a process each: {n_all / t_all:,.0f} entries/s  {load()}")
        n_all, t_all = aggregate_smbclient(servers)
        print(f"{hosts}, smbclient each:           {n_all / t_all:,.0f} entries/s  {load()}")

        print("tag reads through RangeFile over SMB (per media file):")
        tag_costs(servers[0].url, tree / "media", media)
        print(f"ratio SMBSource / smbclient entries per second: {our_rate / ref_rate:.2f}")
        return 0
    finally:
        for server in servers:
            server.stop()
        remove_tree(base)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
