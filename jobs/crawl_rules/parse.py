"""The crawl rules language (docs/analysts.md, Crawl filters). Beyond the docs: `host` and `share`
ignore case; `**/` is zero or more folders; values are quoted as in a shell, without backslash
escapes; a folder matches when its path or its path plus `/` does, and nothing under an excluded
folder can be included again (as in .gitignore)."""

from __future__ import annotations

import re
import shlex
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import quote, unquote

from sharecrawl.crawl_io.config_error import ConfigError

ACTIONS = ("include", "exclude")
KEYS = ("host", "share", "path", "ipath", "ext", "type", "id")
TYPES = {"dir": "dir", "folder": "dir", "file": "file"}
KINDS = ("glob", "re", "prefix", "exact", "pct")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")

Matcher = Callable[[str], bool]


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
    j = start + 1 + pattern.startswith("!", start + 1)
    j += pattern.startswith("]", j)  # a leading ] is a member
    return pattern.find("]", j)


def split_kind(value: str) -> tuple[str, str]:
    kind, sep, rest = value.partition(":")
    return (kind, rest) if sep and kind in KINDS else ("glob", value)


def nfc(value: str) -> str:
    """Composed form: macOS and some Samba set-ups list names decomposed (NFD), rules are typed
    composed."""
    return value if value.isascii() else unicodedata.normalize("NFC", value)


def compile_pattern(value: str, *, ignore_case: bool, name_glob: bool = False) -> Matcher:
    """A predicate for one condition's pattern, comparing NFC forms. With `name_glob`, a glob
    without `/` matches an entry's name."""
    kind, pattern = split_kind(value)
    if kind == "pct":
        kind, pattern = "exact", unquote(pattern)
    matcher = _compile_pattern(kind, nfc(pattern), ignore_case, name_glob)
    return lambda v: matcher(nfc(v))


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


def _quote(value: str) -> str:
    if CONTROL.search(value):  # cannot live on one line: %-encode it (exact values only)
        kind, pattern = split_kind(value)
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
        kind, pattern = split_kind(value)
        if kind == "re":
            try:
                re.compile(pattern)
            except re.error as e:
                raise error(f"bad regular expression {pattern!r}: {e}") from None
        if kind != "glob" and not pattern:
            raise error(f"empty pattern for {key!r}")


def parse_rules(text: str, source: str = "<rules>") -> list[Rule]:
    found = (parse_rule(line, f"{source}:{n}") for n, line in enumerate(text.splitlines(), 1))
    return [rule for rule in found if rule is not None]
