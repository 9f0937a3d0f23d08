"""Helpers every job uses: write a manifest of Parquet parts, run a job, collect its output."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from mrjob.job import MRJob


def write_manifest(parts: Iterable[Path], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{p.resolve()}\n" for p in parts))
    return path


def run_job(job_class: type[MRJob], manifest: Path, runner: str, *args: str) -> Iterator[Any]:
    """Run `job_class` over a manifest with an mrjob runner; yield its (key, value) pairs."""
    # The local runner's tasks run this interpreter, where mrjob is installed: zipping mrjob
    # into every run's working folder would only cost time (0.4-0.8 s a job).
    local = ["--no-bootstrap-mrjob"] if runner == "local" else []
    job = job_class(["-r", runner, "--no-conf", *local, *args, str(manifest)])
    with job.make_runner() as job_runner:
        job_runner.run()
        yield from job.parse_output(job_runner.cat_output())
