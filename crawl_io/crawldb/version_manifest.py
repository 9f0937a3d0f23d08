"""A version's MANIFEST.json: every Parquet part's size and SHA-256 (and the parts `check
--repair` dropped), the version's publish time and, for the files and media parts, their rows
and bytes (what the `versions` view sums); and the checks of a part against its entry. Each
part's entry is a list, [size, SHA-256 in base64, rows, folders, bytes] (RFC 4648 §4; the
counts only for files and media parts): a round writes the manifest whole, so it is kept short.
A manifest of the previous release (entries as objects, SHA-256 in hex) reads as well, and one
written before the time or the counts existed too: its time is the file's mtime (it is written
last, as the version is published) and its parts are counted when asked."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sharecrawl.crawl_io.crawldb.atomic import write_atomic
from sharecrawl.crawl_io.crawldb.layout import FORMAT, MANIFEST_NAME


class ManifestError(ValueError):
    """A manifest that does not parse: the version it describes is not complete."""


COUNTED = ("files/", "media/")  # parts whose rows and bytes the manifest records
PUBLISHED_KEY = "published"


@dataclass(frozen=True)
class PartEntry:
    size: int
    sha256: bytes  # the digest (32 bytes)
    rows: int | None = None  # a files or media part's rows (None: not recorded)
    folders: int | None = None  # of those, folders (files parts)
    bytes: int | None = None  # the sum of its files' sizes


Manifest = dict[str, PartEntry]  # path relative to the version folder -> entry
_COUNTS = ("rows", "folders", "bytes")
# what each place of an entry's list holds, as the manifest says it (its "entry" key)
ENTRY_FIELDS = ("size", "sha256", *_COUNTS)


def _entry(e: list | dict) -> PartEntry:
    if isinstance(e, dict):  # the previous release's form: an object, the digest in hex
        counts = {k: int(e[k]) for k in _COUNTS if e.get(k) is not None}
        return PartEntry(int(e["size"]), _digest(bytes.fromhex(e["sha256"])), **counts)
    size, sha256, *rest = e
    counts = {k: int(v) for k, v in zip(_COUNTS, rest, strict=False) if v is not None}
    return PartEntry(int(size), _digest(base64.b64decode(sha256, validate=True)), **counts)


def _digest(value: bytes) -> bytes:
    if len(value) != hashlib.sha256().digest_size:
        raise ValueError("not a SHA-256 digest")
    return value


def _listed(e: PartEntry) -> list:
    """An entry as the manifest holds it; trailing counts not recorded are left out."""
    values = [e.size, base64.b64encode(e.sha256).decode("ascii"), e.rows, e.folders, e.bytes]
    while values[-1] is None:
        values.pop()
    return values


def counted(rel: str, path: Path, entry: PartEntry) -> PartEntry:
    """`entry` with the part's rows, folders and bytes, for a files or media part."""
    if not rel.startswith(COUNTED):
        return entry
    folders = "is_dir" in pq.read_schema(path).names
    table = pq.read_table(path, columns=["size", "is_dir"] if folders else ["size"])
    files = table.filter(pc.invert(table["is_dir"])) if folders else table
    n_folders = table.num_rows - files.num_rows if folders else None
    total = pc.sum(files["size"]).as_py() or 0
    return PartEntry(entry.size, entry.sha256, table.num_rows, n_folders, total)


def file_sha256(path: Path) -> bytes:
    """The file's SHA-256 digest (32 bytes)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").digest()


def version_parts(vdir: Path) -> list[str]:
    """Every Parquet part under a version folder, relative, '/'-separated, sorted."""
    # os.walk and names rather than Paths: a big LAN's version holds thousands of parts
    root = os.fspath(vdir)
    found = []
    for folder, _, names in os.walk(root):
        prefix = os.path.relpath(folder, root).replace(os.sep, "/") + "/"
        prefix = "" if prefix == "./" else prefix
        found += [prefix + name for name in names if name.endswith(".parquet")]
    return sorted(found)


def _record(vdir: Path) -> tuple[Manifest, Manifest] | None:
    """(parts, parts dropped by `check --repair`) of the version's manifest, or None."""
    path = vdir / MANIFEST_NAME
    try:
        record = json.loads(path.read_bytes())
        found = tuple(
            {rel: _entry(e) for rel, e in entries.items()}
            for entries in (record["parts"], record.get("dropped", {}))
        )
        if any(rel.startswith("/") or ".." in rel.split("/") for m in found for rel in m):
            raise ValueError("a part outside its version folder")
        return found[0], found[1]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, binascii.Error) as e:
        raise ManifestError(f"{path}: garbled ({type(e).__name__})") from None


