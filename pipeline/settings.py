"""The [sharecrawl] settings. Their defaults live in the repository's luigi.cfg, read before
any other Luigi config file, so LUIGI_CONFIG_PATH and the usual Luigi files override them.

Luigi's own sections say how the rounds are scheduled: `[core] default_scheduler_url` (or
`crawl --scheduler-url`) names a central scheduler (luigid) that crawl processes on several
machines share, and `[resources] smb_connections` caps the SMB connections open at once by
all of them.
"""

from __future__ import annotations

from pathlib import Path

import luigi

from jobs.runner import JobRunner

DEFAULTS = Path(__file__).resolve().parents[1] / "luigi.cfg"
RUNNERS = ("inline", "local", "spark")
SMB_CONNECTIONS = "smb_connections"  # the Luigi resource of fetch shards


def load_defaults() -> None:
    """Read the defaults, then Luigi's config files again over them: a read keeps what an
    earlier one set unless a later file sets it too, so every file overrides the defaults,
    and options that an earlier `override` set go back to the files' values."""
    config = luigi.configuration.get_config()
    config.read([str(DEFAULTS)])
    config.reload()


def override(**values: object) -> None:
    """Set [sharecrawl] options for this process (what CLI flags do), on top of the config
    files as they are now: options set by an earlier call do not linger."""
    load_defaults()
    config = luigi.configuration.get_config()
    for name, value in values.items():
        if value is not None:
            config.set("sharecrawl", name, str(value))


def set_scheduler_url(url: str) -> None:
    """Use the central scheduler at `url` in this process (what `crawl --scheduler-url` does)."""
    config = luigi.configuration.get_config()
    if not config.has_section("core"):
        config.add_section("core")
    config.set("core", "default_scheduler_url", url)


class sharecrawl(luigi.Config):  # lower case: Luigi names a Config by its section
    crawl_dir = luigi.Parameter()
    hosts_file = luigi.Parameter()
    crawlers = luigi.IntParameter()
    round_seconds = luigi.FloatParameter()
    host_timeout_s = luigi.FloatParameter()
    liveness_timeout_s = luigi.FloatParameter()
    # the hosts file's ranges (pipeline.discovery): how often swept, how hard, how wide
    discover_every_s = luigi.FloatParameter()
    discover_concurrency = luigi.IntParameter()
    discover_rate = luigi.FloatParameter()
    allow_wide_ranges = luigi.BoolParameter()
    policy = luigi.Parameter()
    runner = luigi.ChoiceParameter(choices=RUNNERS)
    partition_max_seconds = luigi.FloatParameter()
    partition_max_bytes = luigi.IntParameter()
    list_s_per_folder = luigi.FloatParameter()
    tag_s_per_file = luigi.FloatParameter()
    rules_file = luigi.Parameter()
    auto_rules = luigi.BoolParameter()
    auto_rule_min_entries = luigi.IntParameter()
    stats_depth = luigi.IntParameter()
    stats_every = luigi.IntParameter()
    stats_min_entries = luigi.IntParameter()
    fetch_shards = luigi.IntParameter()
    spark_master = luigi.Parameter()
    cluster_crawl_dir = luigi.Parameter()
    cluster_python = luigi.Parameter()
    safety_interval_s = luigi.FloatParameter()  # watched partitions: scanned at least this often
    hinted_only = luigi.BoolParameter()  # a round of hinted partitions alone (watch --crawl)
    keep_rounds = luigi.IntParameter()  # old rounds removed after each (crawl_io.crawldb.retention)
    # the analysts' `sql` statement limits (cli.read.sql_limits reads and checks them)
    sql_timeout_s = luigi.FloatParameter()
    sql_memory_limit = luigi.Parameter()
    sql_temp_limit = luigi.Parameter()
    # `serve`'s streams open at once (cli.services reads and checks them)
    stream_per_host = luigi.IntParameter()
    stream_total = luigi.IntParameter()
    stream_timeout_s = luigi.FloatParameter()  # each SMB call of a stream (web.copy_source)
    cover_cache_mb = luigi.IntParameter()  # `serve`'s covers/ cap (web.covers reads it)


def scheduler_url() -> str:
    """The central scheduler's URL (luigi.cfg [core] default_scheduler_url, or
    default_scheduler_host and _port), or '' for the local scheduler."""
    config = luigi.configuration.get_config()

    def core(name: str) -> str:
        return str(config.get("core", name, "") or config.get("core", name.replace("_", "-"), ""))

    if url := core("default_scheduler_url"):
        return url
    if host := core("default_scheduler_host"):
        return f"http://{host}:{core('default_scheduler_port') or 8082}/"
    return ""


def fetch_shards(settings: sharecrawl) -> int:
    """Fetch tasks of a round: `fetch_shards`, or as many as `crawlers` when 0."""
    return max(1, settings.fetch_shards or settings.crawlers)


def round_shards(settings: sharecrawl) -> int:
    """Fetch tasks of this round: fetch_shards under a central scheduler, whose workers
    share them; one under the local scheduler, whose one worker would only run the shards
    one after the other."""
    return fetch_shards(settings) if scheduler_url() else 1


def smb_connections() -> int:
    """The cap on SMB connections open at once by every fetch shard a scheduler runs
    (luigi.cfg [resources]; 0: none)."""
    return int(luigi.configuration.get_config().getint("resources", SMB_CONNECTIONS, 0) or 0)


def set_smb_connections(cap: int) -> None:
    """Take the cap a central scheduler enforces as this process's own."""
    config = luigi.configuration.get_config()
    if not config.has_section("resources"):
        config.add_section("resources")
    config.set("resources", SMB_CONNECTIONS, str(cap))


def connection_cap(settings: sharecrawl) -> int:
    """The cap to tell a central scheduler that has none: luigi.cfg's, else `crawlers`."""
    return smb_connections() or settings.crawlers


def shard_connections(settings: sharecrawl) -> int:
    """Hosts one fetch shard fetches at once: `crawlers`, within the connection cap."""
    cap = smb_connections()
    return max(1, min(settings.crawlers, cap) if cap > 0 else settings.crawlers)


def job_runner(settings: sharecrawl, crawl_root: str | Path) -> JobRunner:
    """Where this crawl's update jobs run."""
    return JobRunner(
        settings.runner,
        spark_master=settings.spark_master,
        crawl_root=str(Path(crawl_root).resolve()),
        cluster_root=settings.cluster_crawl_dir,
        python_bin=settings.cluster_python,
    )


load_defaults()
