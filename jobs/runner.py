"""What every job shares: its input manifest (paths relative to its folder, which `--base-dir`
places where the tasks see it), the base class that reads it, where a job runs (`JobRunner`)
and running a job with an mrjob runner."""

from __future__ import annotations

import json
import logging
import os
import posixpath
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from traceback import format_exception
from typing import Any, cast

from mrjob.job import MRJob
from mrjob.step import StepFailedException

from sharecrawl.crawl_io.crawldb.atomic import write_atomic
from sharecrawl.crawl_io.processes import alive
from sharecrawl.crawl_io.workers import WorkerDied, ended, run_calls

# a job's folders are named after its process: the next crawl removes those of a killed one
JOB_TMP_PREFIX = "sharecrawl-mrjob-"
PACKAGES = ("crawl_io", "jobs")  # what a cluster's tasks import: shipped with --py-files
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobRunner:
    """Where the update jobs run: `inline` (pure functions, no mrjob), `local` (mrjob's inline
    runner in the crawl's workers) or `spark` (`cluster_root`: the path at which the cluster's
    tasks see `crawl_root` mounted; empty: the same path)."""

    name: str = "local"
    spark_master: str = ""
    crawl_root: str = ""
    cluster_root: str = ""
    python_bin: str = ""

    @property
    def on_cluster(self) -> bool:
        return self.name == "spark"

    def task_path(self, path: str | os.PathLike) -> str:
        """`path` (under crawl_root) as the job's tasks see it."""
        path = os.path.abspath(path)
        if not (self.on_cluster and self.cluster_root and self.crawl_root):
            return path
        rel = Path(os.path.relpath(path, os.path.abspath(self.crawl_root))).as_posix()
        if rel.startswith(".."):
            return path
        return posixpath.join(self.cluster_root.rstrip("/"), rel)


def runner_of(runner: JobRunner | str) -> JobRunner:
    return runner if isinstance(runner, JobRunner) else JobRunner(runner)


class ManifestJob(MRJob):
    """A job whose input is a manifest: each line names what one mapper reads."""

    def configure_args(self) -> None:
        super().configure_args()
        self.add_passthru_arg("--base-dir", help="the folder the manifest's paths start from")

    def resolve(self, path: str) -> str:
        base = self.options.base_dir
        if not base or os.path.isabs(path):
            return path
        return os.path.normpath(os.path.join(base, path))

    def part_paths(self, line: str) -> list[str]:
        """The parts a manifest line names: one path, or a JSON list of paths."""
        line = line.strip()
        if not line:
            return []
        names = json.loads(line) if line.startswith("[") else [line]
        return [self.resolve(name) for name in names]


def manifest_path(path: str | os.PathLike, manifest: Path) -> str:
    """How a manifest names `path`: relative to the manifest's folder, '/'-separated."""
    folder = os.path.abspath(manifest.parent)
    return Path(os.path.relpath(os.path.abspath(path), folder)).as_posix()


def write_manifest(parts: Iterable[Path], path: Path, groups: int = 0) -> Path:
    """A manifest of Parquet parts: one a line, or `groups` lines each a JSON list of about equal
    bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    names = [(manifest_path(p, path), os.path.getsize(p)) for p in parts]
    if groups <= 0:
        write_atomic(path, "".join(f"{name}\n" for name, _ in names))
        return path
    bins: list[list[str]] = [[] for _ in range(min(groups, len(names)))]
    loads = [0] * len(bins)
    for name, size in sorted(names, key=lambda n: -n[1]):  # largest first into the lightest
        i = loads.index(min(loads))
        bins[i].append(name)
        loads[i] += size
    write_atomic(path, "".join(json.dumps(sorted(b)) + "\n" for b in bins))
    return path


def local_tasks() -> int:
    """The cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def packages_zip(folder: Path) -> Path:
    """The packages a cluster's tasks import, zipped for --py-files."""
    root = Path(__file__).resolve().parents[1]  # the package's folder: a checkout, or installed
    name = __name__.split(".")[0]  # its import name, whatever the folder is called
    out = folder / "sharecrawl-packages.zip"
    with zipfile.ZipFile(out, "w") as zf:
        zf.write(root / "__init__.py", f"{name}/__init__.py")
        for package in PACKAGES:
            for path in sorted((root / package).rglob("*.py")):
                zf.write(path, f"{name}/{path.relative_to(root).as_posix()}")
    return out


