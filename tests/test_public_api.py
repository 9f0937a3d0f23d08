"""Dependencies are used through their public API only: no `_private` names of smbprotocol,
spnego, mrjob, luigi, duckdb, the standard library... (a new release may change them freely).

The scan reads the package's sources with `ast` and flags:
- `from X import _name`, `from X._mod import ...`, `import X._mod` where X is not the project's
  (`sharecrawl`, `tests`, `bench`);
- `obj._name` (`self._name` too: a dependency's class we subclass) where no project source
  defines `_name`;
- a method of ours overriding an underscore method of a dependency's class (argparse's
  `HelpFormatter._split_lines`): the bases are imported to look the name up;
- setting a dependency's attributes. An attribute is ours when a class of the project declares
  it (a name in its body, or `self.name = ...` in one of its methods); `x.name = ...`, `del
  x.name` and `setattr(x, "name", ...)` on anything but a method's own `self` are flagged unless
  the name is ours, and `self.name = ...` in a subclass of a dependency's class is flagged when
  that class declares `name` itself (its source is read the same way).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from functools import cache
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
PROJECT = {"sharecrawl", "tests", "bench"}  # the import package and the repository's others
# Underscore names that are documented public API (namedtuple's methods, os._exit).
DOCUMENTED = {"_replace", "_asdict", "_fields", "_make", "_field_defaults", "_exit"}
# Attributes a dependency documents as set by its users, where the package sets them.
SETTABLE: dict[str, set[str]] = {
    "crawl_io/workers.py": {"__spec__", "__file__"},  # a module's (the data model's)
    "demolan/cover_art.py": {"type", "mime", "data"},  # mutagen.flac.Picture's fields
    "jobs/crawl_rules/parse.py": {"whitespace_split", "commenters", "escape"},  # shlex.shlex's
    "web/app.py": {"total_tokens"},  # anyio.CapacityLimiter's
    "web/covers.py": {"MAX_IMAGE_PIXELS"},  # Pillow's decompression-bomb limit
}
# The one module reaching past smbprotocol's API where it stops short, each reach held to a real
# connection by tests/test_smb_internals.py: what it sets.
INTERNALS = {"crawl_io/smb_internals.py": {"response_event"}}
# ...and the private names it reads there (smbprotocol's transport's socket, close lock and
# exact-length read).
INTERNAL_READS = {"crawl_io/smb_internals.py": {"_sock", "_close_lock"}}
# Modules still reaching into a dependency's internals, being rewritten: this set only shrinks.
STILL_PRIVATE: set[str] = set()
FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def _sources() -> list[Path]:
    root = sorted(ROOT.glob("*.py"))  # the package's own __init__ and __main__
    return root + sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def defined_names(trees: list[ast.AST]) -> set[str]:
    """Every name the project's own sources define: functions, classes, attributes, arguments."""
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, FunctionNode | ast.ClassDef):
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


# -- classes and their attributes ----------------------------------------------------------


def _methods(klass: ast.ClassDef) -> list[FunctionNode]:
    return [n for n in klass.body if isinstance(n, FunctionNode)]


def _self_name(method: FunctionNode) -> str | None:
    """The name a method calls its instance (or class) by; None for a static method."""
    if any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in method.decorator_list):
        return None
    arguments = [*method.args.posonlyargs, *method.args.args]
    return arguments[0].arg if arguments else None


def _self_stores(method: FunctionNode) -> list[ast.Attribute]:
    """`self.name = ...` (or +=, del) anywhere in a method, closures included."""
    me = _self_name(method)
    return [
        node
        for node in ast.walk(method)
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store | ast.Del)
        and isinstance(node.value, ast.Name)
        and node.value.id == me
    ]


