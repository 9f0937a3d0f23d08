"""Tests and benchmarks start the product as users do, through the installed console script
(tests/cliproc.py): a scan of tests/ and bench/ finds every other way, and each form it knows
is shown flagged. And the console script shows our log lines only: a dependency's below
WARNING (smbprotocol's dozen a connect) only with --verbose, from the fork server's workers
too."""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cliproc import run_cli
from tests.smbd import SmbServer

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("tests", "bench")
# the entry point's modules: importing `main` from one runs the product in the caller's process
ENTRY_MODULES = {"sharecrawl.cli.main", "cli.main", "sharecrawl.__main__"}
MODULE_OPTION = re.compile(r"(^|\s)-m\s*(sharecrawl|cli\.main)\b")
IMPORTED_IN_TEXT = re.compile(r"\b(from|import)\s+(sharecrawl\.)?cli\.main\b|sharecrawl\.__main__")


def other_starts(source: str) -> Iterator[tuple[int, str]]:
    """(line, what) for each place `source` starts sharecrawl otherwise than by its console
    script: an import of the entry point, `-m sharecrawl...` in an argv, or either in a text
    (a shell command, a `-c` program, a script written for a child)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            names = {alias.name for alias in node.names}
            if module in ENTRY_MODULES or (module == "sharecrawl.cli" and "main" in names):
                yield node.lineno, f"from {module} import {', '.join(sorted(names))}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in ENTRY_MODULES:
                    yield node.lineno, f"import {alias.name}"
        elif isinstance(node, ast.List | ast.Tuple):
            items = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            for option, module in itertools.pairwise(items):
                if option == "-m" and isinstance(module, str):
                    if module.split(".")[0] == "sharecrawl" or module.startswith("cli."):
                        yield node.lineno, f"-m {module} in an argv"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if MODULE_OPTION.search(node.value) or IMPORTED_IN_TEXT.search(node.value):
                yield node.lineno, f"a text that starts it: {node.value[:60]!r}"


def scanned_files() -> list[Path]:
    own = Path(__file__).resolve()
    return sorted(p for d in SCANNED for p in (ROOT / d).rglob("*.py") if p.resolve() != own)


def test_tests_and_benches_start_the_console_script_only() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in scanned_files()
        for line, what in other_starts(path.read_text())
    ]
    assert len(scanned_files()) > 100  # the scan reads the tree
    assert found == []


@pytest.mark.parametrize(
    "snippet",
    [
        "from sharecrawl.CLI_MAIN import main\n",
        "from sharecrawl.cli import main\n",
        "from sharecrawl.__main__ import x\n",
        "import sharecrawl.CLI_MAIN\n",
        "import sharecrawl.__main__ as m\n",
        "run([sys.executable, '-m', 'sharecrawl.CLI_MAIN', 'crawl'])\n",
        "run([sys.executable, '-m', 'sharecrawl', 'crawl'])\n",
        "run((sys.executable, '-m', 'sharecrawl.pipeline.rounds', '--join'))\n",
        "argv = [\n    sys.executable,\n    '-m',\n    'CLI_MAIN',\n]\n",
        "run('python -m sharecrawl status', shell=True)\n",
        "run(f'{py} -m CLI_MAIN crawl', shell=True)\n",
        "code = 'import sys; from sharecrawl.CLI_MAIN import main; sys.exit(main())'\n",
        "script.write_text('from CLI_MAIN import main\\nmain()\\n')\n",
    ],
)
def test_the_scan_flags_each_other_start(snippet: str) -> None:
    # the entry point's module is spelt at run time, so no line here reads as a start
    assert len(list(other_starts(snippet.replace("CLI_MAIN", "cli" + ".main")))) == 1


def test_the_scan_passes_the_console_script_and_other_modules() -> None:
    fine = (
        "from tests.cliproc import run_cli, cli_argv\n"
        "run_cli('crawl', '--crawl-dir', d)\n"
        "Popen(cli_argv('serve', '--port', '0'))\n"
        "run([sys.executable, '-m', 'luigi.cmdline', '--module', 'x'])\n"
        "run([sys.executable, '-m', 'pip', 'wheel', '.'])\n"
        "from sharecrawl.cli.parser import parser\n"
        "text = 'the command line: sharecrawl crawl -m 3'\n"
    )
    assert list(other_starts(fine)) == []


# -- our log lines only ---------------------------------------------------------------------

# what smbprotocol says at INFO for every connection (its negotiation) and session (its
# trees): the first from the crawl process (a host's check), the second from a fetch worker
NEGOTIATION = "Starting negotiation with SMB server"
TREE_CONNECT = re.compile(r"^Session: \S+ - Creating connection to share ", re.M)


@pytest.fixture
def smb_crawl(
    smbd_factory: Callable[..., SmbServer], tmp_path: Path
) -> Callable[..., tuple[str, str]]:
    """crawl(before, after): a round over a real smbd, `before` and `after` the command's
    name; its host's key and stderr."""
    server = smbd_factory()
    hosts = tmp_path / "hosts.txt"
    hosts.write_text(f"{server.url}\n")

    def crawl(before: tuple[str, ...] = (), after: tuple[str, ...] = ()) -> tuple[str, str]:
        args = ["--crawl-dir", str(tmp_path / "crawl"), "--hosts-file", str(hosts)]
        done = run_cli(*before, "crawl", *args, "--runner", "inline", *after, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return f"127.0.0.1:{server.port}", done.stderr

    return crawl


@pytest.mark.smb
def test_a_crawl_of_an_smb_host_says_only_our_lines(smb_crawl) -> None:
    host, stderr = smb_crawl()
    lines = stderr.splitlines()
    # the fetch's line for the host, the index's: no dependency says a word
    assert [line.split(": ")[0] for line in lines] == [host, "sharecrawl"], stderr
    assert "entries" in lines[0] and "search index" in lines[1]
    assert NEGOTIATION not in stderr and not TREE_CONNECT.search(stderr)


@pytest.mark.smb
@pytest.mark.parametrize("where", ["before the command", "after it"])
def test_verbose_shows_the_libraries_lines_from_every_process(smb_crawl, where: str) -> None:
    flag = ("--verbose",)
    host, stderr = smb_crawl(*((flag, ()) if where == "before the command" else ((), flag)))
    assert NEGOTIATION in stderr  # the crawl process's check of the host
    assert TREE_CONNECT.search(stderr)  # the fetch worker's session
    assert any(line.startswith(f"{host}: ") for line in stderr.splitlines())  # ours as well
