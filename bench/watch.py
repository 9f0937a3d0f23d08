"""`sharecrawl watch` over one smbd with 200 shares, all watched, against smbprotocol's
FileSystemWatcher (a thread per request, a loop thread per share) in the same run.

For each watcher: changes made through SMB by this script (a file created in a random share,
one every `--gap` seconds), and the latency from the create to the moment its hint is visible
(sharecrawl: a part in crawl/hints; the reference: a line in its output file), min / median /
p95 / max; the watcher's RSS and thread count (from /proc) once every share is watched and at the
end. Goals: p95 <= 2 s, RSS <= 200 MiB. The last line: the ratios sharecrawl / reference and
sharecrawl / goal.

    .venv/bin/python bench/watch.py [--shares 200] [--changes 400] [--gap 0.05]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sharecrawl.crawl_io.crawldb.hints import HintsStore
from tests.smbd import (
    SmbServer,
    chmod_tree,
    make_base_dir,
    remove_tree,
    smbd_skip_reason,
    start_smbd,
)
from tests.watchtools import WatchProcess, wait_for

FILTER = 0x1 | 0x2 | 0x8 | 0x10  # the same completion filter as crawl_io.notify


def share_config(root: Path, shares: int) -> str:
    return "".join(
        f"\n[s{i:03d}]\n  path = {root}/s{i:03d}\n  read only = no\n  guest ok = yes\n"
        for i in range(shares)
    )


def proc_status(pid: int) -> tuple[float, int]:
    """(RSS in MiB, threads) of a process."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    fields = dict(line.split(":", 1) for line in lines)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["Threads"])


# -- the reference: smbprotocol's FileSystemWatcher ----------------------------------------------


def reference_watch(host: str, port: int, shares: list[str], out_path: str) -> None:
    """Watch every share with FileSystemWatcher; one line per change in `out_path`."""
    from smbprotocol.change_notify import ChangeNotifyFlags, FileSystemWatcher
    from smbprotocol.connection import Connection
    from smbprotocol.file_info import FileAttributes
    from smbprotocol.open import (
        CreateDisposition,
        CreateOptions,
        DirectoryAccessMask,
        ImpersonationLevel,
        Open,
        ShareAccess,
    )
    from smbprotocol.session import Session
    from smbprotocol.tree import TreeConnect

    conn = Connection(uuid.uuid4(), host, port, require_signing=False)
    conn.connect()
    session = Session(conn, "guest", "", require_encryption=False, auth_protocol="ntlm")
    session.connect()
    # every outstanding request holds a credit, and smbprotocol asks for one per request
    conn.echo(sid=session.session_id, timeout=60, credit_request=min(8000, 2 * len(shares) + 64))
    out = open(out_path, "a", buffering=1)
    lock = threading.Lock()

    def watch(share: str) -> None:
        tree = TreeConnect(session, rf"\\{host}\{share}")
        tree.connect(require_secure_negotiate=False)  # a guest session has no signing key
        folder = Open(tree, "")
        share_all = (
            ShareAccess.FILE_SHARE_READ
            | ShareAccess.FILE_SHARE_WRITE
            | ShareAccess.FILE_SHARE_DELETE
        )
        folder.create(
            ImpersonationLevel.Impersonation,
            DirectoryAccessMask.FILE_LIST_DIRECTORY,
            FileAttributes.FILE_ATTRIBUTE_DIRECTORY,
            share_all,
            CreateDisposition.FILE_OPEN,
            CreateOptions.FILE_DIRECTORY_FILE,
        )
        with lock:
            out.write(f"{share}\t\tarmed\n")
        while True:
            watcher = FileSystemWatcher(folder)
            watcher.start(FILTER, flags=ChangeNotifyFlags.SMB2_WATCH_TREE)
            actions = watcher.wait() or []
            with lock:
                for action in actions:
                    out.write(f"{share}\t{action['file_name'].get_value()}\tchange\n")

    for share in shares:
        threading.Thread(target=watch, args=(share,), daemon=True).start()
    threading.Event().wait()


# -- measuring ---------------------------------------------------------------------------------


class Changer:
    """Creates files through SMB (as the server's user) and times when each becomes visible."""

    def __init__(self, server: SmbServer) -> None:
        import smbclient

        self.smb, self.server, self.cache = smbclient, server, {}
        smbclient.register_session(
            server.host,
            username=server.user,
            password=server.password,
            port=server.port,
            connection_cache=self.cache,
        )

    def create(self, share: str, name: str) -> float:
        """Create share/bench/name; returns the time just before the create was sent."""
        path = rf"\\{self.server.host}\{share}\bench\{name}"
        started = time.monotonic()
        with self.smb.open_file(
            path, mode="w", port=self.server.port, connection_cache=self.cache
        ) as f:
            f.write("x")
        return started

    def run(
        self, shares: list[str], changes: int, gap: float, seen: dict[str, float], label: str
    ) -> list[float]:
        made: dict[str, float] = {}
        for i in range(changes):
            share = shares[i] if i < len(shares) else random.choice(shares)
            name = f"{label} {i:05d}.txt"
            made[name] = self.create(share, name)
            time.sleep(gap)
        wait_for(lambda: set(made) <= set(seen), 120, f"{label}: every change seen")
        return [seen[name] - made[name] for name in made]

    def close(self) -> None:
        self.smb.reset_connection_cache(fail_on_error=False, connection_cache=self.cache)


def poll_hints(crawl_dir: Path, seen: dict[str, float], stop: threading.Event) -> None:
    """Note when each created name first appears in a part of the hints store."""
    store, read = HintsStore(crawl_dir), set()
    while not stop.is_set():
        for part in store.all_parts():
            if part in read:
                continue
            read.add(part)
            now = time.monotonic()
            import pyarrow.parquet as pq

            for path in pq.read_table(part, columns=["path"])["path"].to_pylist():
                seen.setdefault(path.rpartition("/")[2], now)
        time.sleep(0.01)


