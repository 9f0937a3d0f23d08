"""The crawl rules compiled per (host, share), as a walk asks them entry by entry, and the
source that hides what they exclude (`FilteredSource`); the first rule that matches decides."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa

from sharecrawl.crawl_io.mediatypes import extension
from sharecrawl.crawl_io.sources import ConfigError, Entry, HostURL, Source
from sharecrawl.jobs.crawl_rules.parse import (
    TYPES,
    Matcher,
    Rule,
    compile_pattern,
    nfc,
    parse_rules,
    split_kind,
)


@dataclass
class _Compiled:
    exclude: bool
    path: Matcher | None
    exts: frozenset[str] | None
    dirs: bool  # applies to folders
    files: bool  # applies to files

    def folder(self, path: str) -> bool:
        return self.dirs and (self.path is None or self.path(path) or self.path(path + "/"))

    def file(self, path: str) -> bool:
        if not self.files or (self.exts and extension(path.rpartition("/")[2]) not in self.exts):
            return False
        return self.path is None or self.path(path)


@dataclass
class _ExactFolders:
    """A run of rules that each name one folder exactly (automatic rules): a set lookup."""

    exclude: bool
    paths: set[str]

    def folder(self, path: str) -> bool:
        return nfc(path) in self.paths


class ShareRules:
    """The rules that can apply in one (host, share), compiled: what the walk asks per entry."""

    def __init__(self, compiled: list[_Compiled | _ExactFolders], whole: bool = False) -> None:
        self.whole_share_excluded = whole
        self._rules = compiled
        self._folders = [r for r in compiled if not isinstance(r, _Compiled) or r.dirs]
        self._files = [r for r in compiled if isinstance(r, _Compiled) and r.files]
        self._subtree: dict[str, bool] = {}

    def __bool__(self) -> bool:
        return bool(self._rules)

    def excludes_folder(self, path: str) -> bool:
        for rule in self._folders:
            if rule.folder(path):
                return rule.exclude
        return False

    def excludes_file(self, path: str) -> bool:
        for rule in self._files:
            if rule.file(path):
                return rule.exclude
        return False

    def excludes(self, path: str, is_dir: bool) -> bool:
        return self.excludes_folder(path) if is_dir else self.excludes_file(path)

    def excludes_subtree(self, folder: str) -> bool:
        """Is `folder` or one of its ancestors excluded (so nothing in it is crawled)?"""
        if not self._folders:
            return False
        # up to the nearest folder already known (a loop: shares can be thousands deep)
        chain, known = [], False
        while folder:
            cached = self._subtree.get(folder)
            if cached is not None:
                known = cached
                break
            chain.append(folder)
            folder = folder.rpartition("/")[0]
        for path in reversed(chain):
            known = known or self.excludes_folder(path)
            self._subtree[path] = known
        return known


@dataclass
class Rules:
    """An ordered rule list; the first rule matching an entry decides."""

    rules: tuple[Rule, ...] = ()
    _shares: dict[tuple[str, str], ShareRules] = field(
        default_factory=dict, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        self._compiled = [_compile(r) for r in self.rules]

    def __bool__(self) -> bool:
        return bool(self.rules)

    def text(self) -> str:
        return "".join(rule.line() + "\n" for rule in self.rules)

    @property
    def digest(self) -> str:
        """Changes when the effective rules change (to know a rescan is due)."""
        return hashlib.md5(self.text().encode()).hexdigest()

    def for_share(self, host: str, share: str) -> ShareRules:
        if (host, share) not in self._shares:
            self._shares[host, share] = _for_share(self._compiled, host, share)
        return self._shares[host, share]

    def excludes_share(self, host: str, share: str) -> bool:
        """Does the first rule with only host/share conditions that matches exclude it?"""
        return self.for_share(host, share).whole_share_excluded

    def drop_excluded(self, table: pa.Table) -> pa.Table:
        """`table` (host, share, path[, is_dir]: without it, files) without the rows a rule
        excludes, directly or through a folder above them."""
        if not self.rules or table.num_rows == 0:
            return table
        columns = [table[c].to_pylist() for c in ("host", "share", "path")]
        has_dirs = "is_dir" in table.column_names
        dirs = table["is_dir"].to_pylist() if has_dirs else [False] * table.num_rows
        shares = [self.for_share(h, s) for h, s in zip(columns[0], columns[1], strict=True)]
        keep = [
            not rules.whole_share_excluded
            and not rules.excludes(path, is_dir)
            and not rules.excludes_subtree(path.rpartition("/")[0])
            for rules, path, is_dir in zip(shares, columns[2], dirs, strict=True)
        ]
        return table.filter(pa.array(keep, pa.bool_()))


@dataclass
class _Pending:
    """A rule with its host and share conditions still to test per share."""

    host: Matcher | None
    share: Matcher | None
    rule: _Compiled
    exact_folder: str | None  # the folder it names exactly, if that is all it says
    whole_share: bool  # only host/share conditions: it decides for whole shares


def _compile(rule: Rule) -> _Pending:
    c = dict(rule.conditions)
    kinds = TYPES.get(c.get("type", ""), None)
    path_value, icase = (c["ipath"], True) if "ipath" in c else (c.get("path"), False)
    exts = None
    if "ext" in c:
        exts = frozenset(e.strip().lstrip(".").lower() for e in c["ext"].split(","))
    path = compile_pattern(path_value, ignore_case=icase, name_glob=True) if path_value else None
    compiled = _Compiled(
        exclude=rule.action == "exclude",
        path=path,
        exts=exts,
        dirs=kinds in (None, "dir") and exts is None,
        files=kinds in (None, "file"),
    )
    exact = None
    if path_value is not None and not icase and exts is None and kinds == "dir":
        kind, pattern = split_kind(path_value)
        if kind in ("exact", "pct"):
            exact = nfc(unquote(pattern) if kind == "pct" else pattern)

    def matcher(key: str) -> Matcher | None:
        return compile_pattern(c[key], ignore_case=True) if key in c else None

    whole = not set(c) - {"host", "share", "id"}
    return _Pending(matcher("host"), matcher("share"), compiled, exact, whole)


def _for_share(pending: Sequence[_Pending], host: str, share: str) -> ShareRules:
    out: list[_Compiled | _ExactFolders] = []
    whole: bool | None = None
    for p in pending:
        if (p.host and not p.host(host)) or (p.share and not p.share(share)):
            continue
        if p.whole_share and whole is None:
            whole = p.rule.exclude
        if p.exact_folder is not None:
            last = out[-1] if out else None
            if isinstance(last, _ExactFolders) and last.exclude == p.rule.exclude:
                last.paths.add(p.exact_folder)
            else:
                out.append(_ExactFolders(p.rule.exclude, {p.exact_folder}))
            continue
        out.append(p.rule)
    return ShareRules(out, bool(whole))


class FilteredSource:
    """A Source that hides what the rules exclude (shares not offered, entries not returned), so an
    excluded folder is never listed and partition hashes cover exactly what is crawled."""

    def __init__(self, source: Source, rules: Rules, host_key: str) -> None:
        self.source = source
        self.host: HostURL = source.host
        self.rules = rules
        self.host_key = host_key  # the host's name in the tables

    def shares(self) -> list[str]:
        return [s for s in self.source.shares() if not self.rules.excludes_share(self.host_key, s)]

    def listdir(self, share: str, path: str) -> list[Entry]:
        rules = self.rules.for_share(self.host_key, share)
        if rules.whole_share_excluded or rules.excludes_subtree(path):
            return []  # an excluded partition root: nothing in it is crawled
        entries = self.source.listdir(share, path)
        if not rules:
            return entries
        prefix = f"{path}/" if path else ""
        return [e for e in entries if not rules.excludes(prefix + e.name, e.is_dir)]

    @property
    def expect(self) -> Callable[[str, list[str]], None] | None:
        """The source's read-ahead (SMBSource.expect) of what is crawled; None: it has none."""
        expect = getattr(self.source, "expect", None)
        if expect is None:
            return None

        def crawled(share: str, paths: list[str]) -> None:
            rules = self.rules.for_share(self.host_key, share)
            if not rules.whole_share_excluded:
                expect(share, [p for p in paths if not rules.excludes_subtree(p)])

        return crawled

    def read(self, share: str, path: str, offset: int, length: int) -> bytes:
        return self.source.read(share, path, offset, length)

    def close(self) -> None:
        self.source.close()


def filtered(source: Source, rules: Rules | None, host_key: str) -> Source:
    """`source` with the rules applied; the source itself when there are none."""
    return FilteredSource(source, rules, host_key) if rules else source


def load_rules(path: str | os.PathLike) -> Rules:
    """The rules of a file (absent: none); ConfigError naming file:line when malformed."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Rules()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read rules: {e}") from None
    return Rules(tuple(parse_rules(text, str(path))))
