"""`sharecrawl status`: what the last round did, from its fetchlog and the live crawldb."""

from __future__ import annotations

from crawl_io.crawldir import CrawlDir, read_parquet
from crawl_io.duck import cursor
from crawl_io.schema import FETCHLOG


def round_report(crawl: CrawlDir) -> dict:
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
                  max(epoch(started) + duration_s) - min(epoch(started))
           FROM log"""
    ).fetchone()
    errors = con.execute(
        "SELECT host, share, status, error FROM log WHERE error IS NOT NULL ORDER BY host"
    ).fetchall()
    con.close()
    partitions = crawl.read(last, "partitions")
    hosts = crawl.read(last, "hosts")
    scans = sum(partitions["n_scans"].to_pylist()) - partitions.num_rows
    changes = sum(partitions["n_changes"].to_pylist())
    scanned = sum(counts.get(s, 0) for s in ("unchanged", "changed", "new", "gone"))
    return {
        "round": last,
        "partitions": {
            "scanned": scanned,
            "unchanged": counts.get("unchanged", 0),
            "changed": counts.get("changed", 0),
            "new": counts.get("new", 0),
            "gone": counts.get("gone", 0),
            "unreachable": counts.get("unreachable", 0) + counts.get("timeout", 0),
            "total": partitions.num_rows,
        },
        "entries_listed": int(totals[4]),
        "tags_read": int(totals[0]),
        "bytes_read": int(totals[1]),
        "listing_s": round(float(totals[2]), 3),
        "tags_s": round(float(totals[3]), 3),
        "round_s": round(float(totals[5] or 0), 3),
        "errors": len(errors),
        "error_list": [{"host": h, "share": s, "status": st, "error": e} for h, s, st, e in errors],
        "hosts": {"total": hosts.num_rows, "online": sum(hosts["online"].to_pylist())},
        "change_share": round(changes / scans, 4) if scans else None,
    }


def format_report(report: dict) -> str:
    p = report["partitions"]
    lines = [
        f"round {report['round']}: {p['scanned']} partitions scanned of {p['total']} "
        f"({p['unchanged']} unchanged, {p['changed']} changed, {p['new']} new, "
        f"{p['gone']} gone), {p['unreachable']} unreachable",
        f"  hosts online {report['hosts']['online']}/{report['hosts']['total']}; "
        f"{report['entries_listed']} entries listed in {report['listing_s']:.2f} s; "
        f"{report['tags_read']} tags read ({report['bytes_read']} bytes) "
        f"in {report['tags_s']:.2f} s",
    ]
    if report["change_share"] is not None:
        lines.append(f"  scans that found a change, all rounds: {report['change_share']:.1%}")
    lines += [
        f"  {e['host']}/{e['share']}: {e['status']}: {e['error']}" for e in report["error_list"]
    ]
    return "\n".join(lines)