def poll_lines(out_path: Path, seen: dict[str, float], stop: threading.Event) -> None:
    offset = 0
    while not stop.is_set():
        with open(out_path, "rb") as f:
            f.seek(offset)
            data = f.read()
        cut = data.rfind(b"\n") + 1
        offset += cut
        now = time.monotonic()
        for line in data[:cut].decode("utf-8", "replace").splitlines():
            share, name, kind = line.split("\t")
            seen.setdefault(name.rpartition("\\")[2] if kind == "change" else f"armed {share}", now)
        time.sleep(0.01)


def imports_rss() -> float:
    """Peak RSS of a process that only imports what `sharecrawl watch` imports, MiB: its
    VmHWM, as its rusage would count this process's RSS when it forked and exec'd."""
    code = (
        "import sharecrawl.cli.parser, sharecrawl.cli.services, "
        "sharecrawl.sensors.watch, impacket.dcerpc.v5.srvs; "
        "print([l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1])"
    )
    repo = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True)
    return int(out.stdout.strip()) / 1024


def summary(name: str, latencies: list[float], status: list[tuple[float, int]]) -> dict:
    latencies = sorted(latencies)
    p95 = latencies[max(0, round(0.95 * len(latencies)) - 1)]
    rss = max(s[0] for s in status)
    threads = max(s[1] for s in status)
    print(
        f"{name}: latency min {latencies[0]:.3f} s, median {statistics.median(latencies):.3f} s, "
        f"p95 {p95:.3f} s, max {latencies[-1]:.3f} s ({len(latencies)} changes); "
        f"RSS {rss:.0f} MiB, {threads} threads"
    )
    return {"p95": p95, "rss": rss, "threads": threads}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shares", type=int, default=200)
    parser.add_argument("--changes", type=int, default=400)
    parser.add_argument("--gap", type=float, default=0.05, help="seconds between changes")
    parser.add_argument("--reference-watch", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reference_watch:
        host_port, shares, out = args.reference_watch
        host, port = host_port.rsplit(":", 1)
        reference_watch(host, int(port), shares.split(","), out)
        return 0
    reason = smbd_skip_reason()
    if reason:
        print(f"skipped: {reason}")
        return 0
    base = make_base_dir()
    shares = [f"s{i:03d}" for i in range(args.shares)]
    server = None
    try:
        root = base / "tree"
        for share in shares:
            (root / share / "bench").mkdir(parents=True)
        chmod_tree(root)
        server = start_smbd(
            base / "server", root, audit=False, extra_config=share_config(root, args.shares)
        )
        print(
            f"one smbd, {args.shares} shares; {args.changes} changes through SMB, one every "
            f"{args.gap:g} s; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"
        )
        changer = Changer(server)
        results = {}

        # sharecrawl watch, every share of the host (SRVSVC enumeration, as an operator writes it)
        watch = WatchProcess(base / "ours", [server.url])
        host = f"{server.host}:{server.port}"
        started = time.monotonic()
        watch.wait_watching(host, shares, limit_s=300)
        print(
            f"sharecrawl watch: {args.shares} shares watched {time.monotonic() - started:.1f} s "
            "after start"
        )
        seen: dict[str, float] = {}
        stop = threading.Event()
        poller = threading.Thread(target=poll_hints, args=(watch.crawl_dir, seen, stop))
        poller.start()
        status = [proc_status(watch.pid)]
        latencies = changer.run(shares, args.changes, args.gap, seen, "ours")
        status.append(proc_status(watch.pid))
        stop.set()
        poller.join()
        results["ours"] = summary("sharecrawl watch", latencies, status)
        assert watch.stop() == 0

        # the reference
        out = base / "reference.out"
        out.write_text("")
        out.chmod(0o666)
        reference = subprocess.Popen(
            [sys.executable, __file__, "--reference-watch", host, ",".join(shares), str(out)],
            start_new_session=True,
        )
        try:
            seen = {}
            stop = threading.Event()
            poller = threading.Thread(target=poll_lines, args=(out, seen, stop))
            poller.start()
            wait_for(lambda: all(f"armed {s}" in seen for s in shares), 300, "reference armed")
            time.sleep(1.0)  # Samba registers watches asynchronously
            status = [proc_status(reference.pid)]
            latencies = changer.run(shares, args.changes, args.gap, seen, "ref")
            status.append(proc_status(reference.pid))
            stop.set()
            poller.join()
            results["ref"] = summary("smbprotocol FileSystemWatcher", latencies, status)
        finally:
            reference.kill()
            reference.wait()
        changer.close()
        ours, ref = results["ours"], results["ref"]
        print(f"of sharecrawl's RSS, the imported libraries alone: {imports_rss():.0f} MiB")
        print(f"goals: p95 {ours['p95']:.2f} s <= 2 s, RSS {ours['rss']:.0f} MiB <= 200 MiB")
        ratios = (
            ours["p95"] / ref["p95"],
            ours["rss"] / ref["rss"],
            ours["threads"] / ref["threads"],
            ours["p95"] / 2,
            ours["rss"] / 200,
        )
        print(
            "ratio sharecrawl / FileSystemWatcher: p95 latency {:.2f}, RSS {:.2f}, threads "
            "{:.3f}; sharecrawl / goal: p95 {:.2f}, RSS {:.2f}".format(*ratios)
        )
        return 0
    finally:
        if server is not None:
            server.stop()
        remove_tree(base)


if __name__ == "__main__":
    sys.exit(main())
