"""A job that reports where its tasks run: run by the local runner, as the project's
jobs are (jobs.runner.run_job)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

from mrjob.protocol import JSONProtocol, RawValueProtocol

from sharecrawl.jobs.runner import ManifestJob


class MRTaskProbe(ManifestJob):
    INPUT_PROTOCOL = RawValueProtocol
    OUTPUT_PROTOCOL = JSONProtocol

    def mapper(self, _: None, line: str) -> Iterator[tuple[str, object]]:
        yield "pid", os.getpid()
        yield "parent pid", os.getppid()
        yield (
            "listing job imported",
            "sharecrawl.jobs.mr_listing" in sys.modules,
        )  # this job does not
        yield "cwd", os.getcwd()
        yield "map input", os.environ.get("mapreduce_map_input_file", "")
        yield "stderr", getattr(sys.stderr, "name", "")  # where a stray print goes


if __name__ == "__main__":
    MRTaskProbe.run()
