"""A luigid of its own for a test or a benchmark: on a free loopback port, in its own
session, ended by its pid."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.smbd import free_port

LUIGID = Path(sys.executable).with_name("luigid")


class LuigidFailed(RuntimeError):
    """luigid did not start listening; the message ends with its stderr."""


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True


@contextmanager
def running_luigid(home: Path, config: str) -> Iterator[int]:
    """Start luigid in `home` (made here) with `config` as its config file; yield its port."""
    home.mkdir()
    (home / "luigid.cfg").write_text(config)
    port = free_port()
    env = {**os.environ, "LUIGI_CONFIG_PATH": str(home / "luigid.cfg")}
    command = [
        str(LUIGID),
        "--address",
        "127.0.0.1",
        "--port",
        str(port),
        "--state-path",
        str(home / "state.pickle"),
        "--logdir",
        str(home),
    ]
    with open(home / "stderr", "w") as stderr:
        proc = subprocess.Popen(
            command,
            cwd=home,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while not listening(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (home / "stderr").read_text()[-2000:]
                raise LuigidFailed(f"luigid did not start: {tail}")
            time.sleep(0.2)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
