"""A job that reports what its task process imported: run by mrjob's local runner as a
script of its own (`python tests/job_probe.py --mapper ...`), as the project's jobs are."""

from __future__ import annotations

import sys
from collections.abc import Iterator

from mrjob.protocol import JSONProtocol, RawValueProtocol

from jobs.runner import ManifestJob


class MRImportProbe(ManifestJob):
    INPUT_PROTOCOL = RawValueProtocol
    OUTPUT_PROTOCOL = JSONProtocol

    def mapper(self, _: None, line: str) -> Iterator[tuple[str, bool]]:
        import distutils  # noqa: F401  (as mrjob.util does: what the task's start pays)

        yield "setuptools imported", "setuptools" in sys.modules


if __name__ == "__main__":
    MRImportProbe.run()
