"""The layout's rules, checked on the source tree (docs/DESIGN.md, "Layout"):

- imports go only down the layer order, and no module imports another that (through any
  chain, lazy imports inside functions included) imports it back;
- no module of the packages is over MAX_LINES lines, but for the shrinking OVERSIZED list;
- no file of the repository names things from outside it: the documents the ideas come from
  are cited by title and section ("thesis §3.2"), never by their file names, and work is
  described by what it does, never by a tracker's numbers.

Each check is a function over sources held in memory, so the last tests can show that each
one fails on what it forbids. Reads the tree, nothing else.
"""

from __future__ import annotations

import ast
import fnmatch
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# What each package may import: the layer order, bottom up. pipeline may import queries
# (its Index stage builds the search index with queries' builder); queries never imports
# pipeline. The faces (sensors, simulator, web, demolan) import the four below them and
# not each other; cli imports anything; nothing imports cli.
STAGES = {"crawl_io", "jobs", "queries", "pipeline"}
MAY_IMPORT: dict[str, set[str]] = {
    "crawl_io": {"crawl_io"},
    "jobs": {"crawl_io", "jobs"},
    "queries": {"crawl_io", "jobs", "queries"},
    "pipeline": {"crawl_io", "jobs", "queries", "pipeline"},
    "sensors": STAGES | {"sensors"},
    "simulator": STAGES | {"simulator"},
    "web": STAGES | {"web"},
    "demolan": STAGES | {"demolan"},
    "cli": STAGES | {"sensors", "simulator", "web", "demolan", "cli"},
}
NOT_PACKAGES = {"tests", "bench"}  # never imported by a package
PACKAGE = "sharecrawl"  # the one import package, whose subpackages these are

MAX_LINES = 600
# Modules over MAX_LINES today, with their line counts: it may only shrink. An entry goes
# when its module is split under the limit, and its number follows the module down.
OVERSIZED: dict[str, int] = {}

# Words from outside the project (case-insensitive): the names and numbers of the source
# documents' files, and tracker numbers.
OUTSIDE_WORDS = {
    "a source document's number": re.compile(r"\bseeds?[\s_#-]*\d{3}\b", re.I),
    "the source documents' folder": re.compile(r"\bseeds/", re.I),
    "a source document's file name": re.compile(r"\b\d{3}_[0-9a-f]{16}\b", re.I),
    "a tracker number": re.compile(r"\bissues?\s*#?\s*\d+", re.I),
}
TEXT_SUFFIXES = {
    ".py",
    ".md",
    ".txt",
    ".cfg",
    ".toml",
    ".ini",
    ".rules",
    ".html",
    ".css",
    ".js",
    ".svg",
    ".json",
    ".yml",
    ".yaml",
    ".sh",
    "",
}


# -- the import graph ------------------------------------------------------------------
@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module (a module of the packages, or the first name of another)
    path: str  # the importing file, relative to the repository
    line: int
    lazy: bool  # inside a function

    def where(self) -> str:
        how = " (lazily, inside a function)" if self.lazy else ""
        return f"{self.path}:{self.line} imports {self.target}{how}"


def module_name(rel: str) -> str:
    parts = rel.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_sources(root: Path = ROOT) -> dict[str, str]:
    """Every module of the packages: relative path -> source."""
    found = {}
    for package in MAY_IMPORT:
        for path in sorted((root / package).rglob("*.py")):
            found[path.relative_to(root).as_posix()] = path.read_text(encoding="utf-8")
    return found


