"""Dependencies are used through their public API only: no `_private` names of smbprotocol,
spnego, mrjob, luigi, duckdb, the standard library... (a new release may change them freely).

The scan (`ast`, no imports) flags, in the package sources:
- `from X import _name`, `from X._mod import ...`, `import X._mod` where X is not the project's;
- `obj._name` (`self._name` too: a dependency's class we subclass) where no project source
  defines `_name`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "cli",
    "crawl_io",
    "demolan",
    "jobs",
    "pipeline",
    "queries",
    "sensors",
    "simulator",
    "web",
)
# Underscore names that are documented public API (namedtuple's methods, os._exit).
DOCUMENTED = {"_replace", "_asdict", "_fields", "_make", "_field_defaults", "_exit"}
# Modules still reaching into a dependency's internals, being rewritten: this set only shrinks.
STILL_PRIVATE: set[str] = set()


def _project_top_level() -> set[str]:
    names = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    return names | {p.stem for p in ROOT.glob("*.py")} | {"tests", "bench"}


def _sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def defined_names(trees: list[ast.AST]) -> set[str]:
    """Every name the project's own sources define: functions, classes, attributes, arguments."""
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
    return names


def private_uses(tree: ast.AST, own: set[str], project: set[str]) -> list[str]:
    """The private uses of dependencies in one module, as 'line: what'."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] in project:
                continue
            if any(_private(p) for p in parts[1:]):
                found.append(f"{node.lineno}: from {node.module} import")
            found += [f"{node.lineno}: import {a.name}" for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] not in project and any(_private(p) for p in parts[1:]):
                    found.append(f"{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            if node.attr not in own and node.attr not in DOCUMENTED:
                found.append(f"{node.lineno}: .{node.attr}")
    return found


def test_checker_flags_private_uses() -> None:
    snippet = """
from smbprotocol.connection import _private_helper
from luigi._vendored import thing
import duckdb._impl
from os import path
from sharecrawl.crawl_io.smb import _Bounded
conn._t_worker.join()
conn.transport._sock.close()
self._mine = 1
other._mine
row._replace(a=1)
self._captured_signals.clear()
"""
    found = private_uses(ast.parse(snippet), {"_mine", "_Bounded"}, {"crawl_io"})
    assert found == [
        "2: import _private_helper",
        "3: from luigi._vendored import",
        "4: import duckdb._impl",
        "7: ._t_worker",
        "8: ._sock",
        "12: ._captured_signals",
    ]


def test_dependencies_are_used_through_public_api() -> None:
    trees = {p: ast.parse(p.read_text(), str(p)) for p in _sources()}
    own = defined_names(list(trees.values()))
    project = _project_top_level()
    offenders = {}
    for path, tree in trees.items():
        found = private_uses(tree, own, project)
        rel = path.relative_to(ROOT).as_posix()
        if found and rel not in STILL_PRIVATE:
            offenders[rel] = found
    assert offenders == {}
    clean = [
        rel
        for rel in sorted(STILL_PRIVATE)
        if ROOT / rel not in trees or not private_uses(trees[ROOT / rel], own, project)
    ]
    assert clean == [], f"no private uses left: remove {clean} from STILL_PRIVATE"
