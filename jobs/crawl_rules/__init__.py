"""Crawl filters: the rules language (`parse`), rules compiled per share and the filtering
source (`match`), automatic rules from prefix statistics (`auto`). May import crawl_io alone."""

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
