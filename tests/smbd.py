"""Real Samba servers for tests: a pytest plugin (`pytest_plugins = ["tests.smbd"]`).

Each server is an `smbd --foreground` on 127.0.0.1 with its own port, config file and
state/lock/pid/cache/private/log folders under one temporary folder; nothing of the machine's
own Samba set-up (/etc/samba, system passdb) is read or written. Shares, one subfolder of
`root_dir` each:
- `media`: guest, writable in Samba's eyes (so that a write attempt would show), audited
  by `vfs_full_audit` into the server's log, and with `vfs_catia` mapping the characters
  Windows forbids (`"*:<>?\\|`) to the private-use code points macOS and Services for Mac
  use, which SMBSource maps back: the crawler sees `a:b` as `a:b`.
- `private`: user `root` only (password `SmbServer.password`, in the private passdb; root is
  the one system user used, since smbd runs as root and a Samba user needs a Unix account).

smbd forks a child per client connection and starts samba-dcerpcd (its own session) for
RPC such as share enumeration, so pause/resume/kill signal smbd's whole process group and
samba-dcerpcd's (by the PID in its pid file).

Fixtures: `smbd_factory` (start servers, any number; all stopped at teardown),
`smb_server` (one server per test module over `make_tree`'s tree), `smbd_skip_reason`.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SMBD = shutil.which("smbd") or "/usr/sbin/smbd"
SMBPASSWD = shutil.which("smbpasswd") or "/usr/bin/smbpasswd"
SHARES = ("media", "private")
USER = "root"

# vfs_catia: Unix character -> the code point a Windows client sees (Services for Mac).
CATIA_MAPPINGS = ",".join(f"0x{ord(ch):02x}:0x{0xF020 + i:04x}" for i, ch in enumerate('"*:<>?\\|'))

CONFIG = """\
[global]
  netbios name = {netbios}
  workgroup = WORKGROUP
  server role = standalone server
  map to guest = Bad User
  guest account = nobody
  smb ports = {port}
  interfaces = {host}
  bind interfaces only = yes
  disable netbios = yes
  lock directory = {base}/lock
  state directory = {base}/state
  cache directory = {base}/cache
  private dir = {base}/private
  pid directory = {base}/pid
  ncalrpc dir = {base}/ncalrpc
  log file = {base}/log/smbd.log
  log level = 1
  max log size = 0
  passdb backend = tdbsam:{base}/private/passdb.tdb
  load printers = no
  printing = bsd
  printcap name = /dev/null
  disable spoolss = yes
  follow symlinks = no

[media]
  path = {root}/media
  read only = no
  guest ok = yes
  {vfs}
  catia:mappings = {catia}
  full_audit:prefix = %u|%I|%S
  full_audit:success = all
  full_audit:failure = all
  full_audit:syslog = false

[private]
  path = {root}/private
  read only = yes
  guest ok = no
  valid users = {user}
