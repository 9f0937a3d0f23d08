"""`sharecrawl status`: what the last round did, from its fetchlog and the live crawldb, with
every host not crawled (and its `hosts.status`) and every folder whose listing was refused."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa

from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir, read_parquet
from sharecrawl.crawl_io.crawldb.integrity import dropped_effect
from sharecrawl.crawl_io.crawldb.round_times import read_round_times
from sharecrawl.crawl_io.crawldb.scrub import read_record
from sharecrawl.crawl_io.crawldb.version_manifest import dropped_parts, published_time
from sharecrawl.crawl_io.duck import cursor
from sharecrawl.crawl_io.readable import human_bytes, plural, readable_path, readable_text
from sharecrawl.crawl_io.schema import FETCHLOG, HOST_NAME_SQL, HOSTS
from sharecrawl.crawl_io.sources import CONFIG_STATUSES, HOST_OK, UNREACHABLE_STATUSES
from sharecrawl.jobs.hint_counts import hints_report

MAX_LINES = 20  # per list in the text report; --json lists everything
# what status reads of a round's sweeps (pipeline.discovery.SWEEPS) and of its moved hosts
SWEEP_COUNTS = pa.schema(
    [
        (c, pa.int64())
        for c in ("n_addresses", "n_answered", "n_smb", "n_new", "n_moved", "n_gone", "n_retired")
    ]
    + [("line", pa.string()), ("swept", pa.bool_())]
)
MOVES = pa.schema([("host", pa.string()), ("moved_from", pa.string()), HOSTS.field("address")])
NAMED_SHARES = pa.schema([("host", pa.string()), ("shares", pa.list_(pa.string()))])


def config_failure(statuses: list[str]) -> bool:
    """Did every host that answered fail for a configuration reason (a password, a share)?"""
    reachable = [s for s in statuses if s not in UNREACHABLE_STATUSES]
    return bool(reachable) and all(s in CONFIG_STATUSES for s in reachable)


def round_report(crawl: CrawlDir) -> dict:
    """What the last round did."""
    last = crawl.current()
    log = read_parquet(crawl.segment_dir(last) / "fetchlog.parquet", FETCHLOG)
    con = cursor()
    con.register("log", log)
    counts = dict(
        con.execute(  # host rows (no partition) say a host could not be opened at all
            "SELECT status, count(*) FROM log WHERE partition_id IS NOT NULL GROUP BY status"
        ).fetchall()
    )
    totals = con.execute(
        """SELECT coalesce(sum(n_tags_read), 0), coalesce(sum(bytes_read), 0),
                  coalesce(sum(listing_s), 0), coalesce(sum(tags_s), 0),
                  coalesce(sum(n_entries), 0),
                  max(epoch(started) + duration_s) - min(epoch(started)),
                  count(*) FILTER (WHERE n_denied > 0 AND partition_id IS NOT NULL)
           FROM log"""
    ).fetchone()
    errors = con.execute(
        "SELECT host, share, status, error, host_status FROM log WHERE error IS NOT NULL "
        "ORDER BY host"
    ).fetchall()
    denied = con.execute(
        """SELECT DISTINCT host, share, unnest(denied) AS path FROM log
           WHERE coalesce(n_denied, 0) > 0 ORDER BY ALL"""
    ).fetchall()
    by_reason = dict(
        con.execute(
            "SELECT reason, count(*) FROM log "
            "WHERE partition_id IS NOT NULL AND reason IS NOT NULL GROUP BY reason ORDER BY reason"
        ).fetchall()
    )
    partitions = crawl.read(last, "partitions")
    hosts = crawl.read(last, "hosts")
    con.register("hosts", hosts)
    names = dict(con.execute(f"SELECT host, {HOST_NAME_SQL} FROM hosts").fetchall())
    con.close()
    scans = sum(partitions["n_scans"].to_pylist()) - partitions.num_rows
    changes = sum(partitions["n_changes"].to_pylist())
    scanned = sum(counts.get(s, 0) for s in ("unchanged", "changed", "new", "gone"))
    host_rows = hosts.select(["host", "online", "status", "last_error"]).to_pylist()
    # versions written before the status column: from `online`
    statuses = [h["status"] or (HOST_OK if h["online"] else "offline") for h in host_rows]
    not_crawled = [
        {"host": h["host"], "name": names[h["host"]], "status": status, "error": h["last_error"]}
        for h, status in zip(host_rows, statuses, strict=True)
        if status != HOST_OK
    ]
    published = published_time(crawl.version_dir(last))
    named_shares = {  # the shares the hosts file names, by host (none: all of its shares)
        r["host"]: set(r["shares"] or ())
        for r in read_parquet(crawl.segment_dir(last) / "inject.parquet", NAMED_SHARES).to_pylist()
    }
    return {
        "round": last,
        **read_round_times(crawl, last),  # started, finished, stage_seconds
        "published": None if published is None else published.isoformat(timespec="seconds"),
        "partitions": {
            "scanned": scanned,
            **{k: counts.get(k, 0) for k in ("unchanged", "changed", "new", "gone")},
            "unreachable": counts.get("unreachable", 0) + counts.get("timeout", 0),
            "with_denied_folders": int(totals[6]),
            "total": partitions.num_rows,
        },
        "entries_listed": int(totals[4]),
        "tags_read": int(totals[0]),
        "bytes_read": int(totals[1]),
        "listing_s": round(float(totals[2]), 3),
        "tags_s": round(float(totals[3]), 3),
        "round_s": round(float(totals[5] or 0), 3),
        "errors": len(errors),
        "error_list": [
            {"host": h, "share": s, "status": st, "error": e, "host_status": hs}
            | {"share_named": h not in named_shares or s in named_shares[h]}
            for h, s, st, e, hs in errors
        ],
        "hosts": {
            "total": hosts.num_rows,
            "online": sum(hosts["online"].to_pylist()),
            "not_crawled": len(not_crawled),
            "by_status": dict(sorted(Counter(statuses).items())),
        },
        "hosts_not_crawled": not_crawled,
        "denied_folders": len(denied),
        "denied_list": [{"host": h, "share": s, "path": p} for h, s, p in denied],
        "config_failure": config_failure(statuses),
        "change_share": round(changes / scans, 4) if scans else None,
        "scan_reasons": by_reason,
        "hints": hints_report(crawl.root, partitions, by_reason),
        "dropped_parts": dropped_parts(crawl.version_dir(last)),
        "scrub": scrub_report(crawl, last),
        **discovery_report(crawl, last, names),
    }


def scrub_report(crawl: CrawlDir, last: int) -> dict | None:
    """The round's scrub of the parts it linked forward (None: it ran none)."""
    record = read_record(crawl.segment_dir(last))
    return None if record is None else record.report()


