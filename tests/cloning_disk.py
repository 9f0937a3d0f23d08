"""A file system that clones files (XFS, which shares blocks between a file and its reflinked
copies) for a test: a file of the test's own formatted and mounted on a loop device. Mounting
needs root and mkfs.xfs (make test installs xfsprogs when root): the test skips with why
otherwise."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def cloning_disk(tmp_path: Path) -> Iterator[Path]:
    """A 512 MiB XFS of this test's own (its image a sparse file), unmounted after it."""
    if os.geteuid() != 0:
        pytest.skip("mounting a file system that clones files needs root")
    if shutil.which("mkfs.xfs") is None:
        pytest.skip("no mkfs.xfs here (Debian's xfsprogs; make test installs it as root)")
    if shutil.which("filefrag") is None:
        pytest.skip("no filefrag here (Debian's e2fsprogs) to see which blocks are shared")
    image, disk = tmp_path / "xfs.img", tmp_path / "xfs"
    with open(image, "wb") as out:
        out.truncate(512 * 2**20)
    made = subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", str(image)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"mkfs.xfs failed here: {made.stderr.decode().strip()}")
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-o", "loop", str(image), str(disk)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a loop device here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:  # the loop device goes with the mount (mount -o loop sets it to clear itself)
        if subprocess.run(["umount", str(disk)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(disk)], check=False)


def shared_blocks(path: Path) -> bool:
    """Whether any of the file's extents shares its blocks with another file (filefrag's
    `shared` flag, from the kernel's FIEMAP)."""
    listed = subprocess.run(["filefrag", "-v", str(path)], capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    return any("shared" in line for line in listed.stdout.splitlines()[3:])
