"""Is a host there? A cheap check every round, for every host: no session, no listing.

An smb:// host is online when its port accepts a TCP connection within a short timeout; a
file:// host when its folder exists.
"""

from __future__ import annotations

import errno
import os
import socket

from crawl_io.sources import HostURL


def check_host(host: HostURL, timeout_s: float = 2.0) -> str | None:
    """None when the host is reachable, else a short reason for `hosts.last_error`."""
    if host.scheme == "file":
        return None if os.path.isdir(host.hostname) else "folder is not there"
    try:
        with socket.create_connection((host.hostname, host.port or 445), timeout=timeout_s):
            return None
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"
    except socket.gaierror:
        return "unknown host name"
    except ConnectionRefusedError:
        return "connection refused"
    except OSError as e:
        return os.strerror(e.errno) if e.errno else errno.errorcode.get(e.errno or 0, "error")