def discovery_report(crawl: CrawlDir, last: int, names: dict[str, str]) -> dict:
    """The hosts file's ranges this round: addresses tried, answers, hosts new, moved, gone."""
    seg = crawl.segment_dir(last)
    try:
        sweeps = read_parquet(seg / "discover.parquet", SWEEP_COUNTS).to_pylist()
    except (OSError, ValueError, pa.ArrowException):  # the next round says so, and sweeps
        return {}
    if not sweeps:
        return {}
    inject = read_parquet(seg / "inject.parquet", MOVES).to_pylist()
    moved = [r | {"name": names.get(r["host"], r["host"])} for r in inject if r["moved_from"]]
    for sweep in sweeps:  # a round before retiring counted none
        sweep["n_retired"] = sweep["n_retired"] or 0
    return {"sweeps": sweeps, "moved": moved, "retired": sum(s["n_retired"] for s in sweeps)}


def format_report(report: dict) -> str:
    """The round report as a few lines for people (`status`, and after every round)."""
    p = report["partitions"]
    kinds = ", ".join(f"{p[k]} {k}" for k in ("unchanged", "changed", "new", "gone") if p[k])
    lines = [
        f"round {report['round']}: {p['scanned']} of {plural(p['total'], 'partition')} scanned"
        + (f" ({kinds})" if kinds else "")
        + (f"; {p['unreachable']} on hosts lost during the round" if p["unreachable"] else "")
    ]
    hosts = report["hosts"]
    lines.append(
        f"  {hosts['online']} of {plural(hosts['total'], 'host')} online; "
        f"{plural(report['entries_listed'], 'entry', 'entries')} listed in "
        f"{report['listing_s']:.2f} s; {plural(report['tags_read'], 'tag')} read "
        f"({human_bytes(report['bytes_read'])}) in {report['tags_s']:.2f} s"
    )
    if report["change_share"] is not None:
        lines.append(f"  scans that found a change, over all rounds: {report['change_share']:.1%}")
    if (h := report.get("hints")) is not None:
        scanned = plural(h["scanned_for_hints"], "partition")
        lines.append(
            f"  hints: {h['waiting']} waiting, {h['consumed']} consumed; "
            f"{scanned} scanned for hints"
        )
    for sweep in report.get("sweeps", []):
        lines.append(
            f"  {sweep['line']}: {sweep['n_addresses']:,} addresses "
            f"{'swept' if sweep['swept'] else 'rechecked'}, {sweep['n_answered']} answered, "
            f"{sweep['n_smb']} SMB; hosts {sweep['n_new']} new, {sweep['n_moved']} moved, "
            f"{sweep['n_gone']} gone"
            + (f", {sweep['n_retired']} retired" if sweep["n_retired"] else "")
        )
    for m in report.get("moved", []):
        lines.append(f"  {readable_text(m['name'])} moved: {m['moved_from']} -> {m['address']}")
    lines += _not_crawled_lines(report)
    n_denied = report["denied_folders"]
    lines += _capped(
        f"  access denied to {plural(n_denied, 'folder')} below a share's root; "
        f"{'its' if n_denied == 1 else 'their'} rows are kept:",
        [
            f"    {readable_path('/'.join((d['host'], d['share'], d['path'])))}"
            for d in report["denied_list"]
        ],
    )
    lines += _capped(  # hosts that could not be opened are named above
        "  errors:",
        [
            f"    {readable_path(e['host'] + '/' + e['share'])}: {e['status']}: "
            f"{_without_host(e['error'], e['host'])}"
            for e in report["error_list"]
            if e["share"] is not None
        ],
    )
    if report["config_failure"]:
        lines.append(f"  {config_failure_line(report)}")
    for effect, n in Counter(map(dropped_effect, report.get("dropped_parts", []))).items():
        lines.append(f"  {plural(n, 'part')} dropped by check --repair: {effect}")
    return "\n".join(lines)


