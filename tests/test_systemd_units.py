"""The systemd units in systemd/ (README, "As a service"): `systemd-analyze verify` passes on
each, in a root of its own holding the system's unit files and the console script where a
wheel install puts it; each service runs as its own user, confined, writing the crawl
directory alone, with a command line the real parser accepts."""

from __future__ import annotations

import configparser
import os
import pwd
import shlex
import shutil
import signal
import stat
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sharecrawl.cli.parser import parser
from sharecrawl.crawl_io.processes import children
from tests.cliproc import cli_argv
from tests.conftest import LAN

ROOT = Path(__file__).resolve().parents[1]
UNITS = sorted((ROOT / "systemd").glob("sharecrawl-*"))
SERVICES = [u for u in UNITS if u.suffix == ".service"]
INSTALLED = "/opt/sharecrawl/bin/sharecrawl"  # the README's wheel install
SCRIPT = Path(sys.executable).parent / "sharecrawl"
SYSTEM_UNITS = Path("/usr/lib/systemd/system")


def verify(units: list[Path], root: Path) -> subprocess.CompletedProcess[str]:
    """`systemd-analyze verify` of `units` installed in /etc/systemd/system of `root`."""
    if shutil.which("systemd-analyze") is None or not SYSTEM_UNITS.is_dir():
        pytest.skip("systemd-analyze and the system's unit files are not here")
    if not (root / "usr/lib/systemd/system").exists():
        shutil.copytree(SYSTEM_UNITS, root / "usr/lib/systemd/system", symlinks=True)
        script = root / INSTALLED.lstrip("/")
        script.parent.mkdir(parents=True)
        shutil.copy2(SCRIPT, script)
    etc = root / "etc/systemd/system"
    etc.mkdir(parents=True, exist_ok=True)
    for unit in units:
        shutil.copy2(unit, etc / unit.name)
    names = [f"/etc/systemd/system/{u.name}" for u in units]
    return subprocess.run(
        ["systemd-analyze", "verify", f"--root={root}", *names],
        capture_output=True,
        text=True,
        timeout=120,
    )


def service(unit: Path) -> configparser.SectionProxy:
    config = configparser.ConfigParser(strict=False, interpolation=None)
    config.optionxform = str  # type: ignore[assignment,method-assign]
    config.read(unit)
    return config["Service"]


def test_the_units_are_there() -> None:
    assert [u.name for u in UNITS] == [
        "sharecrawl-crawl.service",
        "sharecrawl-crawl.timer",
        "sharecrawl-serve.service",
        "sharecrawl-watch.service",
    ]


def test_systemd_analyze_verify_passes(tmp_path: Path) -> None:
    if not SCRIPT.exists():
        pytest.skip(f"the console script is not installed at {SCRIPT} (make test installs it)")
    done = verify(UNITS, tmp_path)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_verify_finds_a_broken_unit(tmp_path: Path) -> None:
    """The check can fail: a misspelt key and a command that is not there are reported."""
    if not SCRIPT.exists():
        pytest.skip(f"the console script is not installed at {SCRIPT} (make test installs it)")
    broken = tmp_path / "units" / "sharecrawl-broken.service"
    broken.parent.mkdir()
    text = SERVICES[0].read_text().replace("NoNewPrivileges", "NoNewPrivilege")
    broken.write_text(text.replace(INSTALLED, "/opt/elsewhere/bin/sharecrawl"))
    done = verify([broken], tmp_path / "root")
    said = done.stdout + done.stderr
    assert "Unknown key 'NoNewPrivilege'" in said and "/opt/elsewhere/bin/sharecrawl" in said


@pytest.mark.parametrize("unit", SERVICES, ids=lambda u: u.name)
def test_a_service_is_confined_to_the_crawl_directory(unit: Path) -> None:
    s = service(unit)
    assert (s["User"], s["Group"]) == ("sharecrawl", "sharecrawl")
    assert (s["NoNewPrivileges"], s["ProtectSystem"], s["ProtectHome"]) == ("yes", "strict", "yes")
    assert s["StateDirectory"] == "sharecrawl/crawl"  # /var/lib/sharecrawl/crawl, writable
    assert "ReadWritePaths" not in s and "ReadOnlyPaths" not in s
    assert "SHARECRAWL_SMB_PASSWORD" not in unit.read_text()  # secrets come as a credential
    assert s["Environment"] == "SHARECRAWL_SMB_CREDENTIALS=%d/smb.credentials"


