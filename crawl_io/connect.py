"""Connecting to a host: the registry of source kinds, by URL scheme (file:// and smb://).

Kept apart from crawl_io.sources, which defines what a source is, so that the sources
themselves (crawl_io.filesource, crawl_io.smb) import that definition without a loop.
"""

from __future__ import annotations

from crawl_io.sources import AuthFailed, ConfigError, HostURL, Source, credentials_for


def open_source(host: HostURL, timeout_s: float = 30.0) -> Source:
    """Connect to a host. Raises SourceError when it cannot be reached."""
    if host.scheme == "file":
        from crawl_io.filesource import FileSource

        return FileSource(host)
    from crawl_io.smb import SMBSource  # the SMB stack loads only when a host needs it

    try:  # checked before the round; a file changed since then fails this host, loudly
        credentials = credentials_for(host)
    except ConfigError as e:
        raise AuthFailed(f"{host.host}: {e}") from None
    return SMBSource(host, credentials, timeout_s=timeout_s)
