"""The [sharecrawl] settings, whose defaults live in the repository's luigi.cfg (read before
Luigi's own config files, which override it), and Luigi's [core] scheduler URL and
[resources] smb_connections cap."""

from __future__ import annotations

from pathlib import Path

import luigi

from sharecrawl.jobs.runner import JobRunner

SMB_CONNECTIONS = "smb_connections"  # the Luigi resource of fetch shards


def load_defaults() -> None:
    """Read the defaults, then Luigi's config files again over them (which also undoes an
    earlier `override`)."""
    config = luigi.configuration.get_config()
    config.read([str(Path(__file__).resolve().parents[1] / "luigi.cfg")])
    config.reload()


def override(**values: object) -> None:
    """Set [sharecrawl] options for this process (what CLI flags do) over the config files;
    an earlier call's do not linger."""
    load_defaults()
    config = luigi.configuration.get_config()
    for name, value in values.items():
        if value is not None:
            config.set("sharecrawl", name, str(value))


def _set(section: str, name: str, value: str) -> None:
    config = luigi.configuration.get_config()
    if not config.has_section(section):
        config.add_section(section)
    config.set(section, name, value)


def set_scheduler_url(url: str) -> None:
    """Use the central scheduler at `url` in this process (what `crawl --scheduler-url` does)."""
    _set("core", "default_scheduler_url", url)


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
    runner = luigi.ChoiceParameter(choices=("inline", "local", "spark"))
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


def round_shards(settings: sharecrawl) -> int:
    """Fetch tasks of this round: `fetch_shards` (0: `crawlers`) under a central scheduler,
    whose workers share them; one under the local scheduler, whose one worker would run the
    shards one after the other."""
    return max(1, settings.fetch_shards or settings.crawlers) if scheduler_url() else 1


def smb_connections() -> int:
    """The cap on SMB connections open at once by every fetch shard a scheduler runs
    (luigi.cfg [resources]; 0: none)."""
    return int(luigi.configuration.get_config().getint("resources", SMB_CONNECTIONS, 0) or 0)


def set_smb_connections(cap: int) -> None:
    """Take the cap a central scheduler enforces as this process's own."""
    _set("resources", SMB_CONNECTIONS, str(cap))


def shard_connections(settings: sharecrawl) -> int:
    """Hosts one fetch shard fetches at once: `crawlers`, within the connection cap."""
    cap = smb_connections()
    return max(1, min(settings.crawlers, cap) if cap > 0 else settings.crawlers)


def job_runner(settings: sharecrawl, crawl_root: str | Path) -> JobRunner:
    return JobRunner(
        settings.runner,
        spark_master=settings.spark_master,
        crawl_root=str(Path(crawl_root).resolve()),
        cluster_root=settings.cluster_crawl_dir,
        python_bin=settings.cluster_python,
    )


load_defaults()
