"""Analysts' query results in files (`sharecrawl sql --output FILE`): CSV, Parquet or JSON by
extension, written by the CLI from the result (the sandbox cannot write), whole or not at all."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from sharecrawl.crawl_io.crawldb.atomic import write_atomic

FORMATS = {".csv": "csv", ".parquet": "parquet", ".json": "json"}


def output_format(path: Path, crawl_root: Path) -> str:
    """The format `path` asks for by its extension; ValueError for a path the CLI must not
    write: another extension, a folder, a missing folder, anything inside the crawl dir."""
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(f"--output {str(path)!r}: the name must end in .csv, .parquet or .json")
    parent = path.parent.resolve()
    if not parent.is_dir():
        raise ValueError(f"--output {str(path)!r}: folder {str(path.parent)!r} does not exist")
    if path.is_dir():
        raise ValueError(f"--output {str(path)!r} is a folder")
    crawl = crawl_root.resolve()
    # The name as written and the file a symlink there points at: neither may be inside.
    for target in (parent / path.name, path.resolve()):
        if target == crawl or crawl in target.parents:
            raise ValueError(
                f"--output {str(path)!r} is inside the crawl directory "
                f"{str(crawl_root)!r}, which only rounds write"
            )
    return fmt


def json_text(columns: list[str], rows: list[tuple]) -> str:
    """A result as `sql --json` prints it: a list of objects."""
    records = [dict(zip(columns, row, strict=True)) for row in rows]
    return json.dumps(records, default=str, ensure_ascii=False)


def write_result(path: Path, fmt: str, result: pa.Table | str) -> None:
    """Write `result` (JSON text for json, else an Arrow table) to `path` atomically."""

    def write(tmp: Path) -> None:
        if isinstance(result, str):
            tmp.write_text(result + "\n", encoding="utf-8")
        elif fmt == "parquet":
            pq.write_table(result, tmp, compression="zstd")
        else:  # CSV by DuckDB's writer: it spells lists and structs; pyarrow's refuses them
            try:
                with duckdb.connect() as con:
                    con.from_arrow(result).write_csv(str(tmp), header=True)
            except duckdb.IOException as e:  # one error family for the caller: OSError
                raise OSError(str(e).splitlines()[0]) from None

    write_atomic(path, write, durable=True)
