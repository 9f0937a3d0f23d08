"""For the watcher's tests and benchmark: changes made through SMB as a client would make them,
a `sharecrawl watch` process, and waiting for what it writes."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sharecrawl.crawl_io.crawldb.hints import HintsStore
from tests.cliproc import cli_argv
from tests.smbd import SmbServer

REPO = Path(__file__).resolve().parents[1]


class SmbWriter:
    """Writes to a share through SMB as the server's user (smbprotocol's client, its own
    connection cache). Names may hold the private-use code points a Mac client sends for the
    characters Windows forbids (U+F022 for ':'); vfs_catia stores the original character."""

    def __init__(self, server: SmbServer, share: str = "media") -> None:
        import smbclient  # a test tool here: the crawler never writes

        self._smb = smbclient
        self.cache: dict = {}
        self.port = server.port
        self.unc = rf"\\{server.host}\{share}"
        smbclient.register_session(
            server.host,
            username=server.user,
            password=server.password,
            port=server.port,
            connection_cache=self.cache,
        )

    def _path(self, path: str) -> str:
        return self.unc + "\\" + path.replace("/", "\\")

    def _kw(self) -> dict[str, Any]:
        return {"port": self.port, "connection_cache": self.cache}

    def makedirs(self, path: str) -> None:
        self._smb.makedirs(self._path(path), exist_ok=True, **self._kw())

    def write(self, path: str, data: str = "x", mode: str = "w") -> None:
        with self._smb.open_file(self._path(path), mode=mode, **self._kw()) as f:
            f.write(data)

    def rename(self, old: str, new: str) -> None:
        self._smb.rename(self._path(old), self._path(new), **self._kw())

    def remove(self, path: str) -> None:
        self._smb.remove(self._path(path), **self._kw())

    def close(self) -> None:
        self._smb.reset_connection_cache(fail_on_error=False, connection_cache=self.cache)


def smbclient_burst(server: SmbServer, share: str, folders: int, per_folder: int) -> list[str]:
    """Create folders x per_folder empty files through Samba's own client in one session
    (commands on stdin); returns the share paths created."""
    with tempfile.TemporaryDirectory() as tmp:
        auth = Path(tmp) / "auth"
        auth.write_text(f"username = {server.user}\npassword = {server.password}\n")
        auth.chmod(0o600)
        empty = Path(tmp) / "e"
        empty.write_bytes(b"")
        commands, paths = ["mkdir burst"], []
        for d in range(folders):
            commands.append(f"mkdir burst/d{d:03d}")
            for f in range(per_folder):
                paths.append(f"burst/d{d:03d}/f{f:05d}")
                commands.append(f"put {empty} {paths[-1]}")
        subprocess.run(
            ["smbclient", f"//{server.host}/{share}", "-p", str(server.port), "-A", str(auth)],
            input="\n".join(commands) + "\n",
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        )
    return paths


class WatchProcess:
    """`sharecrawl watch` in its own process (and session), its stderr in a file."""

    def __init__(
        self,
        work: Path,
        hosts: list[str],
        *args: str,
        config: str = "",
        crawl_dir: Path | None = None,
    ) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.crawl_dir = crawl_dir or work / "crawl"
        self.hosts_file = work / "hosts.txt"
        self.hosts_file.write_text("".join(f"{h}\n" for h in hosts))
        self.rules_file = work / "watch.rules"
        cfg = work / "watch.cfg"
        cfg.write_text("[sharecrawl]\nhost_timeout_s = 5\nliveness_timeout_s = 1\n" + config)
        self.stderr_path = work / "watch.stderr"
        command = cli_argv(
            "watch",
            "--hosts-file",
            str(self.hosts_file),
            "--crawl-dir",
            str(self.crawl_dir),
            "--rules-file",
            str(self.rules_file),
            *args,
        )
        environment = {**os.environ, "LUIGI_CONFIG_PATH": str(cfg)}
        self.started_at = datetime.now(UTC)
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                command,
                cwd=REPO,
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
            )
        self.store = HintsStore(self.crawl_dir)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def hints(self) -> list[dict]:
        return self.store.read().to_pylist()

    def states(self) -> dict[tuple[str, str], dict]:
        table, _ = self.store.watches()
        return {(r["host"], r["share"]): r for r in table.to_pylist()}

    def wait_watching(self, host: str, shares: list[str], limit_s: float = 90.0) -> None:
        """Until this process (not an earlier one) has armed the shares' watches."""

        def ready() -> bool:
            rows = [self.states().get((host, s)) for s in shares]
            return all(
                r and r["state"] == "watching" and r["since"] >= self.started_at for r in rows
            )

        wait_for(ready, limit_s, f"{host} {shares} watched", self)

    def prime(
        self, share_dir: Path, name: str = "probe", share: str = "media", limit_s: float = 60.0
    ) -> None:
        """Create probe files in the share's top folder until one is hinted: the server has
        then surely registered the watch (Samba does so asynchronously, in notifyd)."""
        deadline = time.monotonic() + limit_s
        n = 0
        while not any(p.startswith(f"{name} ") for p in hinted_paths(self, share)):
            if time.monotonic() > deadline:
                raise AssertionError(f"no probe hinted within {limit_s:g} s\n{self.stderr()}")
            (share_dir / f"{name} {n}.txt").write_text("p")
            n += 1
            time.sleep(0.5)

    def stop(self, signum: int = 15, limit_s: float = 30.0) -> int:
        """Signal it and wait; the limit is a failure bound, not a measured time."""
        if self.process.poll() is None:
            self.process.send_signal(signum)
        return self.process.wait(limit_s)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(30)


def wait_for(
    predicate: Callable[[], Any],
    limit_s: float = 60.0,
    what: str = "",
    watch: WatchProcess | None = None,
) -> Any:
    """Poll until `predicate` is truthy; fail with what was awaited (and the watcher's log)."""
    deadline = time.monotonic() + limit_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            log = watch.stderr()[-3000:] if watch else ""
            raise AssertionError(f"not within {limit_s:g} s: {what}\n{log}")
        time.sleep(0.1)


def hinted_paths(watch: WatchProcess, share: str = "media") -> dict[str, set[str]]:
    """path -> actions hinted, for one share."""
    out: dict[str, set[str]] = {}
    for row in watch.hints():
        if row["share"] == share:
            out.setdefault(row["path"], set()).add(row["action"])
    return out