def class_attributes(klass: ast.ClassDef) -> set[str]:
    """What a class declares: names in its body (methods, fields) and `self.name = ...`."""
    names: set[str] = set()
    for node in klass.body:
        if isinstance(node, FunctionNode | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    for method in _methods(klass):
        names |= {node.attr for node in _self_stores(method)}
    return names


def project_attributes(trees: list[ast.AST]) -> set[str]:
    return {
        name
        for tree in trees
        for klass in ast.walk(tree)
        if isinstance(klass, ast.ClassDef)
        for name in class_attributes(klass)
    }


def _imported_names(tree: ast.AST) -> dict[str, str]:
    """What each name a module binds by import stands for, as a dotted path."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def _import_object(path: str) -> object | None:
    """The object a dotted path names (the longest importable module, then attributes)."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for part in parts[cut:]:
                found = getattr(found, part)
        except AttributeError:
            return None
        return found
    return None


@cache
def _declared_by(klass: type) -> frozenset[str]:
    """What a class of a dependency declares: its dict, and `self.name = ...` in its source."""
    names = set(vars(klass))
    try:
        source = textwrap.dedent(inspect.getsource(klass))
    except (OSError, TypeError):  # built in, or no source: its dict says what there is
        return frozenset(names)
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names |= class_attributes(node)
    return frozenset(names)


def dependency_bases(klass: ast.ClassDef, tree: ast.Module, project: set[str]) -> list[type]:
    """The classes of dependencies a class of this module derives from (the MRO of each base,
    through the module's own classes); a base that does not import fails the scan."""
    imported = _imported_names(tree)
    local = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    found: list[type] = []
    for base in klass.bases:
        name = _dotted(base)
        if name is None:
            continue
        head, _, rest = name.partition(".")
        if head in local and not rest:
            found += dependency_bases(local[head], tree, project)
            continue
        if head not in imported:
            continue  # a builtin (Exception, object): nothing to override by accident
        resolved = _import_object(imported[head] + (f".{rest}" if rest else ""))
        if not isinstance(resolved, type):
            raise AssertionError(f"{klass.lineno}: cannot resolve the base {name} to check it")
        found += [
            c for c in resolved.__mro__ if c.__module__.split(".")[0] not in project | {"builtins"}
        ]
    return found


def dependency_overrides(tree: ast.Module, project: set[str]) -> list[str]:
    """Methods of ours overriding a dependency's underscore methods, as 'line: what'."""
    found = []
    for klass in ast.walk(tree):
        if not isinstance(klass, ast.ClassDef):
            continue
        private = [m for m in _methods(klass) if _private(m.name)]
        if not private:
            continue
        bases = dependency_bases(klass, tree, project)
        for method in private:
            owner = next((b for b in bases if method.name in vars(b)), None)
            if owner is not None:
                what = f"{owner.__module__}.{owner.__qualname__}.{method.name}"
                found.append(f"{method.lineno}: overrides {what}")
    return found


def foreign_stores(tree: ast.Module, ours: set[str], project: set[str]) -> list[str]:
    """Attributes set on dependencies' objects, as 'line: what' (see the module's notes)."""
    found = []
    own_self: set[int] = set()  # stores on a method's own `self`, judged by its class
    for klass in ast.walk(tree):
        if not isinstance(klass, ast.ClassDef):
            continue
        bases = None
        for method in _methods(klass):
            for node in _self_stores(method):
                own_self.add(id(node))
                if bases is None:
                    bases = dependency_bases(klass, tree, project)
                owner = next((b for b in bases if node.attr in _declared_by(b)), None)
                if owner is not None:
                    what = f"{owner.__module__}.{owner.__qualname__}"
                    found.append(f"{node.lineno}: sets {what}'s .{node.attr}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store | ast.Del):
            if id(node) not in own_self and node.attr not in ours:
                found.append(f"{node.lineno}: sets .{node.attr}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value not in ours
        ):
            found.append(f"{node.lineno}: sets .{node.args[1].value}")
    return sorted(found, key=lambda line: int(line.partition(":")[0]))


# -- the checks on snippets, then on the package ---------------------------------------------


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
    found = private_uses(ast.parse(snippet), {"_mine", "_Bounded"}, PROJECT)
    assert found == [
        "2: import _private_helper",
        "3: from luigi._vendored import",
        "4: import duckdb._impl",
        "7: ._t_worker",
        "8: ._sock",
        "12: ._captured_signals",
    ]


def test_checker_flags_overridden_underscore_methods() -> None:
    snippet = """
import argparse
from argparse import RawDescriptionHelpFormatter as Raw
from sharecrawl.crawl_io.sources import SourceError

class Help(argparse.HelpFormatter):
    def _split_lines(self, text, width):
        return [text]
    def _wrapped(self, text):
        return text
    def format_help(self):
        return ""

class Raw2(Raw):
    def _fill_text(self, text, width, indent):
        return text

class Deeper(Raw2):
    def _get_help_string(self, action):
        return ""

class Ours(SourceError):
    def _why(self):
        return ""
"""
    assert dependency_overrides(ast.parse(snippet), PROJECT) == [
        "7: overrides argparse.HelpFormatter._split_lines",
        "15: overrides argparse.RawDescriptionHelpFormatter._fill_text",
        "19: overrides argparse.HelpFormatter._get_help_string",
    ]


def test_checker_flags_attributes_set_on_dependencies_objects() -> None:
    snippet = """
import argparse
import threading
from PIL import Image
from smbprotocol.open import Open

class Parser(argparse.ArgumentParser):
    shown = None
    def __init__(self):
        super().__init__()
        self.lazy = 1
        self.epilog = "after"
    def option(self, *flags):
        action = self.add_argument(*flags)
        action.default_from = len
        self.shown = action

class Event(threading.Event):
    def set(self):
        self._flag = True

def use(tree, request, event):
    handle = Open(tree, "")
    handle.file_id = b"x" * 16
    request.response_event = event
    setattr(request, "response", None)
    del request.response_event
    Image.MAX_IMAGE_PIXELS = 1
    parser = Parser()
    parser.lazy = 2
    parser.shown = None
"""
    tree = ast.parse(snippet)
    assert foreign_stores(tree, project_attributes([tree]), PROJECT) == [
        "12: sets argparse.ArgumentParser's .epilog",
        "15: sets .default_from",
        "20: sets threading.Event's ._flag",
        "24: sets .file_id",
        "25: sets .response_event",
        "26: sets .response",
        "27: sets .response_event",
        "28: sets .MAX_IMAGE_PIXELS",
    ]


def test_dependencies_are_used_through_public_api() -> None:
    trees = {p: ast.parse(p.read_text(), str(p)) for p in _sources()}
    own = defined_names(list(trees.values()))
    ours = project_attributes(list(trees.values()))
    offenders, clean = {}, []
    for path, tree in trees.items():
        rel = path.relative_to(ROOT).as_posix()
        reads = INTERNAL_READS.get(rel, set())
        private = private_uses(tree, own, PROJECT)
        found = [line for line in private if line.rpartition(" .")[2] not in reads]
        unread = reads - {line.rpartition(" .")[2] for line in private}
        found += [f"INTERNAL_READS names .{name}, which it no longer reads" for name in unread]
        settable = SETTABLE.get(rel, set()) | INTERNALS.get(rel, set())
        stores = foreign_stores(tree, ours, PROJECT)
        found += dependency_overrides(tree, PROJECT)
        found += [line for line in stores if line.rpartition(" .")[2] not in settable]
        unused = settable - {line.rpartition(" .")[2] for line in stores}
        found += [f"SETTABLE names .{name}, which it no longer sets" for name in sorted(unused)]
        if rel in STILL_PRIVATE and not found:
            clean.append(rel)
        elif found and rel not in STILL_PRIVATE:
            offenders[rel] = found
    assert offenders == {}
    assert clean == [], f"no private uses left: remove {clean} from STILL_PRIVATE"


def _modules_imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module]
    return []


def test_no_module_imports_smbprotocols_smbclient() -> None:
    """The package's SMB client is crawl_io.smb alone: `smbclient` would also be shadowed by
    impacket's `smbclient.py` script beside the console script (its folder is first on sys.path)."""
    imports = [
        f"{path.relative_to(ROOT).as_posix()}:{node.lineno}"
        for path in _sources()
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if any(name.split(".")[0] == "smbclient" for name in _modules_imported(node))
    ]
    assert imports == []