def runner_args(runner: JobRunner, tmp: Path, scratch: Path | None = None) -> list[str]:
    """mrjob options for Spark: the project's packages and interpreter for its tasks, and its
    scratch in `scratch` (a folder the cluster sees) rather than HDFS."""
    if not runner.on_cluster:
        return []
    # a local master's scratch would go to the system's temporary folder: it goes in `tmp`
    local = (runner.spark_master or "local").startswith("local")
    return [
        "--py-files",
        str(packages_zip(tmp)),
        "--python-bin",
        runner.python_bin or sys.executable,
        "--spark-master",
        runner.spark_master or "local[*]",
        "--jobconf",
        "spark.ui.enabled=false",
        "--spark-tmp-dir",
        str(tmp / "spark") if local else runner.task_path(scratch or tmp),
    ]


def run_job(
    job_class: type[MRJob],
    manifest: Path,
    runner: JobRunner | str,
    *args: str,
    scratch: Path | None = None,
) -> Iterator[Any]:
    """Run `job_class` over a manifest; yield its (key, value) pairs. `scratch`: where a remote
    Spark master keeps the job's files."""
    runner = runner_of(runner)
    tmp = Path(tempfile.mkdtemp(prefix=f"{JOB_TMP_PREFIX}{os.getpid()}-"))
    # mrjob never removes a Spark job's scratch: each run has its own folder in `scratch`
    own_scratch = scratch / tmp.name if scratch is not None else None
    try:
        if scratch is not None:  # a killed crawl's jobs left theirs: the round runs again
            remove_job_temp_dirs(scratch)
        base = runner.task_path(manifest.parent)
        argv = [*runner_args(runner, tmp, own_scratch), "--base-dir", base, *args]
        if runner.name == "local":
            yield from _run_in_workers(job_class, manifest, tmp, argv)
        else:
            yield from _output(job_class, argv, runner.name, tmp, manifest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if own_scratch is not None:
            shutil.rmtree(own_scratch, ignore_errors=True)


def _output(
    job_class: type[MRJob], argv: list[str], runner: str, tmp: Path, manifest: Path
) -> list[Any]:
    """A job's output; mrjob says only errors (as in cli.main), in a worker too."""
    logging.getLogger("mrjob").setLevel(logging.ERROR)
    job = job_class(["--no-conf", *argv, "-r", runner, "--local-tmp-dir", str(tmp), str(manifest)])
    with job.make_runner() as job_runner:
        job_runner.run()
        return list(job.parse_output(job_runner.cat_output()))


def _run_in_workers(
    job_class: type[MRJob], manifest: Path, tmp: Path, argv: list[str]
) -> list[Any]:
    """The local runner: mrjob's inline runner in the crawl's fork-server workers (the jobs already
    imported), lines dealt among one worker a core (one for a job with a reducer)."""
    lines = manifest.read_text().splitlines(keepends=True)
    reduces = any("reducer" in s.description(i) for i, s in enumerate(job_class([]).steps()))
    n = max(1, 1 if reduces else min(local_tasks(), len(lines)))
    calls = []
    for i in range(n):
        share = tmp / f"worker{i}" / manifest.name
        share.parent.mkdir()
        share.write_text("".join(lines[i::n]))
        calls.append(partial(_output, job_class, argv, "inline", share.parent, share))
    try:
        return [pair for pairs in run_calls(calls, n) for pair in cast(list, pairs)]
    except WorkerDied as died:
        reason = (
            f"a task's process {ended(died.exitcode)}: see the system log, then run the round again"
        )
        raise StepFailedException(reason=reason) from None
    except Exception as error:  # the task's own, its traceback in the worker noted
        log.error("a task of %s failed:\n%s", job_class.__name__, "".join(format_exception(error)))
        raise StepFailedException(reason=repr(error)) from None


def remove_job_temp_dirs(folder: Path | None = None) -> None:
    """Remove the jobs' folders in `folder` of processes that are gone; by default those in the
    system's temporary folder, this process's too (none of its jobs runs)."""
    own = folder is None
    for tmp in Path(folder or tempfile.gettempdir()).glob(f"{JOB_TMP_PREFIX}*-*"):
        pid = tmp.name[len(JOB_TMP_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and ((own and int(pid) == os.getpid()) or not alive(int(pid))):
            shutil.rmtree(tmp, ignore_errors=True)
