"""The [sharecrawl] settings. Their defaults live in the repository's luigi.cfg, read before
any other Luigi config file, so LUIGI_CONFIG_PATH and the usual Luigi files override them."""

from __future__ import annotations

from pathlib import Path

import luigi
from luigi.configuration.cfg_parser import LuigiConfigParser

DEFAULTS = Path(__file__).resolve().parents[1] / "luigi.cfg"
RUNNERS = ("inline", "local", "spark", "hadoop")


def load_defaults() -> None:
    if str(DEFAULTS) not in LuigiConfigParser._config_paths:
        LuigiConfigParser._config_paths.insert(0, str(DEFAULTS))
        LuigiConfigParser.reload()


def override(**values: object) -> None:
    """Set [sharecrawl] options for this process (what CLI flags do), on top of the config
    files as they are now: options set by an earlier call do not linger."""
    LuigiConfigParser.reload()
    config = luigi.configuration.get_config()
    for name, value in values.items():
        if value is not None:
            config.set("sharecrawl", name, str(value))


class sharecrawl(luigi.Config):  # lower case: Luigi names a Config by its section
    crawl_dir = luigi.Parameter()
    hosts_file = luigi.Parameter()
    crawlers = luigi.IntParameter()
    round_seconds = luigi.FloatParameter()
    host_timeout_s = luigi.FloatParameter()
    liveness_timeout_s = luigi.FloatParameter()
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
    safety_interval_s = luigi.FloatParameter()  # watched partitions: scanned at least this often
    hinted_only = luigi.BoolParameter()  # a round of hinted partitions alone (watch --crawl)


load_defaults()
