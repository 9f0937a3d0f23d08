"""Crawl filters: the rules language (`parse`), the rules compiled per share and the source
that applies them (`match`: `Rules`, `FilteredSource`) and automatic rules from prefix
statistics (`auto` (`auto_rules`: folders that hold
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

from jobs.crawl_rules.auto import auto_rule, auto_rule_id, auto_rules
from jobs.crawl_rules.match import NO_RULES, FilteredSource, Rules, ShareRules, filtered, load_rules
from jobs.crawl_rules.parse import Rule, compile_pattern, glob_to_regex, parse_rule, parse_rules

__all__ = [
    "NO_RULES",
    "FilteredSource",
    "Rule",
    "Rules",
    "ShareRules",
    "auto_rule",
    "auto_rule_id",
    "auto_rules",
    "compile_pattern",
    "filtered",
    "glob_to_regex",
    "load_rules",
    "parse_rule",
    "parse_rules",
]