def _without_host(error: str | None, host: str) -> str:
    """An error as shown after its host's name: without the name again."""
    return readable_text((error or "").removeprefix(f"{host}: "))


def _statuses(statuses: list[str], *, counted: bool = False) -> str:
    """'1 offline, 2 refused'; 'offline' when every host has that status, unless `counted`."""
    counts = sorted(Counter(statuses).items())
    if len(counts) == 1 and not counted:
        return counts[0][0].replace("_", " ")
    return ", ".join(f"{n} {status.replace('_', ' ')}" for status, n in counts)


def _not_crawled_lines(report: dict) -> list[str]:
    hosts = report["hosts_not_crawled"]
    lines = []
    for h in hosts:
        note = "; its files stay searchable" if h["status"] in CONFIG_STATUSES else ""
        lines.append(
            f"    {readable_text(h['name'])}: {h['status'].replace('_', ' ')}: "
            f"{_without_host(h['error'], h['host'])}{note}"
        )
    summary = _statuses([h["status"] for h in hosts])
    return _capped(f"  hosts not crawled this round: {len(hosts)} ({summary})", lines)


def _capped(head: str, lines: list[str]) -> list[str]:
    if not lines:
        return []
    more = len(lines) - MAX_LINES
    tail = [f"    ... and {more} more (status --json lists them all)"] if more > 0 else []
    return [head, *lines[:MAX_LINES], *tail]


