"""The systemd units in systemd/ (README, "As a service"): `systemd-analyze verify` passes on
each, in a root of its own holding the system's unit files and the console script where a
wheel install puts it; each service runs as its own user, confined, writing the crawl
directory alone, with a command line the real parser accepts."""

from __future__ import annotations

import configparser
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sharecrawl.cli.parser import parser

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
    parsed = parser().parse_args(args)
    assert parsed.crawl_dir == "/var/lib/sharecrawl/crawl"
    assert parsed.command == unit.stem.removeprefix("sharecrawl-")


def test_the_timer_starts_the_crawl_hourly() -> None:
    config = configparser.ConfigParser()
    config.read(ROOT / "systemd/sharecrawl-crawl.timer")
    assert config["Timer"]["OnCalendar"] == "hourly"
    assert config["Install"]["WantedBy"] == "timers.target"