def _imported_names(tree: ast.AST) -> Iterator[tuple[ast.AST, str, int, list[str]]]:
    """(node, module, relative level, imported names) for every import in the tree:
    statements anywhere, and importlib.import_module / __import__ with a literal name."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name, 0, []
        elif isinstance(node, ast.ImportFrom):
            yield node, node.module or "", node.level, [a.name for a in node.names]
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            first = node.args[0]
            if (
                name in ("import_module", "__import__")
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                yield node, first.value, 0, []


def _function_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def imports(sources: dict[str, str]) -> list[Import]:
    """Every import of a module of the packages (or of tests, bench) by a module in
    `sources`, resolved to the module it names (`from a.b import c` names a.b.c when that is
    a module, else a.b; a name that is no module stands for its package)."""
    modules = {module_name(rel) for rel in sources}
    ours = set(MAY_IMPORT) | NOT_PACKAGES

    def resolve(name: str) -> str:
        found = name
        while found and found not in modules:
            found = found.rpartition(".")[0]
        return found or name.split(".")[0]

    found: list[Import] = []
    for rel, text in sources.items():
        source = module_name(rel)
        tree = ast.parse(text, rel)
        in_function = _function_lines(tree)
        is_package = rel.endswith("__init__.py")
        for node, module, level, names in _imported_names(tree):
            if level:
                base = source.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - level + 1]
                module = ".".join([*base, module] if module else base)
            module = module.removeprefix(f"{PACKAGE}.")  # the packages by their own names
            if module.split(".")[0] not in ours:
                continue
            named = {f"{module}.{n}" for n in names} & modules or {resolve(module)}
            for target in sorted(named - {source}):
                found.append(Import(source, target, rel, node.lineno, node.lineno in in_function))
    return found


def import_loops(found: Iterable[Import]) -> list[tuple[list[str], list[Import]]]:
    """Each group of modules that import one another (Tarjan's strongly connected
    components), with one loop through it: the shortest chain of imports from the group's
    first module back to it."""
    edges: dict[str, list[Import]] = {}
    for imp in found:
        edges.setdefault(imp.source, []).append(imp)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(start: str) -> None:  # iterative: no recursion limit to think about
        work = [(start, iter(edges.get(start, ())))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, pending = work[-1]
            for imp in pending:
                if imp.target not in index:
                    index[imp.target] = low[imp.target] = len(index)
                    stack.append(imp.target)
                    on_stack.add(imp.target)
                    work.append((imp.target, iter(edges.get(imp.target, ()))))
                    break
                if imp.target in on_stack:
                    low[node] = min(low[node], index[imp.target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    groups.sort()
    loops = []
    for group in groups:
        members, start = set(group), group[0]
        came: dict[str, Import] = {}
        frontier = [start]
        while frontier and start not in came:
            following = []
            for module in frontier:
                for imp in edges.get(module, ()):
                    if imp.target in members and imp.target not in came:
                        came[imp.target] = imp
                        following.append(imp.target)
            frontier = following
        chain, at = [], start
        while True:
            chain.append(came[at])
            at = came[at].source
            if at == start:
                break
        loops.append((group, chain[::-1]))
    return loops


def layer_breaches(found: Iterable[Import]) -> list[str]:
    """One line per import statement that reaches a package its package may not import."""
    worst: dict[tuple[str, int, str], Import] = {}
    for imp in found:
        mine, theirs = imp.source.split(".")[0], imp.target.split(".")[0]
        if theirs not in MAY_IMPORT.get(mine, set()):
            key = (imp.path, imp.line, theirs)
            if key not in worst or len(imp.target) > len(worst[key].target):
                worst[key] = imp  # the module it names, not only its package
    problems = []
    for imp in worst.values():
        mine = imp.source.split(".")[0]
        allowed = ", ".join(sorted(MAY_IMPORT[mine]))
        problems.append(
            f"{imp.where()}: {mine} may import only {allowed}. Move what it needs down into "
            f"a package {mine} may import, or move the caller up (docs/DESIGN.md, Layout)"
        )
    return problems


# -- module sizes ----------------------------------------------------------------------
def size_problems(lines: dict[str, int], oversized: dict[str, int]) -> list[str]:
    problems = []
    for rel, n in sorted(lines.items()):
        listed = oversized.get(rel)
        if n > MAX_LINES and listed is None:
            problems.append(
                f"{rel} has {n} lines, over {MAX_LINES}: split it into modules of one idea each"
            )
        elif listed is not None and n > listed:
            problems.append(
                f"{rel} grew to {n} lines (OVERSIZED allows {listed}): split it rather than grow it"
            )
    for rel, listed in sorted(oversized.items()):
        n = lines.get(rel)
        if n is None:
            problems.append(
                f"OVERSIZED names {rel}, which is gone: remove its entry in tests/test_layout.py"
            )
        elif n <= MAX_LINES:
            problems.append(
                f"{rel} is {n} lines now, within {MAX_LINES}: remove its entry "
                "from OVERSIZED in tests/test_layout.py"
            )
        elif n < listed:
            problems.append(
                f"{rel} shrank to {n} lines: set its OVERSIZED entry in "
                f"tests/test_layout.py to {n} (from {listed})"
            )
    return problems


# -- words from outside ----------------------------------------------------------------
def _ignored(root: Path) -> list[str]:
    """The .gitignore's name patterns (generated files: a virtualenv, caches, demo output)."""
    try:
        lines = (root / ".gitignore").read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    return [line.strip().strip("/") for line in lines if line.strip() and line[0] != "#"]


