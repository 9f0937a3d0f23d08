"""A real full disk for a test: a small tmpfs of its own (mounting needs root: the test skips
with why otherwise), and a ballast file that leaves as much room on it as the test wants."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

BALLAST = "ballast"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 32 MiB tmpfs of this test's own, unmounted after it."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small disk needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def leave_free(disk: Path, free_bytes: int) -> None:
    """Fill `disk` with a ballast file until `free_bytes` are left."""
    stat = os.statvfs(disk)
    ballast = stat.f_bavail * stat.f_frsize - free_bytes
    with open(disk / BALLAST, "wb") as out:
        out.write(b"\0" * max(0, ballast))
        out.flush()
        os.fsync(out.fileno())


def free_all(disk: Path) -> None:
    (disk / BALLAST).unlink()
