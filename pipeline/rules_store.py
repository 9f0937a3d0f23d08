"""The crawl rules in force for a crawl directory (the language is jobs.crawl_rules): the
operator's file, reread every round (a malformed one leaves its last good copy, rules.good,
in force), the automatic rules in rules.auto, minus the ids in rules.disabled."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa

from sharecrawl.crawl_io.config_error import ConfigError
from sharecrawl.crawl_io.crawldb.atomic import write_atomic
from sharecrawl.jobs.crawl_rules import Rule, Rules, auto_rules, load_rules

AUTO_HEADER = (
    "# Automatic rules from prefix statistics: big folders without media.\n"
    "# Written by sharecrawl; to stop one for good, add its id to the disabled file.\n"
)


class CurrentRules(NamedTuple):
    rules: Rules
    error: str | None  # why the operator's file was not taken, None when it was


class RulesStore:
    def __init__(
        self, crawl_dir: str | os.PathLike, operator_rules_path: str | os.PathLike | None
    ) -> None:
        root = Path(crawl_dir)
        self.operator_path = Path(operator_rules_path) if operator_rules_path else None
        self.good_path = root / "rules.good"
        self.auto_path = root / "rules.auto"
        self.disabled_path = root / "rules.disabled"

    def disabled(self) -> set[str]:
        """The ids listed one a line in rules.disabled (the first word; `#` starts a comment)."""
        try:
            lines = self.disabled_path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return set()
        words = (line.split("#", 1)[0].split() for line in lines)
        return {w[0] for w in words if w}

    def operator_rules(self) -> CurrentRules:
        if self.operator_path is None:
            return CurrentRules(Rules(), None)
        try:
            rules = load_rules(self.operator_path)
        except ConfigError as e:
            error = f"{e}; the previous rules stay in force"
            try:
                return CurrentRules(load_rules(self.good_path), error)
            except ConfigError:
                return CurrentRules(Rules(), error)
        if not self.good_path.exists() or self.good_path.read_text("utf-8") != rules.text():
            write_atomic(self.good_path, rules.text())
        return CurrentRules(rules, None)

    def auto_rules(self) -> list[Rule]:
        """The automatic rules in rules.auto (all, disabled ones included)."""
        try:
            return list(load_rules(self.auto_path).rules)
        except ConfigError:
            return []  # only sharecrawl writes it; a damaged one is regenerated

    def current(self) -> CurrentRules:
        operator, error = self.operator_rules()
        off = self.disabled()
        kept = tuple(r for r in (*operator.rules, *self.auto_rules()) if r.id not in off)
        return CurrentRules(Rules(kept), error)

    def snapshot(self, path: str | os.PathLike) -> CurrentRules:
        """Write the rules in force to `path` (e.g. the round's segment) and return them, so
        every fetcher of a round uses the same rules: load_rules(path) reads them back."""
        current = self.current()
        write_atomic(Path(path), current.rules.text())
        return current

    def regenerate_auto(self, prefix_stats: pa.Table, **limits: float) -> list[Rule]:
        """Add automatic rules for the statistics to rules.auto and return them all. Rules
        already there stay (the folders they exclude no longer appear in the statistics);
        disabled ids are never written again."""
        off = self.disabled()
        rules: dict[str, Rule] = {}
        for rule in (*self.auto_rules(), *auto_rules(prefix_stats, **limits)):
            if rule.id is not None and rule.id not in off:
                rules.setdefault(rule.id, rule)
        body = "".join(rule.line() + "\n" for rule in rules.values())
        write_atomic(self.auto_path, AUTO_HEADER + body)
        return list(rules.values())
