"""`sharecrawl status --plot FILE.png`: partition sizes and media per host of a crawldb
version, drawn with matplotlib's Agg canvas (no display, no pyplot global state)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from crawl_io.crawldir import read_parquet
from crawl_io.duck import cursor
from crawl_io.schema import MEDIA, PARTITIONS

MAX_HOSTS = 30  # the bar chart shows the hosts with the most media; the rest are summed


def status_figures(version_dir: Path) -> dict[str, list]:
    """What the plot draws: partition sizes (entries, est. scan seconds) and media per host."""
    con = cursor()
    con.register("partitions", read_parquet(version_dir / "partitions.parquet", PARTITIONS))
    con.register("media", read_parquet(version_dir / "media", MEDIA))
    sizes = con.sql(
        "SELECT coalesce(n_files, 0) + coalesce(n_folders, 0), coalesce(est_scan_s, 0) "
        "FROM partitions"
    ).fetchall()
    hosts = con.sql(
        """SELECT host, count(*) FILTER (kind = 'audio'), count(*) FILTER (kind = 'video'),
                  coalesce(sum(size), 0) FROM media GROUP BY host
           ORDER BY count(*) DESC, host"""
    ).fetchall()
    con.close()
    if len(hosts) > MAX_HOSTS:
        rest = hosts[MAX_HOSTS - 1 :]
        others = (f"{len(rest)} others", *(sum(h[i] for h in rest) for i in (1, 2, 3)))
        hosts = [*hosts[: MAX_HOSTS - 1], others]
    return {
        "entries": [s[0] for s in sizes],
        "scan_s": [s[1] for s in sizes],
        "hosts": [h[0] for h in hosts],
        "audio": [h[1] for h in hosts],
        "video": [h[2] for h in hosts],
        "media_bytes": [h[3] for h in hosts],
    }


def plot_status(version_dir: Path, out_png: Path) -> None:
    """Write a PNG: a histogram of partition sizes and a bar chart of media per host."""
    data = status_figures(Path(version_dir))
    fig = Figure(figsize=(12, 5), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2, width_ratios=[1, 1.4])

    entries = np.asarray(data["entries"], dtype=float)
    if len(entries):
        bins = np.logspace(0, np.log10(max(entries.max(), 1)) + 0.1, 30)
        left.hist(np.maximum(entries, 1), bins=bins, color="#4878a8")
        left.set_xscale("log")
    else:
        left.text(0.5, 0.5, "no partitions", ha="center", va="center", transform=left.transAxes)
    left.set_title(f"Partition sizes ({len(entries)} partitions)")
    left.set_xlabel("files and folders per partition")
    left.set_ylabel("partitions")

    hosts = data["hosts"]
    x = np.arange(len(hosts))
    right.bar(x, data["audio"], label="audio", color="#4878a8")
    right.bar(x, data["video"], bottom=data["audio"], label="video", color="#e3943c")
    right.set_xticks(x, hosts, rotation=45, ha="right", fontsize=8)
    right.set_title(f"Media per host ({sum(data['audio']) + sum(data['video'])} files)")
    right.set_ylabel("media files")
    if hosts:
        right.margins(y=0.12)  # room for the byte labels
        right.legend()
        for i, size in enumerate(data["media_bytes"]):
            top = data["audio"][i] + data["video"][i]
            right.annotate(_bytes(size), (i, top), ha="center", va="bottom", fontsize=7)
    else:
        right.text(0.5, 0.5, "no media", ha="center", va="center", transform=right.transAxes)
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=100)


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"
