"""Crawl filters: the rules language (parse, compile, match), the source that applies them
(FilteredSource) and automatic rules from prefix statistics (`auto_rules`: folders that hold
many entries and no media cost listing time and can hold nothing to find; after the automatic
filter generation of "Optimising document collection with Nutch"). The store that
rereads the rules every round and keeps the last good ones is pipeline.rules_store.

Rules file, one rule a line (`#` at the start of a line begins a comment):

    exclude path=node_modules                 # a folder or file of that name, at any depth
    exclude host=lab-* share=* path=**/cache/**
    exclude ext=iso,exe,tmp                   # files with these extensions
    include host=lab-3 path=Music/**          # the first matching rule decides
    exclude host='re:^pc-\\d+$' path=prefix:Windows/
    exclude path="Program Files" type=dir

A rule is `include` or `exclude` followed by conditions `key=pattern`, all of which must hold.
Keys: `host`, `share` (both case-insensitive), `path` (case-sensitive), `ipath` (the same,
case-insensitive), `ext` (a comma-separated list of extensions, case-insensitive, files
only), `type` (`dir` or `file`), `id` (a name for the rule, to disable it). Patterns:
  glob (default): `*` and `?` stay within one folder name, `**` spans folders, `**/` is zero
      or more folders, `[a-z]` / `[!a-z]` are classes. A path glob without `/` matches the
      entry's name at any depth (as in .gitignore); with `/` it matches the whole path.
  `re:REGEX`   a Python regular expression searched in the value (anchor with ^ and $);
  `prefix:P`   the value starts with P;   `exact:V`  the value is V;
  `pct:V`      the value is V after %-decoding (for names with control characters).
Names and patterns are compared in Unicode NFC, so a rule typed `Música` also matches the
decomposed `Mu\u0301sica` that macOS shares list. Values with spaces or quotes are quoted as
in a shell (`'...'` or `"..."`; no backslash escapes, so regexes need no doubling). Paths are
share-relative with `/` and no leading `/`.

A rule with only host and share conditions applies to whole shares (`exclude
host=printer-*`, `exclude share=C$`): an excluded share is not listed at all.
A folder matches a rule when its path or its path followed by `/` does (so `Music/**` and
`prefix:Music/` also match the folder `Music`); an excluded folder is not listed, so nothing
under it is seen. A file matches on its own path. The first rule that matches decides;
nothing matching means included. As in .gitignore, nothing under an excluded folder can be
included again: `include path=Music/Rock/**` before `exclude path=**` also needs `include
path=Music type=dir`, or the walk never enters Music.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.compute as pc

from crawl_io.mediatypes import extension
from crawl_io.sources import ConfigError, Entry, HostURL, Source

ACTIONS = ("include", "exclude")
KEYS = ("host", "share", "path", "ipath", "ext", "type", "id")
TYPES = {"dir": "dir", "folder": "dir", "file": "file"}
KINDS = ("glob", "re", "prefix", "exact", "pct")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")

Matcher = Callable[[str], bool]


# -- patterns ------------------------------------------------------------------------------
def glob_to_regex(pattern: str) -> str:
    """A path glob as a regular expression for re.fullmatch (with re.DOTALL)."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and (end := _class_end(pattern, i)) > 0:
            body = pattern[i + 1 : end]
            negate = body.startswith("!")
            body = body[1:] if negate else body
            escaped = "".join(c if c == "-" else re.escape(c) for c in body)
            out.append(f"[^/{escaped}]" if negate else f"(?!/)[{escaped}]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


def _class_end(pattern: str, start: int) -> int:
    """Index of the `]` closing the class opened at `start`, or -1 (then `[` is literal)."""
    j = start + 1
    if j < len(pattern) and pattern[j] == "!":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1  # a leading ] is a member
    end = pattern.find("]", j)
    return end


def _split_kind(value: str) -> tuple[str, str]:
    kind, sep, rest = value.partition(":")
    return (kind, rest) if sep and kind in KINDS else ("glob", value)


def _nfc(value: str) -> str:
    """Composed form: macOS and some Samba set-ups list names decomposed (NFD), while rules
    are typed composed; both sides are compared composed."""
    return value if value.isascii() else unicodedata.normalize("NFC", value)


def compile_pattern(value: str, *, ignore_case: bool, name_glob: bool = False) -> Matcher:
    """A predicate for one condition's pattern, comparing NFC forms. With `name_glob`, a
    glob without `/` matches the last `/`-separated component (an entry's name)."""
    kind, pattern = _split_kind(value)
    if kind == "pct":
        kind, pattern = "exact", unquote(pattern)
    matcher = _compile_pattern(kind, _nfc(pattern), ignore_case, name_glob)
    return lambda v: matcher(_nfc(v))


def _compile_pattern(kind: str, pattern: str, ignore_case: bool, name_glob: bool) -> Matcher:
    fold = str.casefold if ignore_case else None
    if kind in ("exact", "prefix"):
        want = fold(pattern) if fold else pattern
        if kind == "exact":
            return (lambda v: fold(v) == want) if fold else want.__eq__
        return (lambda v: fold(v).startswith(want)) if fold else (lambda v: v.startswith(want))
    flags = re.DOTALL | (re.IGNORECASE if ignore_case else 0)
    if kind == "re":
        return re.compile(pattern, flags).search  # type: ignore[return-value]
    regex = re.compile(glob_to_regex(pattern), flags)
    if name_glob and "/" not in pattern:
        match = regex.fullmatch
        return lambda v: match(v.rstrip("/").rpartition("/")[2]) is not None
    return lambda v: regex.fullmatch(v) is not None


# -- rules ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    """One rule as written: its action and (key, pattern) conditions, in the file's order."""

    action: str
    conditions: tuple[tuple[str, str], ...]
    where: str = field(default="", compare=False)  # file:line it came from, for messages

    @property
    def id(self) -> str | None:
        return dict(self.conditions).get("id")

    def line(self) -> str:
        return " ".join([self.action, *(f"{k}={_quote(v)}" for k, v in self.conditions)])

    def __str__(self) -> str:
        return self.line()


def _quote(value: str) -> str:
    if CONTROL.search(value):  # cannot live on one line: %-encode it (exact values only)
        kind, pattern = _split_kind(value)
        if kind not in ("exact", "pct"):
            raise ValueError(f"pattern {value!r} has control characters")
        value = "pct:" + quote(unquote(pattern) if kind == "pct" else pattern, safe="")
    return shlex.quote(value)


def _tokens(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True)
    lexer.whitespace_split = True
    lexer.commenters = ""  # '#' inside a pattern (Synology's #recycle) is not a comment
    lexer.escape = ""  # no backslash escapes: regexes are written as they are
    return list(lexer)


def parse_rule(line: str, where: str = "") -> Rule | None:
    """The rule on one line, None for a blank or comment line; ConfigError when malformed."""
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return None

    def error(message: str) -> ConfigError:
        return ConfigError(f"{where}: {message}" if where else message)

    try:
        action, *words = _tokens(stripped)
    except ValueError as e:  # an unclosed quote
        raise error(f"{e}: {stripped!r}") from None
    if action not in ACTIONS:
        raise error(f"a rule starts with include or exclude, not {action!r}")
    conditions: list[tuple[str, str]] = []
    for word in words:
        key, sep, value = word.partition("=")
        if not sep:
            raise error(f"expected key=pattern, got {word!r}")
        if key not in KEYS:
            raise error(f"unknown key {key!r} (keys: {', '.join(KEYS)})")
        if any(k == key for k, _ in conditions):
            raise error(f"key {key!r} given twice")
        if not value:
            raise error(f"empty pattern for {key!r}")
        _check_value(key, value, error)
        conditions.append((key, value))
    if not any(k != "id" for k, _ in conditions):
        raise error(f"{action} needs a condition (write path=** to mean everything)")
    return Rule(action, tuple(conditions), where)


def _check_value(key: str, value: str, error: Callable[[str], ConfigError]) -> None:
    if key == "type" and value not in TYPES:
        raise error(f"type is dir or file, not {value!r}")
    if key == "ext" and not all(e.strip().lstrip(".") for e in value.split(",")):
        raise error(f"empty extension in {value!r}")
    if key in ("host", "share", "path", "ipath"):
        kind, pattern = _split_kind(value)
        if kind == "re":
            try:
                re.compile(pattern)
            except re.error as e:
                raise error(f"bad regular expression {pattern!r}: {e}") from None
        if kind != "glob" and not pattern:
            raise error(f"empty pattern for {key!r}")


def parse_rules(text: str, source: str = "<rules>") -> list[Rule]:
    rules = []
    for lineno, line in enumerate(text.splitlines(), 1):
        rule = parse_rule(line, f"{source}:{lineno}")
        if rule is not None:
            rules.append(rule)
    return rules


# -- compiled, per share -------------------------------------------------------------------
@dataclass
class _Compiled:
    exclude: bool
    path: Matcher | None
    exts: frozenset[str] | None
    dirs: bool  # applies to folders
    files: bool  # applies to files

    def folder(self, path: str) -> bool:
        if not self.dirs:
            return False
        return self.path is None or self.path(path) or self.path(path + "/")

    def file(self, path: str) -> bool:
        if not self.files:
            return False
        if self.exts is not None and extension(path.rpartition("/")[2]) not in self.exts:
            return False
        return self.path is None or self.path(path)


@dataclass
class _ExactFolders:
    """A run of rules that each name one folder exactly (automatic rules): a set lookup."""

    exclude: bool
    paths: set[str]

    def folder(self, path: str) -> bool:
        return _nfc(path) in self.paths

    def file(self, path: str) -> bool:
        return False


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

    def excludes_entry(self, path: str, is_dir: bool) -> bool:
        """Is this entry excluded by itself or by a folder above it?"""
        return self.excludes(path, is_dir) or self.excludes_subtree(path.rpartition("/")[0])


NO_RULES = ShareRules([])


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

    def __add__(self, other: Rules) -> Rules:
        return Rules((*self.rules, *other.rules))

    def text(self) -> str:
        return "".join(rule.line() + "\n" for rule in self.rules)

    @property
    def digest(self) -> str:
        """Changes when the effective rules change (to know a rescan is due)."""
        return hashlib.md5(self.text().encode()).hexdigest()

    def for_share(self, host: str, share: str) -> ShareRules:
        key = (host, share)
        found = self._shares.get(key)
        if found is None:
            found = self._shares[key] = _for_share(self._compiled, host, share)
        return found

    def excludes_share(self, host: str, share: str) -> bool:
        """Does the first rule with only host/share conditions that matches exclude it?"""
        return self.for_share(host, share).whole_share_excluded

    def excludes_folder(self, host: str, share: str, path: str) -> bool:
        return self.for_share(host, share).excludes_folder(path)

    def excludes_file(self, host: str, share: str, path: str) -> bool:
        return self.for_share(host, share).excludes_file(path)

    def excluded_mask(self, table: pa.Table) -> pa.Array:
        """For rows with host, share, path, is_dir: excluded by a rule, directly or through a
        folder above them (the rows that must leave the crawldb)."""
        if not self.rules or table.num_rows == 0:
            return pa.array([False] * table.num_rows, pa.bool_())
        is_dir = table["is_dir"] if "is_dir" in table.column_names else None
        columns = [table[c].to_pylist() for c in ("host", "share", "path")]
        dirs = is_dir.to_pylist() if is_dir is not None else [False] * table.num_rows
        mask = [
            self.for_share(h, s).whole_share_excluded or self.for_share(h, s).excludes_entry(p, d)
            for h, s, p, d in zip(*columns, dirs, strict=True)
        ]
        return pa.array(mask, pa.bool_())

    def drop_excluded(self, table: pa.Table) -> pa.Table:
        """`table` without its excluded rows (tables without is_dir hold files: media)."""
        if not self.rules:
            return table
        return table.filter(pc.invert(self.excluded_mask(table)))


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
    path_value, ignore_case = (c["ipath"], True) if "ipath" in c else (c.get("path"), False)
    exts = None
    if "ext" in c:
        exts = frozenset(e.strip().lstrip(".").lower() for e in c["ext"].split(","))
    compiled = _Compiled(
        exclude=rule.action == "exclude",
        path=None if path_value is None else compile_pattern(
            path_value, ignore_case=ignore_case, name_glob=True),
        exts=exts,
        dirs=kinds in (None, "dir") and exts is None,
        files=kinds in (None, "file"),
    )  # fmt: skip
    exact = None
    if path_value is not None and not ignore_case and exts is None and kinds == "dir":
        kind, pattern = _split_kind(path_value)
        if kind in ("exact", "pct"):
            exact = _nfc(unquote(pattern) if kind == "pct" else pattern)

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
    """A Source that hides what the rules exclude: excluded shares are not offered, excluded
    entries are not returned, so an excluded folder is never listed. Wrapping the source is
    all the walk needs (and the partition hashes cover exactly what is crawled)."""

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


# -- automatic rules -----------------------------------------------------------------------
def auto_rule_id(host: str, share: str, prefix: str) -> str:
    """Stable: the same folder always gets the same id, so a disabled one stays disabled."""
    return "auto-" + hashlib.md5(f"{host}\0{share}\0{prefix}".encode()).hexdigest()[:12]


def auto_rule(host: str, share: str, prefix: str) -> Rule:
    conditions = (
        ("id", auto_rule_id(host, share, prefix)), ("host", "exact:" + host),
        ("share", "exact:" + share), ("path", "exact:" + prefix), ("type", "dir"),
    )  # fmt: skip
    return Rule("exclude", conditions)


def auto_rules(
    prefix_stats: pa.Table, *, min_entries: int = 1000, max_media_share: float = 0.0,
    min_host_media: int = 0,
) -> list[Rule]:  # fmt: skip
    """Exclusion rules for folders with at least `min_entries` entries below them of which at
    most `max_media_share` of the files are media (0: none at all -- such a rule removes no
    media), on hosts with at least `min_host_media` media (not to judge a host before enough of
    it is known, as the filter generator of "Optimising document collection with Nutch" waits
    for a threshold). Only the topmost such folder of a subtree gets a rule; share roots
    never do."""
    import duckdb  # here, not at the top: fetch workers import this module and never need it

    con = duckdb.connect()
    con.register("stats", prefix_stats)
    rows = con.execute(
        """WITH hosts AS (SELECT host, sum(n_media) AS host_media FROM stats
                          WHERE prefix = '' GROUP BY host)
           SELECT s.host, s.share, s.prefix FROM stats s LEFT JOIN hosts USING (host)
           WHERE s.prefix <> '' AND s.n_files + s.n_folders >= $min_entries
             AND s.n_media <= $share * s.n_files
             AND coalesce(hosts.host_media, 0) >= $min_host_media
           ORDER BY s.host, s.share, s.prefix""",
        {"min_entries": min_entries, "share": max_media_share, "min_host_media": min_host_media},
    ).fetchall()
    con.close()
    chosen = set(rows)
    rules = []
    for host, share, prefix in rows:
        parts = prefix.split("/")
        if any((host, share, "/".join(parts[:i])) in chosen for i in range(1, len(parts))):
            continue  # an ancestor's rule covers it
        rules.append(auto_rule(host, share, prefix))
    return rules