def read_manifest(vdir: Path) -> Manifest | None:
    """The version's manifest or None (ManifestError: garbled). A part `check --repair`
    dropped is in it still: to every reader a missing part, to `check` no problem."""
    record = _record(vdir)
    return None if record is None else record[0] | record[1]


def kept_parts(vdir: Path) -> Manifest | None:
    """The version's parts but those `check --repair` dropped, or None (ManifestError: garbled)."""
    record = _record(vdir)
    return None if record is None else record[0]


def dropped_parts(vdir: Path) -> list[str]:
    record = _record(vdir)
    return [] if record is None else sorted(record[1])


def write_manifest(vdir: Path, carried: Manifest, published: datetime | None = None) -> Manifest:
    """Write the manifest of every part now in `vdir`, dated `published` (default: now); a
    part `carried` forward (a hard link to a verified part) whose size agrees is not hashed
    or counted again, so that the manifest costs what the round wrote."""
    parts: Manifest = {}
    root = os.fspath(vdir)
    for rel in version_parts(vdir):
        size = os.stat(f"{root}/{rel}").st_size
        entry = carried.get(rel)
        if entry is None or entry.size != size:
            path = vdir / rel
            entry = counted(rel, path, PartEntry(size, file_sha256(path)))
        elif entry.rows is None and rel.startswith(COUNTED):  # carried from before the counts
            entry = counted(rel, vdir / rel, entry)
        parts[rel] = entry
    _write(vdir, parts, {}, published or datetime.now(UTC))
    return parts


def published_time(vdir: Path) -> datetime | None:
    """When the version was published: its manifest's time, else (a manifest written before
    it held one) the manifest file's mtime; None without a manifest that reads."""
    path = vdir / MANIFEST_NAME
    try:
        record = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return record_published(record, path)


def record_published(record: object, path: Path) -> datetime | None:
    """The time of a parsed manifest `record` (None: it did not parse, and the time is
    unknown), else that of its file `path`."""
    if not isinstance(record, dict):
        return None
    given = record.get(PUBLISHED_KEY)
    if isinstance(given, str):
        try:
            return datetime.fromisoformat(given).astimezone(UTC)
        except ValueError:
            pass
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, UTC)
    except OSError:
        return None


def drop_parts(vdir: Path, rels: list[str]) -> None:
    """Rewrite a version's manifest recording `rels` as dropped (by `check --repair`)."""
    record = _record(vdir)
    assert record is not None  # a published version has its manifest
    parts, dropped = record
    dropped |= {rel: parts.pop(rel) for rel in rels if rel in parts}
    _write(vdir, parts, dropped, published_time(vdir))  # the version keeps its time


def _write(vdir: Path, parts: Manifest, dropped: Manifest, published: datetime | None) -> None:
    def entries(m: Manifest) -> dict[str, list]:
        return {rel: _listed(e) for rel, e in m.items()}

    record: dict[str, object] = {
        "format": FORMAT,
        "checksum": "sha256",
        "entry": list(ENTRY_FIELDS),
        "parts": entries(parts),
    }
    if published is not None:
        record[PUBLISHED_KEY] = published.astimezone(UTC).isoformat()
    if dropped:
        record["dropped"] = entries(dropped)
    # one part a line, no other whitespace: a round writes the manifest whole
    text = json.dumps(record, sort_keys=True, separators=(",", ":"))
    text = text.replace('],"', '],\n"')
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


def size_problem(path: str | Path, entry: PartEntry | None) -> str | None:
    """The cheap check (one stat): is the part there, with the size its manifest says?"""
    try:
        return _size_problem(os.stat(path).st_size, entry)
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
    if problem is None and entry is not None and hashlib.sha256(data).digest() != entry.sha256:
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
