"""Search results as `sharecrawl search --json` prints them (docs/DESIGN.md, CLI), and as
lines for the terminal."""

from __future__ import annotations

import hashlib
from urllib.parse import quote, unquote

from sharecrawl.crawl_io.readable import human_bytes, plural, readable_text, readable_url


def copy_url(host_url: str | None, host: str, share: str, path: str) -> str:
    """The URL of a copy, percent-encoded (RFC 3986): the host's URL plus share and path."""
    base = (host_url or f"smb://{host}").rstrip("/")
    if base.startswith("smb://"):  # hosts.url may name a share: keep the host's part
        return f"smb://{base[6:].split('/')[0]}/{quote(share, safe='')}/{quote(path, safe='/')}"
    if base.startswith("file://"):  # hosts.url escapes only what would end or garble it
        base = "file://" + quote(unquote(base.removeprefix("file://")), safe="/")
    return f"{base}/{quote(share, safe='')}/{quote(path, safe='/')}"


# A copy's id for `GET /copy/{id}` (web/stream.py): the first 64 bits of the MD5 of
# `host/share/path`, as hex. Opaque to the server: it is only ever looked up in the index,
# which computes the same value in SQL (COPY_ID_SQL), never decoded into a path.
COPY_ID_SQL = "left(md5(host || '/' || share || '/' || path), 16)"


def copy_id(host: str, share: str, path: str) -> str:
    return hashlib.md5(f"{host}/{share}/{path}".encode("utf-8", "surrogatepass")).hexdigest()[:16]


def copy_link(host: str, share: str, path: str, online: object) -> str | None:
    """The server-relative link that streams a copy, for copies on hosts online now."""
    return f"/copy/{copy_id(host, share, path)}" if online else None


# A result's keys from its work's row, in DESIGN.md's --json order.
_WORK_KEYS = (
    "kind artist title album year series season episode copies hosts online_copies online_hosts "
    "work_id"
).split()


def result_record(rank: int, row: dict, urls: dict[str, str]) -> dict:
    """One result: a work's display row (the works table's columns and its score)."""
    host, share, path, online = (row[f"best_{k}"] for k in ("host", "share", "path", "online"))
    url = copy_url(urls.get(host), host, share, path)
    best = {
        "url": url,
        "iri": readable_url(url),  # the same URL as people read it
        "host": host,
        "host_name": row["best_host_name"] or host,  # as people know it
        **{k: row[f"best_{k}"] for k in ("share", "path", "format", "bitrate_kbps", "size")},
        "online": bool(online),
        "resolution": row["best_resolution"],
        "link": copy_link(host, share, path, online),
    }
    score = round(float(row["score"]), 4)
    return {"rank": rank, "score": score, **{k: row[k] for k in _WORK_KEYS}, "best": best}


def _headline(result: dict) -> str:
    if result["series"]:
        head = result["series"]
        if result["episode"] is not None:
            head += f" S{result['season'] or 0:02d}E{result['episode']:02d}"
        if result["title"]:
            head += f" — {result['title']}"
        return head
    head = " — ".join(x for x in (result["artist"], result["title"]) if x) or "?"
    extra = ", ".join(str(x) for x in (result["album"], result["year"]) if x)
    return f"{head} ({extra})" if extra else head


def episodes_gathered(results: list[dict]) -> list[dict]:
    """Results in rank order, but a series' episodes gather where its best one stands, in
    season and episode order (as the page shows them: web.views.blocks)."""
    places: list[tuple[int, int, int]] = []  # the sort key of each result
    first: dict[str, int] = {}  # a series' rank of its best episode
    for rank, r in enumerate(results):
        if not r["series"] or r["episode"] is None:
            places.append((rank, 0, 0))
        else:
            series_rank = first.setdefault(r["series"].casefold(), rank)
            places.append((series_rank, r["season"] or 0, r["episode"]))
    return [r for _, r in sorted(zip(places, results, strict=True), key=lambda x: x[0])]


def format_results(results: list[dict]) -> str:
    """Lines for people, two per result; URLs as IRIs (crawl_io.readable)."""
    if not results:
        return "no results"
    lines = []
    for number, result in enumerate(results, 1):
        best = result["best"]
        copies = plural(result["copies"], "copy", "copies")
        where = f"on {plural(result['hosts'], 'host')}"
        state = f"{result['online_copies']} online" if result["online_copies"] else "all offline"
        head = h if (h := _headline(result)) != "?" else best["path"].rpartition("/")[2]
        lines.append(
            f"{number:3d}. {readable_text(head)}  [{result['kind']}]  {copies} {where}, {state}"
        )
        quality = [best["format"] or "?"]
        if best["bitrate_kbps"]:
            quality.append(f"{best['bitrate_kbps']} kbps")
        if best.get("resolution"):
            quality.append(f"{best['resolution']}p")
        quality.append(human_bytes(best["size"]))
        marker = "" if best["online"] else "  (offline)"
        url = readable_url(best["url"])
        lines.append(f"     best: {' '.join(quality)}  {best['host_name']}  {url}{marker}")
    return "\n".join(lines)
