"""Connecting to a host by URL scheme; apart from crawl_io.sources so that the sources
themselves import that module without a loop."""

from __future__ import annotations

from sharecrawl.crawl_io.sources import AuthFailed, ConfigError, HostURL, Source, credentials_for


def open_source(host: HostURL, timeout_s: float = 30.0) -> Source:
    """Connect to a host. Raises SourceError when it cannot be reached."""
    if host.scheme == "file":
        from sharecrawl.crawl_io.filesource import FileSource

        return FileSource(host)
    from sharecrawl.crawl_io.smb import SMBSource  # the SMB stack loads only when a host needs it

    try:  # checked before the round; a file changed since then fails this host, loudly
        credentials = credentials_for(host)
    except ConfigError as e:
        raise AuthFailed(f"{host.host}: {e}") from None
    return SMBSource(host, credentials, timeout_s=timeout_s)
