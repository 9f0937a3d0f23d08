"""Page models: search results and new works as the page shows them. The templates and
static/app.js render the same model, so every string a person reads is made here once."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import lru_cache
from urllib.parse import urlencode

from sharecrawl.crawl_io.readable import human_bytes, plural, readable_url
from sharecrawl.crawl_io.sources import ConfigError, parse_host_url
from sharecrawl.queries.search_results import copy_id, copy_link, copy_url

COPIES_SHOWN = 3  # copies listed under a work; the next ones fold away
COPIES_FOLDED = 5  # ... up to this many more, behind a "more copies" toggle
# What browsers play in <video> and <audio> (by format); other copies download.
VIDEO_FORMATS = frozenset({"mp4", "webm", "m4v"})
AUDIO_FORMATS = frozenset({"mp3", "ogg", "opus", "flac", "m4a", "wav"})

HostInfo = dict[str, tuple[str | None, bool, str]]  # host -> (its URL, online, name)


@lru_cache(maxsize=4096)
def network_name(host: str, host_url: str | None) -> str:
    """The host's name as Windows writes it in a path: no user, no port; an IPv6 address
    as its ipv6-literal.net name (':' as '-', a zone's '%' as 's')."""
    url = host_url or f"smb://{host}"
    if not url.startswith("smb://"):
        return host  # a file:// host: its folder's name
    try:
        name = parse_host_url(url).hostname
    except ConfigError:  # a stored URL this parser no longer reads: its key, as it is
        return host
    if ":" in name:
        return name.replace(":", "-").replace("%", "s") + ".ipv6-literal.net"
    return name


def windows_path(host: str, host_url: str | None, share: str, path: str) -> str:
    r"""The path Explorer opens: \\host\share\folder\file."""
    parts = [p for p in (share, *path.split("/")) if p]
    return "\\\\" + "\\".join([network_name(host, host_url), *parts])


def quality(row: dict) -> str:
    """'FLAC · 900 kbps', 'MKV · 1080p': format and bitrate or resolution."""
    parts = [(row.get("format") or "?").upper()]
    if row.get("resolution"):
        parts.append(f"{row['resolution']}p")
    elif row.get("bitrate_kbps"):
        parts.append(f"{row['bitrate_kbps']} kbps")
    return " · ".join(parts)


@lru_cache(maxsize=65536)  # popular works come back in many searches
def links(host_url: str | None, host: str, share: str, path: str) -> tuple[str | None, str, str]:
    """(href: percent-encoded, None unless smb:// or file://; readable text; Windows path)."""
    href = copy_url(host_url, host, share, path)
    safe_href = href if href.startswith(("smb://", "file://")) else None
    return safe_href, readable_url(href), windows_path(host, host_url, share, path)


def copy_row(row: dict, hosts: HostInfo, best: bool) -> dict:
    host, share, path = row["host"], row["share"] or "", row["path"]
    url, _, host_name = hosts.get(host, (None, False, host))
    href, iri, unc = links(url, host, share, path)  # the Windows path keeps the address
    folder, _, name = path.rpartition("/")
    return {
        "host": host,
        "host_name": host_name,  # its label: NetBIOS or DNS name, else its key
        "share": share,
        "folder": folder,
        "name": name,
        "quality": quality(row),
        "size": human_bytes(row.get("size")),
        "iri": iri,
        "href": href,
        "unc": unc,
        "online": bool(row["online"]),
        "best": best,
        "link": copy_link(host, share, path, row["online"]),  # streams it (web/stream.py)
        "why": None,  # why an online copy has no link: set by web/stream.withhold_links
        "play": player(row),
    }


def player(row: dict) -> str | None:
    """'video' or 'audio': the element a browser plays the copy in; None: it downloads."""
    fmt = row.get("format") or ""
    if fmt in VIDEO_FORMATS:
        return "video" if row.get("kind") == "video" else "audio"
    return "audio" if fmt in AUDIO_FORMATS else None


def cover(work: dict, host: str, share: str | None, path: str) -> str | None:
    """The cover's URL of an album track or a film (web/covers.py), by its copy's id."""
    film = work.get("kind") == "video" and work.get("episode") is None
    if not (film or (work.get("kind") == "audio" and work.get("album"))):
        return None
    return f"/cover/{copy_id(host, share or '', path)}"


def headline(work: dict, *, in_series: bool = False) -> tuple[str, str]:
    """(title, subtitle) of a work card."""
    if work.get("series") and work.get("episode") is not None:
        code = f"S{work.get('season') or 0:02d}E{work['episode']:02d}"
        if in_series:
            code = f"Episode {work['episode']}"
        title = work.get("title")
        return (f"{code} · {title}" if title else code), ("" if in_series else work["series"])
    title = work.get("title") or "?"
    extra = [str(x) for x in (work.get("artist"), work.get("album"), work.get("year")) if x]
    return title, " · ".join(extra)


def work_card(
    work: dict, rows: list[dict], hosts: HostInfo, offline: bool, *, in_series: bool = False
) -> dict:
    """A work with its copies `rows` (best first; offline ones only when `offline`)."""
    title, subtitle = headline(work, in_series=in_series)
    best = work.get("best") or {}
    key = (best.get("host"), best.get("share"), best.get("path"))
    rows = sorted(rows, key=lambda r: (r["host"], r["share"], r["path"]) != key)  # best first
    marked = best != {} and len(rows) > 1  # "best" says something only beside others
    copies = [copy_row(r, hosts, i == 0 and marked) for i, r in enumerate(rows)]
    total = work["copies"] if offline else work["online_copies"]
    n_offline = work["copies"] - work["online_copies"]
    summary = f"{plural(work['copies'], 'copy', 'copies')} on {plural(work['hosts'], 'host')}"
    if n_offline:
        summary += f", {n_offline} offline" + ("" if offline else " (hidden)")
    return {
        "work_id": work["work_id"],
        "rank": work.get("rank"),
        "kind": work.get("kind") or "",
        "title": title,
        "subtitle": subtitle,
        "album": (work.get("album") or "") if work.get("kind") == "audio" else "",
        "summary": summary,
        "offline": work["online_copies"] == 0,
        "cover": cover(work, rows[0]["host"], rows[0]["share"], rows[0]["path"])
        if rows and rows[0]["online"]
        else None,
        "copies": copies[:COPIES_SHOWN],
        "folded": copies[COPIES_SHOWN:],
        "more": max(total - len(copies), 0),
    }


def blocks(works: Iterable[dict], card: Callable[..., dict]) -> list[dict]:
    """Work cards in order; a series' episodes gather where its first stands, by season."""
    out: list[dict] = []
    series_blocks: dict[str, dict] = {}
    for work in works:
        series = work.get("series")
        if not series or work.get("episode") is None:
            out.append({"type": "work", "work": card(work)})
            continue
        if (key := series.casefold()) not in series_blocks:
            series_blocks[key] = {"type": "series", "title": series, "seasons": {}}
            out.append(series_blocks[key])
        series_blocks[key]["seasons"].setdefault(work.get("season") or 0, []).append(work)
    for block in series_blocks.values():
        seasons = block["seasons"]
        block["seasons"] = [
            {
                "label": f"Season {season}" if season else "No season",
                "episodes": [
                    card(w, in_series=True)
                    for w in sorted(seasons[season], key=lambda w: w["episode"])
                ],
            }
            for season in sorted(seasons)
        ]
    return out


def link(q: str, page: int = 1, size: int | None = None, offline: bool = False) -> str:
    """The page's own URL for a query: the same parameters the API takes."""
    params = {"q": q, "page": page if page > 1 else None, "size": size, "offline": int(offline)}
    return "/?" + urlencode({k: v for k, v in params.items() if k == "q" or v})


def pager(
    q: str, page: int, size: int, default_size: int, offline: bool, has_more: bool, n_shown: int
) -> dict:
    first = (page - 1) * size + 1
    keep_size = size if size != default_size else None
    return {
        "page": page,
        "text": f"Works {first}–{first + n_shown - 1}" if n_shown else "",
        "prev": link(q, page - 1, keep_size, offline) if page > 1 else None,
        "next": link(q, page + 1, keep_size, offline) if has_more else None,
    }


def status_text(status: dict, current: str) -> str:
    """The status line: hosts online, media files, version and time of the last round."""
    parts = [
        f"{status['hosts_online']} of {plural(status['hosts'], 'host')} online",
        f"{status['media']:,} media files in {status['works']:,} works",
        f"version {status['version']}"
        + (f", published {status['published'].replace('T', ' ')}" if status["published"] else ""),
    ]
    if current != status["version"]:
        parts.append(f"{current} is being indexed")
    return " · ".join(parts)
