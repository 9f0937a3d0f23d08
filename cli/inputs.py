"""Input checked before anything is written: numbers, [sharecrawl] settings, named files; a
ConfigError names the option and what it must be (exit 2). Luigi loads only for settings."""

from __future__ import annotations

import math
import os
import stat
from typing import TYPE_CHECKING, Any

from sharecrawl.crawl_io.config_error import ConfigError, short_repr

if TYPE_CHECKING:
    from argparse import Namespace

    from sharecrawl.pipeline.settings import Settings

DAY_S = 86400.0


class UsageError(ConfigError):
    """Bad input from the user on the command line: one line on stderr, exit status 2."""


# [sharecrawl] numeric settings: (lowest allowed, lowest is exclusive, highest)
NUMERIC_SETTINGS: dict[str, tuple[float, bool, float]] = {
    "crawlers": (1, False, math.inf),
    "round_seconds": (0, True, 365 * DAY_S),
    "host_timeout_s": (0, True, DAY_S),
    "liveness_timeout_s": (0, True, DAY_S),
    "partition_max_seconds": (0, True, math.inf),
    "partition_max_bytes": (0, True, math.inf),
    "list_s_per_folder": (0, True, DAY_S),
    "tag_s_per_file": (0, True, DAY_S),
    "auto_rule_min_entries": (1, False, math.inf),
    "stats_depth": (0, False, math.inf),
    "stats_every": (1, False, math.inf),
    "stats_min_entries": (0, False, math.inf),
    "safety_interval_s": (0, True, 365 * DAY_S),
    "keep_rounds": (0, False, math.inf),
    "history_days": (0, False, math.inf),
    "scrub_mb_per_round": (0, False, math.inf),
}


def check_number(name: str, value: float, low: float, exclusive: bool, high: float) -> None:
    """Raise ConfigError unless `value` is a finite number in the allowed range."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, not {value}")
    if value < low or (exclusive and value == low) or value > high:
        above = f"above {low:g}" if exclusive else f"at least {low:g}"
        upto = f" and at most {high:g}" if math.isfinite(high) else ""
        raise ConfigError(f"{name} must be {above}{upto}, not {value:g}")


def check_count(name: str, value: int) -> None:
    """A count option (--rounds, --crawlers, --limit): at least 1."""
    check_number(name, value, 1, False, math.inf)


def checked_flags(args: Namespace, limits: dict[str, tuple[float, bool, float]]) -> dict:
    """The numeric options given (by their names in `args`), each checked against its limits."""
    given = {name: value for name in limits if (value := getattr(args, name)) is not None}
    for name, value in given.items():
        check_number(f"--{name.replace('_', '-')}", value, *limits[name])
    return given


# `sharecrawl simulate`'s numeric options: (lowest allowed, lowest is exclusive, highest).
SIMULATE_LIMITS: dict[str, tuple[float, bool, float]] = {
    "hosts": (1, False, 1_000_000),
    "seed": (0, False, math.inf),
    "days": (0, True, 3650),
    "crawlers": (1, False, 10_000),
    "round_seconds": (0, True, 365 * DAY_S),
    "warmup_days": (0, False, 3650),
    "min_round_s": (0, False, 365 * DAY_S),
    "notify_share": (0, False, 1),
    "hint_crawlers": (0, False, 10_000),
    "hinted_scan_folders": (0, False, math.inf),
    "workers": (1, False, 1024),
}


def setting(name: str) -> str | None:
    """The raw value of [sharecrawl] `name` as the config files say now (None when unset),
    without checking the other settings."""
    from configparser import Error as ConfigParserError

    import luigi

    from sharecrawl.pipeline import settings  # noqa: F401  (puts the packaged luigi.cfg first)

    try:
        return luigi.configuration.get_config().get("sharecrawl", name)
    except ConfigParserError:
        return None


def number_setting(
    name: str,
    default: str,
    kind: type,
    limits: tuple[float, bool, float],
    flag: str = "",
    given: float | None = None,
) -> Any:
    """`given` (the value of `flag`), else [sharecrawl] `name` (else `default`), in `limits`
    (check_number's); the message names where the value came from."""
    if given is not None:
        check_number(flag, given, *limits)
        return given
    where, raw = f"[sharecrawl] {name}", setting(name) or default
    try:
        value = kind(raw)
    except ValueError:
        whole = "whole " if kind is int else ""
        raise ConfigError(f"{where} must be a {whole}number, not {short_repr(raw)}") from None
    check_number(where, value, *limits)
    return value


def load_settings(**given: object) -> Settings:
    """The settings of the config files with the flags `given` (by setting name; None: not
    given) over them, every numeric one checked; a message names the flag or the option."""
    from sharecrawl.crawl_io.crawldb.retention import MIN_KEEP
    from sharecrawl.pipeline.settings import SettingError, read_settings

    def where(name: str) -> str:
        if given.get(name) is not None:
            return f"--{name.replace('_', '-')}"
        return f"[sharecrawl] {name} (luigi.cfg or LUIGI_CONFIG_PATH)"

    try:
        settings = read_settings(**given)
    except SettingError as e:
        if e.raw is None:
            raise ConfigError(f"{where(e.name)} is not set") from None
        raise ConfigError(f"{where(e.name)}: {short_repr(e.raw)} is not a valid value") from None
    for name, limits in NUMERIC_SETTINGS.items():
        check_number(where(name), getattr(settings, name), *limits)
    if 0 < settings.keep_rounds < MIN_KEEP:
        raise ConfigError(
            f"{where('keep_rounds')} must be 0 (keep every round) or at least {MIN_KEEP}, "
            f"not {settings.keep_rounds}"
        )
    return settings


def check_readable_file(what: str, path: str) -> None:
    """A file the user named must exist and be a readable regular file."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ConfigError(f"{what} {short_repr(path)} does not exist") from None
    except OSError as e:
        raise ConfigError(f"{what} {short_repr(path)}: {os.strerror(e.errno or 0)}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{what} {short_repr(path)} is not a regular file")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"{what} {short_repr(path)} cannot be read: permission denied")
