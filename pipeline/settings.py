"""A crawl's settings: one frozen `Settings`, built once from the defaults in the package's own
luigi.cfg, Luigi's config files over them and the crawl's flags over both, and handed to every
task as a parameter (`SettingsParameter`), so two crawls in one process can differ. Luigi's
config is only ever read from the files (`load_defaults`), never set."""

from __future__ import annotations

import configparser
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import luigi

import sharecrawl
from sharecrawl.crawl_io.config_error import ConfigError
from sharecrawl.jobs.runner import JobRunner

# the defaults: package data, beside the package's __init__.py in a checkout and installed
PACKAGED_CONFIG = Path(sharecrawl.__file__).resolve().parent / "luigi.cfg"
SECTION = "sharecrawl"
SMB_CONNECTIONS = "smb_connections"  # the Luigi resource of fetch shards
RUNNERS = ("inline", "local", "spark")


def load_defaults() -> None:
    """Luigi's config as its files say: the packaged defaults first, then Luigi's own files
    over them (/etc/luigi/luigi.cfg, ./luigi.cfg, LUIGI_CONFIG_PATH). Luigi's own sections
    ([core], [worker], [Index]) take their defaults from there too. Done at import; a test that
    adds a config file and removes it again calls it after."""
    config = luigi.configuration.get_config()
    for section in config.sections():  # what a removed file said goes with it
        config.remove_section(section)
    config.read([str(PACKAGED_CONFIG)])
    config.reload()


@dataclass(frozen=True)
class Settings:
    """Every [sharecrawl] option (luigi.cfg says what each does), then the central scheduler's
    URL ('': Luigi's local scheduler) and the [resources] cap on SMB connections (0: none)."""

    crawl_dir: str
    hosts_file: str
    crawlers: int
    round_seconds: float
    host_timeout_s: float
    liveness_timeout_s: float
    discover_every_s: float
    discover_concurrency: int
    discover_rate: float
    allow_wide_ranges: bool
    retire_after_days: float  # a found host silent this long is retired (pipeline.discovery)
    policy: str
    runner: str
    spark_master: str
    cluster_crawl_dir: str  # a path: the crawl dir as a mount on the cluster (empty: the same)
    cluster_python: str
    fetch_shards: int
    partition_max_seconds: float
    partition_max_bytes: int
    list_s_per_folder: float
    tag_s_per_file: float
    rules_file: str
    auto_rules: bool
    auto_rule_min_entries: int
    stats_depth: int
    stats_every: int
    stats_min_entries: int
    safety_interval_s: float
    hinted_only: bool
    keep_rounds: int
    history_days: int  # the `changes` history kept (crawl_io.crawldb.history; 0: all)
    sql_timeout_s: float
    sql_memory_limit: str
    sql_temp_limit: str
    stream_per_host: int
    stream_total: int
    stream_timeout_s: float
    cover_cache_mb: int
    scrub_mb_per_round: float  # MiB of linked parts a round verifies (its scrub)
    scheduler_url: str
    smb_connections: int

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Settings:
        """Settings another process wrote (`to_json`); ValueError when they are not this
        version's."""
        try:
            values = json.loads(text)
            return cls(**{f.name: _TYPES[str(f.type)](values[f.name]) for f in fields(cls)})
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise ValueError(f"settings another sharecrawl wrote do not read here ({e})") from None


# not [sharecrawl] options: read_settings reads them from [core] and [resources]
LUIGI_OWN = ("scheduler_url", "smb_connections")
_TYPES = {"str": str, "int": int, "float": float, "bool": bool}


class SettingError(ConfigError):
    """A [sharecrawl] option the config files leave unset or set to what does not parse."""

    def __init__(self, name: str, raw: str | None) -> None:
        self.name, self.raw = name, raw
        why = "is not set" if raw is None else f"{raw!r} is not a valid value"
        super().__init__(f"[{SECTION}] {name} {why}")


