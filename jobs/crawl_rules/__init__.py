"""Crawl filters: the rules language (`parse`), rules compiled per share and the filtering
source (`match`), automatic rules from prefix statistics (`auto`). May import crawl_io alone."""

from sharecrawl.jobs.crawl_rules.auto import auto_rule, auto_rule_id, auto_rules
from sharecrawl.jobs.crawl_rules.match import Rules, filtered, load_rules
from sharecrawl.jobs.crawl_rules.parse import Rule, glob_to_regex, parse_rule, parse_rules

__all__ = [
    "Rule",
    "Rules",
    "auto_rule",
    "auto_rule_id",
    "auto_rules",
    "filtered",
    "glob_to_regex",
    "load_rules",
    "parse_rule",
    "parse_rules",
]
