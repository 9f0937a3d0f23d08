"""One request of the page or the API: parameters checked, queries.search.search() run on one
pinned index file (page p of size s is results[(p-1)*s : p*s] of the best p*s works and more),
and the payload both the HTML page and /api/search send."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass

import duckdb

from sharecrawl.queries.index_store import IndexFile, IndexUnreadable
from sharecrawl.queries.querylang import parse_query
from sharecrawl.queries.search import QueryError, search, suggest
from sharecrawl.web import catalog, facets, recent, views
from sharecrawl.web.facets import with_field
from sharecrawl.web.live import LiveIndex

MAX_QUERY = 500  # characters
PAGE_SIZE = 20  # works per page, as `sharecrawl search` lists by default
MAX_PAGE_SIZE = 100
MAX_DEPTH = 1000  # page * size: deeper pages are refused, as search engines do
NEW_SHOWN = 24  # new works on the empty page, besides albums and episodes


class BadRequest(ValueError):
    """A parameter out of bounds; the message is meant for the user."""


@dataclass(frozen=True)
class Params:
    q: str = ""
    page: int = 1
    size: int = PAGE_SIZE
    offline: bool = False


def _int(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    text = params.get(name, "")
    if not text:
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise BadRequest(f"{name} must be a whole number from {low} to {high}")
    return int(text)


def parse_params(params: Mapping[str, str]) -> Params:
    q = params.get("q", "")
    if len(q) > MAX_QUERY:
        raise BadRequest(f"the query is longer than {MAX_QUERY} characters")
    size = _int(params, "size", PAGE_SIZE, 1, MAX_PAGE_SIZE)
    page = _int(params, "page", 1, 1, MAX_DEPTH)
    if page * size > MAX_DEPTH:
        raise BadRequest(f"only the best {MAX_DEPTH} works can be paged through")
    offline = params.get("offline", "") not in ("", "0", "false", "off")
    return Params(q=" ".join(q.split()), page=page, size=size, offline=offline)


def _hosts(state: IndexFile) -> views.HostInfo:
    return state.cached("hosts", catalog.load_hosts)


def copies(state: IndexFile) -> catalog.CopyTable:
    return state.cached("copies", catalog.load_copies)


def _status(live: LiveIndex, state: IndexFile) -> dict:
    return state.cached("status", lambda f: recent.status(f, live.version_dir(f)))


def _new_works(live: LiveIndex, state: IndexFile) -> list[dict]:
    return state.cached("new", lambda f: recent.new_works(f, live.version_dir(f)))


def warm(live: LiveIndex, state: IndexFile) -> None:
    """Load what requests of a new version need, before they ask (in a thread)."""
    _hosts(state)
    copies(state)
    _status(live, state)
    _new_works(live, state)
    for _ in range(2):  # queries.search holds all its arrays from a file's second search
        with contextlib.suppress(QueryError, duckdb.Error):
            search(state, "warm", limit=1)


def _card_maker(state: IndexFile, offline: bool, works: list[dict]):
    """A function making the card of any of `works`, their copies read at once."""
    hosts = _hosts(state)
    limit = views.COPIES_SHOWN + views.COPIES_FOLDED
    rows = copies(state).copies([w["work_id"] for w in works], limit, offline)

    def card(work: dict, *, in_series: bool = False) -> dict:
        return views.work_card(work, rows[work["work_id"]], hosts, offline, in_series=in_series)

    return card


def _envelope(state: IndexFile, live: LiveIndex, p: Params) -> dict:
    status = views.status_text(_status(live, state), live.current_name())
    return asdict(p) | {"version": state.version, "status": status}


def _new_page(state: IndexFile, live: LiveIndex, p: Params) -> dict:
    """The empty query's page: what is new, episodes grouped by series, albums by album."""
    works = [
        w | {"best": {"host": w["best_host"], "share": w["best_share"], "path": w["best_path"]}}
        for w in _new_works(live, state)
    ]
    if not p.offline:
        works = [w for w in works if w["online_copies"]]
    albums: dict[tuple, dict] = {}
    singles, episodes = [], []
    for work in works:
        if work.get("series") and work.get("episode") is not None:
            episodes.append(work)
        elif work.get("album") and work.get("kind") == "audio":
            key = ((work.get("artist") or "").casefold(), work["album"].casefold())
            if key not in albums:
                best = work["best"]
                albums[key] = {
                    "type": "album",
                    "title": work["album"],
                    "artist": work.get("artist") or "",
                    "year": work.get("year"),
                    "tracks": 0,
                    "cover": views.cover(work, best["host"], best["share"], best["path"]),
                    "href": views.link(with_field("", "album", work["album"]), offline=p.offline),
                }
            albums[key]["tracks"] += 1
        else:
            singles.append(work)
    by_series: dict[str, list[dict]] = {}  # series with the most recent addition first
    for work in episodes:
        by_series.setdefault(work["series"].casefold(), []).append(work)
    picked = [  # the three newest episodes (by season and number) of each series
        w
        for group in list(by_series.values())[:NEW_SHOWN]
        for w in sorted(group, key=lambda w: (w.get("season") or 0, w["episode"]))[-3:]
    ]
    singles = singles[:NEW_SHOWN]
    card = _card_maker(state, p.offline, singles + picked)
    sections = []
    if albums:
        sections.append({"title": "New albums", "blocks": list(albums.values())[:NEW_SHOWN]})
    if singles:
        sections.append({"title": "New films and files", "blocks": views.blocks(singles, card)})
    if picked:
        sections.append({"title": "New episodes", "blocks": views.blocks(picked, card)})
    n = recent.NEW_DAYS
    notice = f"Added in the last {n} days" if sections else f"Nothing new in the last {n} days."
    view = {"sections": sections, "facets": [], "pager": None, "error": None, "notice": notice}
    return _envelope(state, live, p) | {"results": [], "has_more": False, "view": view}