def repository_texts(root: Path = ROOT) -> dict[str, str]:
    """Every text file of the repository: relative path -> text (binary files left out)."""
    ignored = [".git", *_ignored(root)]
    texts = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not any(fnmatch.fnmatch(d, p) for p in ignored)]
        for name in files:
            path = Path(folder, name)
            if any(fnmatch.fnmatch(name, p) for p in ignored):
                continue
            if path.suffix not in TEXT_SUFFIXES and name != "Makefile":
                continue
            data = path.read_bytes()
            if b"\0" in data[:8192]:
                continue
            texts[path.relative_to(root).as_posix()] = data.decode("utf-8", errors="replace")
    return texts


def outside_words(texts: dict[str, str]) -> list[str]:
    problems = []
    for rel, text in sorted(texts.items()):
        for number, line in enumerate(text.splitlines(), 1):
            for what, pattern in OUTSIDE_WORDS.items():
                match = pattern.search(line)
                if match:
                    problems.append(
                        f"{rel}:{number}: {match[0]!r} names {what}: say what the rule is, "
                        "and cite the thesis by section (thesis §3.2) or a paper by title"
                    )
    return problems


# -- the checks on the tree ------------------------------------------------------------
SOURCES = package_sources()
IMPORTS = imports(SOURCES)


def test_every_top_level_package_has_a_place_in_the_layers() -> None:
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    unplaced = packages - set(MAY_IMPORT) - NOT_PACKAGES
    assert not unplaced, (
        f"packages {sorted(unplaced)} have no place in the layer order: add each to "
        "MAY_IMPORT in tests/test_layout.py (and docs/DESIGN.md's Layout)"
    )


def test_no_import_loops() -> None:
    loops = import_loops(IMPORTS)
    lines = [
        f"import loop among {', '.join(group)}: " + "; ".join(i.where() for i in loop)
        for group, loop in loops
    ]
    assert not loops, "\n".join(
        [
            *lines,
            "Break each: move what both sides need into a module below both (or pass "
            "it in), so that imports run one way; a lazy import still counts.",
        ]
    )


def test_imports_follow_the_layer_order() -> None:
    # the graph is the real one: cli's entry point imports crawl_io's process supervision
    assert Import("cli.main", "crawl_io.processes", "cli/main.py", 15, False) in IMPORTS
    problems = layer_breaches(IMPORTS)
    assert not problems, "\n".join(problems)


def test_no_module_over_the_line_limit() -> None:
    lines = {rel: len(text.splitlines()) for rel, text in SOURCES.items()}
    problems = size_problems(lines, OVERSIZED)
    assert not problems, "\n".join(problems)


def test_no_words_from_outside_the_project() -> None:
    from sharecrawl.pipeline.rules_store import (
        AUTO_HEADER,
    )  # the header every rules.auto is written with

    texts = repository_texts()
    assert "README.md" in texts and "tests/test_layout.py" in texts  # the scan sees the tree
    problems = outside_words({**texts, "<rules.auto header>": AUTO_HEADER})
    assert not problems, "\n".join(problems)


