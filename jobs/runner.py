"""What every job shares: its input manifest (one Parquet part, or one JSON record naming
parts, a line), the base class that reads it, and running a job with an mrjob runner."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from mrjob.job import MRJob

from crawl_io.atomic import write_atomic
from crawl_io.processes import alive

# mrjob's working folders go under one folder per job named after this process, so that an
# interrupted crawl removes its own and the next crawl those of a crawl that was killed.
JOB_TMP_PREFIX = "sharecrawl-mrjob-"


class ManifestJob(MRJob):
    """A job whose input is a manifest: each line names what one mapper reads. Paths in it
    are relative to the manifest's own folder, and `--base-dir` (which run_job sets to that
    folder) says where that is now: a crawl directory moved, copied or mounted elsewhere,
    even with a round half done, still reads."""

    def configure_args(self) -> None:
        super().configure_args()
        self.add_passthru_arg(
            "--base-dir", default=None, help="the folder the manifest's paths start from"
        )

    def resolve(self, path: str) -> str:
        """A path from the manifest, made usable here (absolute paths stay as they are)."""
        base = self.options.base_dir
        return os.path.normpath(os.path.join(base, path)) if base else path

    def part_path(self, line: str) -> str:
        """The part a manifest line names."""
        return self.resolve(line.strip())


def manifest_path(path: str | os.PathLike, manifest: Path) -> str:
    """How a manifest names `path`: relative to the manifest's folder, '/'-separated."""
    folder = os.path.abspath(manifest.parent)
    return Path(os.path.relpath(os.path.abspath(path), folder)).as_posix()


def write_manifest(parts: Iterable[Path], path: Path) -> Path:
    """A manifest of Parquet parts, one a line, named relative to the manifest's folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, "".join(f"{manifest_path(p, path)}\n" for p in parts))
    return path


def run_job(job_class: type[MRJob], manifest: Path, runner: str, *args: str) -> Iterator[Any]:
    """Run `job_class` over a manifest with an mrjob runner; yield its (key, value) pairs.
    The manifest's paths are resolved against its folder where it is now."""
    # The local runner's tasks run this interpreter, where mrjob is installed: zipping mrjob
    # into every run's working folder would only cost time (0.4-0.8 s a job).
    local = ["--no-bootstrap-mrjob"] if runner == "local" else []
    tmp = Path(tempfile.mkdtemp(prefix=f"{JOB_TMP_PREFIX}{os.getpid()}-"))
    try:
        base = ["--base-dir", os.path.abspath(manifest.parent)]
        job = job_class(["-r", runner, "--no-conf", "--local-tmp-dir", str(tmp), *local, *base,
                         *args, str(manifest)])  # fmt: skip
        with job.make_runner() as job_runner:
            job_runner.run()
            yield from job.parse_output(job_runner.cat_output())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def remove_job_temp_dirs() -> None:
    """Remove the working folders of this process's jobs (an interrupted job leaves its
    own) and of crawl processes that are gone (killed ones)."""
    for tmp in Path(tempfile.gettempdir()).glob(f"{JOB_TMP_PREFIX}*-*"):
        pid = tmp.name[len(JOB_TMP_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and (int(pid) == os.getpid() or not alive(int(pid))):
            shutil.rmtree(tmp, ignore_errors=True)