def config_failure_line(report: dict) -> str:
    """One line for a round in which every host that answered refused us or lacks a share
    the hosts file names (each such share named, with the shares its host has)."""
    hosts = [h for h in report["hosts_not_crawled"] if h["status"] in CONFIG_STATUSES]
    what = _statuses([h["status"] for h in hosts], counted=True)
    missing = [
        f"{readable_text(h['name'])}: {_without_host(h['error'], h['host'])}"
        for h in hosts
        if h["status"] == "share_not_found"
    ]
    shown = "; ".join(missing[:3]) + ("; ..." if len(missing) > 3 else "")
    credentials = "SHARECRAWL_SMB_USER/PASSWORD or the credentials file and the shares' permissions"
    if not missing:
        head = f"every host that answered refused the crawler ({what}): check {credentials}"
    elif len(missing) == len(hosts):
        head = f"a share the hosts file names is missing ({what}): {shown}; check the hosts file"
    else:
        head = (
            f"no host that answered was crawled as the hosts file says ({what}): check "
            f"{credentials}, and the hosts file's shares ({shown})"
        )
    return f"round {report['round']}: {head}; the round is published and nothing indexed was lost"


def closed_to_us(error: dict) -> bool:
    """Is it a share that refused us on a host crawled whole (the hosts file names none of
    its shares, or a range found it)? Its owner shares it with others, not us: normal life
    on a LAN, as a host switched off is (`status` still names it)."""
    return error.get("host_status") == "access_denied" and not error.get("share_named", True)


def attention(report: dict) -> tuple[list[str], list[str]]:
    """What a person should look at after a round (`crawl --quiet` prints these lines alone),
    and of them the verdicts that make the round need one (exit status 1): no host answered
    at all, every host that answered refused us, none was crawled, damage the round did not
    mend. Hosts switched off are normal, and so is a share closed to us on a host crawled
    whole; a host refusing us is one line, not one per share."""
    n, lines = report["round"], []
    named = set()
    for h in report["hosts_not_crawled"]:
        if h["status"] in CONFIG_STATUSES or h["status"] == "error":
            named.add(h["host"])
            lines.append(
                f"round {n}: {readable_text(h['name'])}: {h['status'].replace('_', ' ')}: "
                f"{_without_host(h['error'], h['host'])}"
            )
    lines += [
        f"round {n}: {readable_path(e['host'] + '/' + e['share'])}: {e['status']}: "
        f"{_without_host(e['error'], e['host'])}"
        for e in report["error_list"]
        if e["share"] is not None and e["host"] not in named and not closed_to_us(e)
    ]
    if len(lines) > MAX_LINES:
        more = f"round {n}: ... and {len(lines) - MAX_LINES} more (status --json lists them all)"
        lines = [*lines[:MAX_LINES], more]
    verdicts = []
    hosts = report["hosts"]
    every = [status for status, k in hosts["by_status"].items() for _ in range(k)]
    if hosts["total"] > 0 and all(s in UNREACHABLE_STATUSES for s in hosts["by_status"]):
        verdicts.append(
            f"round {n}: no host answered ({_statuses(every, counted=True)}): check this "
            "machine's network and the hosts file; the round is published and nothing indexed "
            "was lost"
        )
    elif hosts["total"] > 0 and HOST_OK not in hosts["by_status"] and not report["config_failure"]:
        verdicts.append(  # some answered, and failed (not SMB, a worker that died...)
            f"round {n}: no host was crawled ({_statuses(every, counted=True)}): the lines "
            "before say why; the round is published and nothing indexed was lost"
        )
    sweeps = report.get("sweeps", [])
    if hosts["total"] == 0 and sweeps and not any(s["n_smb"] for s in sweeps):
        swept = sum(s["n_addresses"] for s in sweeps)  # ranges alone, no host ever found
        verdicts.append(
            f"round {n}: no host answered ({plural(swept, 'address', 'addresses')} of the "
            "hosts file's ranges tried): check this machine's network and the hosts file"
        )
    if report["config_failure"]:
        verdicts.append(config_failure_line(report))
    scrub = report.get("scrub") or {}
    # restored, dropped, or (a part no round wrote) moved aside: mended as --repair mends
    unmended = scrub.get("damaged", 0) - len(scrub.get("mended", []))
    if unmended > 0:
        verdicts.append(
            f"round {n}: {plural(unmended, 'damaged part')} not mended: run `sharecrawl check "
            "--repair`"
        )
    return lines + verdicts, verdicts
