"""A version's MANIFEST.json: every Parquet part's size and SHA-256 (and the parts `check
--repair` dropped), and the checks of a part against its entry."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from sharecrawl.crawl_io.crawldb.atomic import write_atomic

MANIFEST_NAME = "MANIFEST.json"
FORMAT = 1  # the on-disk format this sharecrawl reads and writes; crawldb/FORMAT records it


class ManifestError(ValueError):
    """A manifest that does not parse: the version it describes is not complete."""


@dataclass(frozen=True)
class PartEntry:
    size: int
    sha256: str


Manifest = dict[str, PartEntry]  # path relative to the version folder -> entry


def file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def version_parts(vdir: Path) -> list[str]:
    """Every Parquet part under a version folder, relative, '/'-separated, sorted."""
    return sorted(p.relative_to(vdir).as_posix() for p in vdir.rglob("*.parquet"))


def _record(vdir: Path) -> tuple[Manifest, Manifest] | None:
    """(parts, parts dropped by `check --repair`) of the version's manifest, or None."""
    path = vdir / MANIFEST_NAME
    try:
        record = json.loads(path.read_bytes())
        found = tuple(
            {rel: PartEntry(int(e["size"]), str(e["sha256"])) for rel, e in entries.items()}
            for entries in (record["parts"], record.get("dropped", {}))
        )
        if any(rel.startswith("/") or ".." in rel.split("/") for m in found for rel in m):
            raise ValueError("a part outside its version folder")
        return found[0], found[1]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ManifestError(f"{path}: garbled ({type(e).__name__})") from None


def read_manifest(vdir: Path) -> Manifest | None:
    """The version's manifest or None (ManifestError: garbled). A part `check --repair`
    dropped is in it still: to every reader a missing part, to `check` no problem."""
    record = _record(vdir)
    return None if record is None else record[0] | record[1]


def dropped_parts(vdir: Path) -> list[str]:
    record = _record(vdir)
    return [] if record is None else sorted(record[1])


def write_manifest(vdir: Path, carried: Manifest) -> Manifest:
    """Write the manifest of every part now in `vdir`; a part `carried` forward (a hard
    link to a verified part) whose size agrees is not hashed again."""
    parts: Manifest = {}
    for rel in version_parts(vdir):
        path = vdir / rel
        size = path.stat().st_size
        entry = carried.get(rel)
        parts[rel] = (
            entry
            if entry is not None and entry.size == size
            else PartEntry(size, file_sha256(path))
        )
    _write(vdir, parts, {})
    return parts


def drop_parts(vdir: Path, rels: list[str]) -> None:
    """Rewrite a version's manifest recording `rels` as dropped (by `check --repair`)."""
    record = _record(vdir)
    assert record is not None  # a published version has its manifest
    parts, dropped = record
    dropped |= {rel: parts.pop(rel) for rel in rels if rel in parts}
    _write(vdir, parts, dropped)


def _write(vdir: Path, parts: Manifest, dropped: Manifest) -> None:
    def entries(m: Manifest) -> dict[str, dict]:
        return {rel: {"size": e.size, "sha256": e.sha256} for rel, e in m.items()}

    record: dict[str, object] = {"format": FORMAT, "checksum": "sha256", "parts": entries(parts)}
    if dropped:
        record["dropped"] = entries(dropped)
    # one part a line, no other whitespace: a round writes the manifest whole
    text = json.dumps(record, sort_keys=True, separators=(",", ":"))
    text = text.replace('},"', '},\n"')
    write_atomic(vdir / MANIFEST_NAME, text, durable=True)


CHECKSUM_MISMATCH = "checksum mismatch (its bytes changed since it was written)"


def _os_problem(error: OSError) -> str:
    if isinstance(error, FileNotFoundError):
        return "missing"
    return f"cannot be read ({error.strerror})"


def _size_problem(size: int, entry: PartEntry | None) -> str | None:
    if entry is not None and size != entry.size:
        return f"size {size} bytes, the manifest says {entry.size}"
    return None


def size_problem(path: Path, entry: PartEntry | None) -> str | None:
    """The cheap check (one stat): is the part there, with the size its manifest says?"""
    try:
        return _size_problem(path.stat().st_size, entry)
    except OSError as e:
        return _os_problem(e)


def checksum_problem(path: Path, entry: PartEntry) -> str | None:
    """Size (a stat), then SHA-256 against the manifest (streams the whole file: a part can
    be far larger than what read_checked should hold in memory)."""
    if problem := size_problem(path, entry):
        return problem
    return None if file_sha256(path) == entry.sha256 else CHECKSUM_MISMATCH


def read_checked(path: Path, entry: PartEntry | None) -> tuple[bytes | None, str | None]:
    """(bytes, None) of a part read once and checked as checksum_problem checks its file, or
    (None, what is wrong): what is parsed is then what was checked."""
    try:
        data = path.read_bytes()
    except OSError as e:
        return None, _os_problem(e)
    problem = _size_problem(len(data), entry)
    if problem is None and entry is not None and hashlib.sha256(data).hexdigest() != entry.sha256:
        problem = CHECKSUM_MISMATCH
    return (None, problem) if problem is not None else (data, None)


def read_problem(path: Path) -> str | None:
    """What is wrong when the part's footer or a page does not read (page CRCs checked)."""
    try:
        with pq.ParquetFile(path, page_checksum_verification=True) as f:
            for i in range(f.metadata.num_row_groups):
                f.read_row_group(i)
    except (pa.ArrowException, OSError, ValueError) as e:
        return f"does not read as Parquet ({first_line(e)})"
    return None


def first_line(error: BaseException) -> str:
    """An error's message in one line (Arrow's messages run over several)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
