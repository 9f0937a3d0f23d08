"""What every job shares: its input manifest, the base class that reads it, where a job runs
(`JobRunner`), and running a job with an mrjob runner. Manifest paths are relative to the
manifest's folder and `--base-dir` says where the tasks see that folder (a path, a mount or a
URI read through mrjob's filesystem layer), so a moved or mounted crawl directory still reads."""

from __future__ import annotations

import glob
import json
import logging
import os
import posixpath
import re
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from traceback import format_exception
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import pyarrow as pa
import pyarrow.parquet as pq
from mrjob.job import MRJob
from mrjob.parse import is_uri
from mrjob.step import StepFailedException

from crawl_io.crawldb.atomic import write_atomic
from crawl_io.processes import alive
from crawl_io.workers import WorkerDied, ended, run_calls

# mrjob's working folders go under one folder per job named after this process, so that an
# interrupted crawl removes its own and the next crawl those of a crawl that was killed.
JOB_TMP_PREFIX = "sharecrawl-mrjob-"
PACKAGES = ("crawl_io", "jobs")  # what a cluster's tasks import: shipped with --py-files
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobRunner:
    """Where the update jobs run: an mrjob runner name, `inline` (pure functions, no mrjob) or
    `local` (mrjob's inline runner in the crawl's workers). For `spark`: `spark_master`,
    `crawl_root` and `cluster_root` (the same folder as the tasks see it), `python_bin`."""

    name: str = "local"
    spark_master: str = ""
    crawl_root: str = ""
    cluster_root: str = ""
    python_bin: str = ""

    @property
    def in_process(self) -> bool:
        return self.name == "inline"

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


# -- reading parts -------------------------------------------------------------------------
def read_part(path: str, columns: Sequence[str] | None = None) -> pa.Table:
    """A Parquet part by local path, or by URI through mrjob's filesystem layer (the
    tasks of a cluster reading hdfs:// or file:// parts)."""
    if not is_uri(path):
        return pq.read_table(path, columns=columns)
    from mrjob.fs.composite import CompositeFilesystem
    from mrjob.fs.hadoop import HadoopFilesystem
    from mrjob.fs.local import LocalFilesystem

    fs = CompositeFilesystem()
    fs.add_fs("hadoop", HadoopFilesystem())
    fs.add_fs("local", LocalFilesystem())
    # cat takes a glob: the path's own *?[]{} are escaped (Hadoop's glob escapes with a backslash)
    literal = (
        re.sub(r"([*?\[\]{}\\])", r"\\\1", path) if path.startswith("hdfs:") else glob.escape(path)
    )
    data = b"".join(fs.cat(literal))
    return pq.read_table(pa.BufferReader(data), columns=columns)


class ManifestJob(MRJob):
    """A job whose input is a manifest: each line names what one mapper reads."""

    def configure_args(self) -> None:
        super().configure_args()
        self.add_passthru_arg(
            "--base-dir", default=None, help="the folder the manifest's paths start from"
        )

    def resolve(self, path: str) -> str:
        """A path from the manifest, made usable here (absolute paths stay as they are)."""
        base = self.options.base_dir
        if not base or os.path.isabs(path) or is_uri(path):
            return path
        if is_uri(base):
            url = urlsplit(base)
            joined = posixpath.normpath(posixpath.join(url.path, path))
            return urlunsplit(url._replace(path=joined))
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
    """A manifest of Parquet parts relative to its folder: one part a line, or `groups` lines each a
    JSON list of parts of about equal bytes."""
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


# -- running jobs --------------------------------------------------------------------------
def local_tasks() -> int:
    """How many tasks mrjob's local runner runs at once: the cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def packages_zip(folder: Path) -> Path:
    """The packages a cluster's tasks import, zipped for --py-files."""
    root = Path(__file__).resolve().parents[1]
    out = folder / "sharecrawl-packages.zip"
    with zipfile.ZipFile(out, "w") as zf:
        for package in PACKAGES:
            for path in sorted((root / package).rglob("*.py")):
                zf.write(path, path.relative_to(root).as_posix())
    return out