def _option(config: configparser.ConfigParser, name: str, kind: str) -> object:
    try:
        raw = config.get(SECTION, name)
    except (configparser.NoOptionError, configparser.NoSectionError):
        raise SettingError(name, None) from None
    except configparser.Error:  # e.g. a '%' that interpolation refuses
        raise SettingError(name, config.get(SECTION, name, raw=True)) from None
    try:
        if kind == "bool":
            return config.getboolean(SECTION, name)
        value = _TYPES[kind](raw)
    except ValueError:
        raise SettingError(name, raw) from None
    if name == "runner" and value not in RUNNERS:
        raise SettingError(name, raw)
    return value


def read_settings(**given: object) -> Settings:
    """The settings as the config files say now (`load_defaults`), each of `given` that is not
    None (a flag) over its option. SettingError names an option that does not parse."""
    config = luigi.configuration.get_config()
    try:
        cap = config.getint("resources", SMB_CONNECTIONS, 0) or 0
    except ValueError:
        raw = config.get("resources", SMB_CONNECTIONS, raw=True)
        raise ConfigError(f"[resources] {SMB_CONNECTIONS} {raw!r} is not a whole number") from None
    values: dict[str, object] = {
        "scheduler_url": config_scheduler_url(config),
        "smb_connections": cap,
    }
    for f in fields(Settings):
        kind = str(f.type)
        if given.get(f.name) is not None:
            values[f.name] = _TYPES[kind](given[f.name])
        elif f.name not in LUIGI_OWN:
            values[f.name] = _option(config, f.name, kind)
    return Settings(**values)  # type: ignore[arg-type]


def config_scheduler_url(config: configparser.ConfigParser) -> str:
    """The central scheduler's URL as Luigi's [core] names it (default_scheduler_url, or
    default_scheduler_host and _port), or '' for the local scheduler."""

    def core(name: str) -> str:
        return str(config.get("core", name, "") or config.get("core", name.replace("_", "-"), ""))

    if url := core("default_scheduler_url"):
        return url
    if host := core("default_scheduler_host"):
        return f"http://{host}:{core('default_scheduler_port') or 8082}/"
    return ""


class SettingsParameter(luigi.Parameter):
    """A task's Settings, as JSON where Luigi sends parameters (luigid holds every worker's).

    Not significant: a task's id is its crawl dir and round (and shard) alone, as its outputs
    are. Settings say how the outputs are made, not which: a rerun with other settings, or a
    `crawl --join` worker with its own (its machine's `crawlers` and timeouts), names the same
    task, which Luigi runs once and whose complete() finds a finished round done rather than
    starting another. Hidden: luigid's visualiser names a task by its id's parameters."""

    def __init__(self, **kwargs: object) -> None:
        visibility = luigi.parameter.ParameterVisibility.HIDDEN
        super().__init__(significant=False, visibility=visibility, **kwargs)  # type: ignore[arg-type]

    def parse(self, x: str) -> Settings:  # type: ignore[override]
        return Settings.from_json(x)

    def serialize(self, x: Settings) -> str:  # type: ignore[override]
        return x.to_json()


def round_shards(settings: Settings) -> int:
    """Fetch tasks of this round: `fetch_shards` (0: `crawlers`) under a central scheduler,
    whose workers share them; one under the local scheduler, whose one worker would run the
    shards one after the other."""
    if not settings.scheduler_url:
        return 1
    return max(1, settings.fetch_shards or settings.crawlers)


def shard_connections(settings: Settings) -> int:
    """Hosts one fetch shard fetches at once: `crawlers`, within the connection cap."""
    cap = settings.smb_connections
    return max(1, min(settings.crawlers, cap) if cap > 0 else settings.crawlers)


def job_runner(settings: Settings, crawl_root: str | Path) -> JobRunner:
    return JobRunner(
        settings.runner,
        spark_master=settings.spark_master,
        crawl_root=str(Path(crawl_root).resolve()),
        cluster_root=settings.cluster_crawl_dir,
        python_bin=settings.cluster_python,
    )


load_defaults()