# -- each check fails on what it forbids -----------------------------------------------
def test_a_lazy_import_loop_is_found() -> None:
    found = imports(
        {
            "pipeline/a.py": "from sharecrawl.pipeline.b import B\n",
            "pipeline/b.py": "def f():\n    from pipeline import a\n",
            "pipeline/c.py": "import importlib\nimportlib.import_module('sharecrawl.pipeline.d')\n",
            "pipeline/d.py": "__import__('pipeline.c')\n",
            "pipeline/e.py": "from . import a\n",
        }
    )
    loops = import_loops(found)
    assert [group for group, _ in loops] == [
        ["pipeline.a", "pipeline.b"],
        ["pipeline.c", "pipeline.d"],
    ]
    assert [sorted(imp.source for imp in loop) for _, loop in loops] == [
        ["pipeline.a", "pipeline.b"],
        ["pipeline.c", "pipeline.d"],
    ]
    assert any(imp.lazy and imp.target == "pipeline.a" for imp in loops[0][1])
    assert Import("pipeline.e", "pipeline.a", "pipeline/e.py", 1, False) in found


def test_an_import_against_the_layers_is_found() -> None:
    found = imports(
        {
            "crawl_io/x.py": "def f():\n    from pipeline.y import g\n",
            "queries/q.py": "import pipeline.y\n",
            "web/w.py": "from cli.parser import parser\nfrom sensors import s\n",
            "cli/main.py": "from web import w\nfrom jobs import j\n",
            "jobs/j.py": "from tests.media import make_media\n",
        }
    )
    breaches = layer_breaches(found)
    assert len(breaches) == 5, breaches
    assert breaches[0].startswith("crawl_io/x.py:2 imports pipeline (lazily, inside")
    assert "crawl_io may import only crawl_io" in breaches[0]


def test_sizes_over_the_limit_and_a_stale_list_are_found() -> None:
    problems = size_problems(
        {"a.py": 601, "b.py": 700, "c.py": 590, "d.py": 650, "e.py": 660},
        {"b.py": 680, "c.py": 620, "d.py": 660, "gone.py": 700, "e.py": 660},
    )
    assert [p.split(" ", 1)[0] for p in problems] == ["a.py", "b.py", "c.py", "d.py", "OVERSIZED"]
    assert "grew to 700 lines" in problems[1]
    assert "remove its entry" in problems[2]
    assert "set its OVERSIZED entry in tests/test_layout.py to 650" in problems[3]


def test_words_from_outside_are_found() -> None:
    # each forbidden word split in two literals, so that this file never says it
    texts = {
        "a.py": "# automatic rules (Seed 0" + "02)\nx = 1  # as issue #" + "7 asked\n",
        "b.md": "see shared/SEEDS" + "/ and 000_" + "3e85c2d210b096a2.txt; issue " + "12\n",
        "c.py": "rng = Random(seed)  # seed 7, thesis §3.2, --seed 1234\n",
    }
    found = outside_words(texts)
    assert [p.split(":", 2)[:2] for p in found] == [
        ["a.py", "1"],
        ["a.py", "2"],
        ["b.md", "1"],
        ["b.md", "1"],
        ["b.md", "1"],
    ]


def test_the_code_is_lint_clean_and_formatted() -> None:
    """What `make lint` checks, so that the suite fails where it would: `ruff check` and
    `ruff format --check` (no comment that skips the formatter: its layout is the layout)."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (make test installs it)")
    for command in (["check", "."], ["format", "--check", "."]):
        done = subprocess.run([ruff, *command], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, f"ruff {' '.join(command)}:\n{done.stdout}{done.stderr}"
    skips = [
        rel
        for rel, text in repository_texts().items()
        if rel.endswith(".py") and "fmt: " + "skip" in text
    ]
    assert not skips, skips
