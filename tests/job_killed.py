"""A job whose task is killed (SIGKILL, as the kernel's OOM killer does) on the manifest line
`die`."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

from mrjob.protocol import JSONProtocol, RawValueProtocol

from jobs.runner import ManifestJob


class MRKilledTask(ManifestJob):
    INPUT_PROTOCOL = RawValueProtocol
    OUTPUT_PROTOCOL = JSONProtocol

    def mapper(self, _: None, line: str) -> Iterator[tuple[str, int]]:
        if line.strip() == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        yield line, 1


if __name__ == "__main__":
    MRKilledTask.run()
