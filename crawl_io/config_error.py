"""The error of a malformed hosts file, URL or setting, and how a message quotes the value:
apart from crawl_io.sources, so that a command that only reads (a cold `search`) loads none of
the URL and credential parsing to report one."""

from __future__ import annotations


class ConfigError(ValueError):
    """A hosts file, URL or setting is malformed; the message says which and where."""


def short_repr(text: str, limit: int = 60) -> str:
    """A value quoted for a one-line message, cut when long."""
    return repr(text if len(text) <= limit else text[:limit] + "...")