def runner_args(runner: JobRunner, tmp: Path, scratch: Path | None = None) -> list[str]:
    """mrjob options for a cluster runner: the project's packages and interpreter for its tasks, and
    Spark's scratch in `scratch` (a folder the cluster sees) rather than HDFS."""
    if not runner.on_cluster:
        return []
    # on a local master mrjob would keep its scratch in the system's temporary folder:
    # it goes in `tmp`, beside mrjob's own working folder (both are named by the job)
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
    """Run `job_class` over a manifest with an mrjob runner; yield its (key, value) pairs. `scratch`
    is where a remote Spark master keeps the job's files (default: a temporary folder)."""
    runner = runner_of(runner)
    tmp = Path(tempfile.mkdtemp(prefix=f"{JOB_TMP_PREFIX}{os.getpid()}-"))
    # mrjob never removes a Spark job's scratch (its uploads, its whole output): each run
    # gets a folder of its own in `scratch`, removed with it (or, if the crawl is killed,
    # by the next job that uses `scratch`)
    own_scratch = scratch / tmp.name if scratch is not None else None
    try:
        if scratch is not None:  # a killed crawl's jobs left theirs: the round runs again
            _remove_dead_jobs_folders(scratch)
        argv = [
            *runner_args(runner, tmp, own_scratch),
            "--base-dir",
            runner.task_path(manifest.parent),
            *args,
        ]
        if runner.name == "local":
            yield from _run_in_workers(job_class, manifest, tmp, argv)
        else:
            yield from _output(
                job_class, [*argv, "-r", runner.name, "--local-tmp-dir", str(tmp), str(manifest)]
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if own_scratch is not None:
            shutil.rmtree(own_scratch, ignore_errors=True)


def _output(job_class: type[MRJob], argv: list[str]) -> Iterator[Any]:
    job = job_class(["--no-conf", *argv])
    with job.make_runner() as job_runner:
        job_runner.run()
        yield from job.parse_output(job_runner.cat_output())


def _output_list(job_class: type[MRJob], argv: list[str]) -> list[Any]:
    """A job's output, run in a worker: mrjob there says only errors, as in the crawl
    process (cli.main), not that no mrjob.conf exists."""
    logging.getLogger("mrjob").setLevel(logging.ERROR)
    return list(_output(job_class, argv))


def _run_in_workers(
    job_class: type[MRJob], manifest: Path, tmp: Path, argv: list[str]
) -> list[Any]:
    """The local runner: mrjob's inline runner in the crawl's fork-server workers (already imported:
    an interpreter a task would cost its start), lines dealt among one worker per core, one worker
    for a job with a reducer. A worker that dies fails the job with a line that says so."""
    lines = manifest.read_text().splitlines(keepends=True)
    reduces = any("reducer" in s.description(i) for i, s in enumerate(job_class([]).steps()))
    n = max(1, 1 if reduces else min(local_tasks(), len(lines)))
    calls = []
    for i in range(n):
        share = tmp / f"worker{i}" / manifest.name
        share.parent.mkdir()
        share.write_text("".join(lines[i::n]))
        run = [*argv, "-r", "inline", "--local-tmp-dir", str(share.parent), str(share)]
        calls.append(partial(_output_list, job_class, run))
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


def json_lines(records: Iterable[Any]) -> str:
    return "".join(json.dumps(r, ensure_ascii=True) + "\n" for r in records)


def remove_job_temp_dirs() -> None:
    """Remove the working folders of this process's jobs (an interrupted job leaves its
    own) and of crawl processes that are gone (killed ones)."""
    _remove_dead_jobs_folders(Path(tempfile.gettempdir()), own=True)


def _remove_dead_jobs_folders(folder: Path, *, own: bool = False) -> None:
    """Remove the jobs' folders in `folder` of processes that are gone, and this process's
    (`own`: none of its jobs runs)."""
    for tmp in folder.glob(f"{JOB_TMP_PREFIX}*-*"):
        pid = tmp.name[len(JOB_TMP_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and ((own and int(pid) == os.getpid()) or not alive(int(pid))):
            shutil.rmtree(tmp, ignore_errors=True)