def _search_page(state: IndexFile, live: LiveIndex, p: Params, found: list[dict]) -> dict:
    start, end = (p.page - 1) * p.size, p.page * p.size
    shown = found[start:end]
    card = _card_maker(state, p.offline, shown)
    size = p.size if p.size != PAGE_SIZE else None

    def link(q: str) -> str:
        return views.link(q, 1, size, p.offline)

    status = _status(live, state)
    view = {
        "sections": [{"title": None, "blocks": views.blocks(shown, card)}],
        "facets": facets.facets(p.q, found, copies(state), p.offline, link),
        "pager": views.pager(
            p.q, p.page, p.size, PAGE_SIZE, p.offline, len(found) > end, len(shown)
        ),
        "error": None,
        "notice": _notice(p, bool(shown), status),
        "suggestion": None,
    }
    # A near spelling only where ticking "offline copies" cannot help (it says so instead).
    if not found and (p.offline or status["hosts_online"] == status["hosts"]):
        if near := suggest(state, p.q, all_hosts=p.offline):
            view["suggestion"] = {"q": near, "href": link(near)}
    return _envelope(state, live, p) | {
        "results": shown,
        "has_more": len(found) > end,
        "view": view,
    }


def _notice(p: Params, found: bool, status: dict) -> str | None:
    """What the page says above the results: the query's unknown field names (searched as
    text), and that nothing matched (offline copies named only when a host is offline)."""
    sentences = []
    if warning := parse_query(p.q).unknown_warning():
        sentences.append(f"{warning[0].upper()}{warning[1:]}.")
    if not found:
        hidden = status["hosts_online"] < status["hosts"] and not p.offline
        where = " on hosts online now: tick “offline copies” to see all" if hidden else ""
        sentences.append(f"No works match{where}.")
    return " ".join(sentences) or None


def error_payload(p: Params, message: str) -> dict:
    view = {"sections": [], "facets": [], "pager": None, "error": message, "notice": None}
    return asdict(p) | {"results": [], "has_more": False, "error": message, "view": view}


def run(live: LiveIndex, p: Params) -> tuple[int, dict]:
    """(HTTP status, payload) of one request; Unavailable when nothing can be served."""
    pool = max(facets.FACET_POOL, p.page * p.size + 1)
    with live.acquire() as state:
        if not p.q:
            return 200, _new_page(state, live, p)
        try:
            found = search(state, p.q, limit=pool, all_hosts=p.offline)
        except QueryError as e:
            return 400, error_payload(p, str(e))
        except IndexUnreadable:
            raise live.damaged_index() from None
        return 200, _search_page(state, live, p, found)
