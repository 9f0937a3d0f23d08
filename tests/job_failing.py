"""A job whose task fails on the manifest line `bad`, and is killed on `die` (SIGKILL, as the
kernel's out-of-memory killer does)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

from mrjob.protocol import JSONProtocol, RawValueProtocol

from sharecrawl.jobs.runner import ManifestJob


class MRFailingTask(ManifestJob):
    INPUT_PROTOCOL = RawValueProtocol
    OUTPUT_PROTOCOL = JSONProtocol

    def mapper(self, _: None, line: str) -> Iterator[tuple[str, int]]:
        if line.strip() == "bad":
            raise ValueError(f"a task that fails on line {line!r}")
        if line.strip() == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        yield line, 1


if __name__ == "__main__":
    MRFailingTask.run()