"""


def smbd_skip_reason() -> str | None:
    """Why real smbd servers cannot run here, or None."""
    if not os.path.exists(SMBD):
        return "Samba's smbd is not installed (apt-get install samba smbclient)"
    if os.geteuid() != 0:
        return "smbd test servers need root"
    modules = Path(_build_option("MODULESDIR") or "/usr/lib/x86_64-linux-gnu/samba") / "vfs"
    missing = [m for m in ("full_audit", "catia") if not (modules / f"{m}.so").exists()]
    if missing:
        return f"Samba VFS modules {missing} missing (apt-get install samba-vfs-modules)"
    return None


def ipv6_skip_reason() -> str | None:
    """Why a server cannot listen on ::1 here, or None."""
    try:
        free_port("::1")
    except OSError as e:
        return f"no IPv6 loopback (::1) here: {e}"
    return None


def _build_option(name: str) -> str | None:
    try:
        out = subprocess.run([SMBD, "-b"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        key, _, value = line.strip().partition(":")
        if key == name:
            return value.strip()
    return None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class SmbServer:
    base: Path  # config, state and logs
    root_dir: Path  # one subfolder per share
    port: int
    process: subprocess.Popen
    password: str = field(repr=False)
    user: str = USER
    host: str = "127.0.0.1"

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        """The host URL (all shares); add '/media' for one share."""
        return f"smb://{f'[{self.host}]' if ':' in self.host else self.host}:{self.port}"

    @property
    def config(self) -> Path:
        return self.base / "smb.conf"

    @property
    def log_path(self) -> Path:
        """smbd's log, which also holds the full_audit lines of the media share."""
        return self.base / "log" / "smbd.log"

    def audit_lines(self) -> list[str]:
        """full_audit lines: 'user|client ip|share|operation|ok or fail|arguments...'."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return [line.strip() for line in text.splitlines() if line.count("|") >= 4]

    def _groups(self) -> list[int]:
        groups = [self.pid]
        pidfile = self.base / "pid" / "samba-dcerpcd.pid"
        try:
            groups.append(int(pidfile.read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            pass
        return groups

    def signal(self, signum: int) -> None:
        """Send a signal to smbd, its per-connection children and samba-dcerpcd."""
        for group in self._groups():
            try:
                os.killpg(group, signum)
            except ProcessLookupError:
                pass

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is not None:
            self.signal(signal.SIGKILL)  # children or samba-dcerpcd may outlive a killed smbd
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.signal(signal.SIGKILL)
        self.process.wait(timeout=10)


def start_smbd(
    base: Path,
    root_dir: Path,
    port: int | None = None,
    audit: bool = True,
    extra_config: str = "",
    host: str = "127.0.0.1",
    netbios_name: str | None = None,
) -> SmbServer:
    """Start smbd over `root_dir` (its subfolders media/ and private/ are created if absent),
    listening on `host` only (a loopback address: "::1" for IPv6, see ipv6_skip_reason).

    audit=False leaves out full_audit and catia (they slow Samba down: for benchmarks).
    `extra_config` is appended to smb.conf: more shares, or a second `[global]` section.
    `netbios_name` is the name the server gives in NTLM (SCTEST<port> when None); started
    again on the same `base` (its state directory), it is the same machine elsewhere."""
    port = port or free_port(host)
    for name in ("lock", "state", "cache", "private", "pid", "ncalrpc", "log"):
        (base / name).mkdir(parents=True, exist_ok=True)
    for share in SHARES:
        (root_dir / share).mkdir(parents=True, exist_ok=True)
    config = base / "smb.conf"
    config.write_text(
        CONFIG.format(
            port=port,
            host=f"{host}/8" if "." in host else host,  # any 127/8 address binds as itself
            netbios=netbios_name or f"SCTEST{port}",
            base=base,
            root=root_dir,
            catia=CATIA_MAPPINGS,
            user=USER,
            vfs="vfs objects = full_audit catia" if audit else "",
        )
        + extra_config
    )
    password = secrets.token_urlsafe(12)
    subprocess.run(
        [SMBPASSWD, "-c", str(config), "-a", "-s", USER],
        input=f"{password}\n{password}\n",
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    stdout = open(base / "log" / "smbd.stdout", "wb")
    process = subprocess.Popen(
        [SMBD, "--foreground", "--no-process-group", f"--configfile={config}"],
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=base,
    )
    stdout.close()
    server = SmbServer(base, root_dir, port, process, password, host=host)
    try:
        _wait_for_port(server, 20.0)
    except Exception:
        server.stop()
        raise
    return server


def _wait_for_port(server: SmbServer, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            log = (server.base / "log" / "smbd.stdout").read_text(errors="replace")
            raise RuntimeError(f"smbd exited with {server.process.returncode}: {log[-2000:]}")
        try:
            with socket.create_connection((server.host, server.port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"smbd did not listen on port {server.port} within {limit_s} s")


def make_base_dir() -> Path:
    """A world-traversable temporary folder (the guest account reads the shares as nobody)."""
    base = Path(tempfile.mkdtemp(prefix="sharecrawl-smbd-"))
    base.chmod(0o755)
    return base


# -- generated trees -------------------------------------------------------------------

FORBIDDEN_NAMES = ["a:b", "x?.mp3", 'say "hi"', "star*", "lt<gt>", "pi|pe", "back\\slash"]


def make_tree(root: Path, media: bool = True) -> dict[str, int]:
    """Fill root/media and root/private with a tree of awkward names; returns counts.

    Unicode (Cyrillic, CJK, emoji, combining marks), spaces, 255-byte names (ASCII and
    two-byte UTF-8), a 40-level deep path, names Windows forbids, an empty folder, a folder
    of 300 files, odd mtimes (nanoseconds, before 1980), and tagged mp3/flac/ogg/m4a files."""
    share = root / "media"
    share.mkdir(parents=True, exist_ok=True)
    files = [
        "plain.txt",
        "Мадонна - Музыка.txt",
        "日本語のファイル.txt",
        "emoji 🎵 song.txt",
        "cafe\u0301.txt",  # decomposed é stays as sent
        "  leading spaces.txt",
        "a" * 251 + ".txt",  # 255 bytes
        "я" * 125 + "12345",  # 255 bytes of UTF-8
        *FORBIDDEN_NAMES,
    ]
    for i, name in enumerate(files):
        (share / name).write_bytes(b"x" * (i * 37))
    (share / "empty folder").mkdir(exist_ok=True)
    many = share / "many files"
    many.mkdir(exist_ok=True)
    for i in range(300):
        (many / f"file {i:04d}.dat").write_bytes(b"")
    deep = share / "deep"
    for level in range(40):
        deep = deep / f"level {level:02d}"
    deep.mkdir(parents=True, exist_ok=True)
    (deep / "bottom.txt").write_text("bottom")
    odd = share / "odd times.txt"
    odd.write_text("t")
    os.utime(odd, ns=(1_234_567_891_234_567_891, 1_234_567_891_234_567_891))
    old = share / "1970s.txt"
    old.write_text("old")
    os.utime(old, ns=(123_456_789_000_000_123, 123_456_789_000_000_123))
    n_media = _make_media(share / "Music") if media else 0
    private = root / "private"
    private.mkdir(parents=True, exist_ok=True)
    (private / "secret.txt").write_text("only for root")
    return {"files": len(files) + 303 + n_media, "media": n_media}


MEDIA_FORMATS = ("mp3", "flac", "ogg", "m4a")


def _make_media(folder: Path) -> int:
    try:
        from sharecrawl.demolan.templates import write_tagged
    except ImportError:
        return 0
    count = 0
    for fmt in MEDIA_FORMATS:
        for track in (1, 2):
            dest = folder / f"Мадонна - Song {track:02d}.{fmt}"
            tags = {"artist": "Мадонна", "title": f"Song {track}", "album": "Album", "track": track}
            write_tagged(fmt, dest, tags)
            count += 1
    return count


def chmod_tree(root: Path) -> None:
    """Let the guest account (nobody) read everything."""
    for folder, _dirs, files in os.walk(root):
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)


def remove_tree(base: Path) -> None:
    """rmtree, retried: samba-dcerpcd may still write its last log lines as it exits."""
    for _ in range(5):
        shutil.rmtree(base, ignore_errors=True)
        if not base.exists():
            return
        time.sleep(0.2)


# -- fixtures --------------------------------------------------------------------------


@pytest.fixture
def smbd_factory() -> Iterator[Callable[..., SmbServer]]:
    """start(root_dir=None, tree=True, **start_smbd options) -> SmbServer; every server is
    stopped at teardown."""
    reason = smbd_skip_reason()
    if reason:
        pytest.skip(reason)
    started: list[tuple[SmbServer, Path]] = []

    def start(root_dir: Path | None = None, tree: bool = True, **options: object) -> SmbServer:
        base = make_base_dir()
        root = root_dir or base / "tree"
        if root_dir is None and tree:
            make_tree(root)
        chmod_tree(root)
        server = start_smbd(base / "server", root, **options)
        started.append((server, base))
        return server

    yield start
    for server, base in started:
        server.stop()
        remove_tree(base)


@pytest.fixture(scope="module")
def smb_server() -> Iterator[SmbServer]:
    """One server per test module over make_tree's tree; do not pause or kill it."""
    reason = smbd_skip_reason()
    if reason:
        pytest.skip(reason)
    base = make_base_dir()
    make_tree(base / "tree")
    chmod_tree(base / "tree")
    server = start_smbd(base / "server", base / "tree")
    yield server
    server.stop()
    remove_tree(base)