@pytest.mark.parametrize("unit", SERVICES, ids=lambda u: u.name)
def test_a_service_command_is_one_the_parser_takes(unit: Path) -> None:
    program, *args = shlex.split(service(unit)["ExecStart"])
    assert program == INSTALLED
    parsed = parser(args).parse_args(args)
    assert parsed.crawl_dir == "/var/lib/sharecrawl/crawl"
    assert parsed.command == unit.stem.removeprefix("sharecrawl-")


def test_the_timer_starts_the_crawl_hourly() -> None:
    config = configparser.ConfigParser()
    config.read(ROOT / "systemd/sharecrawl-crawl.timer")
    assert config["Timer"]["OnCalendar"] == "hourly"
    assert config["Install"]["WantedBy"] == "timers.target"


def grant_read_by_acl(path: Path, uid: int) -> None:
    """What systemd does to a credential on a file system with ACLs: mode 0400, and read for
    the unit's user by a POSIX ACL (the xattr's version 2 format: tag, permissions, id)."""
    path.chmod(0o400)
    user_obj, user, group_obj, mask, other, none = 1, 2, 4, 16, 32, 0xFFFFFFFF
    entries = [(user_obj, 4, none), (user, 4, uid), (group_obj, 0, none), (mask, 4, none)]
    data = struct.pack("<I", 2) + b"".join(
        struct.pack("<HHI", *e) for e in [*entries, (other, 0, none)]
    )
    try:
        os.setxattr(path, "system.posix_acl_access", data)
    except OSError as e:
        pytest.skip(f"no POSIX ACLs on {path.parent}: {e}")


def test_a_credential_systemd_grants_by_acl_is_read_and_another_file_so_is_not(
    lan: LAN, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """The units' SMB password reaches the crawl as systemd passes it where credentials live
    on tmpfs: its mode shows the ACL's mask (0440). Such a file elsewhere is still refused."""
    lan.media("alpha", "music/song.mp3", artist="Madonna", title="Music")
    lan.write_hosts("alpha")
    creds = tmp_path / "credentials" / "sharecrawl-crawl.service"
    creds.mkdir(parents=True)
    for folder in (creds, tmp_path):
        (folder / "smb.credentials").write_text("username = bob\npassword = hunter2\n")
        grant_read_by_acl(folder / "smb.credentials", pwd.getpwnam("nobody").pw_uid)
        assert stat.S_IMODE((folder / "smb.credentials").stat().st_mode) == 0o440
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    monkeypatch.setenv("SHARECRAWL_SMB_CREDENTIALS", str(creds / "smb.credentials"))
    assert lan.cli("crawl", "--quiet") == 0
    monkeypatch.setenv("SHARECRAWL_SMB_CREDENTIALS", str(tmp_path / "smb.credentials"))
    capsys.readouterr()
    assert lan.cli("crawl", "--quiet") == 2
    err = capsys.readouterr().err
    assert err.startswith("sharecrawl: error: credentials file '") and err.count("\n") == 1
    assert err.endswith(
        "(SHARECRAWL_SMB_CREDENTIALS) must be readable only by its owner (chmod 600)\n"
    )


def test_a_stop_of_the_whole_group_as_systemd_sends_it_is_a_clean_exit(lan: LAN) -> None:
    """`systemctl stop` signals every process of the unit's control group at once: the page's
    workers, some still starting (the signal before their server's handlers), or not all
    forked yet, end 0 too."""
    lan.media("alpha", "music/song.mp3", artist="Madonna", title="Music")
    lan.write_hosts("alpha")
    lan.crawl()
    for forked in (1, 2, 4):
        serve = subprocess.Popen(
            cli_argv("serve", "--crawl-dir", str(lan.crawl_dir), "--port", "0", "--workers", "4"),
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert serve.stderr is not None and "serving" in serve.stderr.readline()
        while len(children(serve.pid)) < forked:  # their server not yet started
            time.sleep(0.005)
        os.killpg(serve.pid, signal.SIGTERM)
        assert serve.wait(timeout=60) == 0
        assert serve.stderr.read() == "sharecrawl: stopped\n"
