"""The README's command lines work as written: after the install step (`make demo` or
`make install` made .venv), a fresh login shell with a clean environment activates the
virtualenv as the README says and runs the "Using it" lines one by one, each exiting 0."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.media import make_media

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
LONG_RUNNING = ("sharecrawl serve", "sharecrawl watch", "sharecrawl simulate")


def code_blocks(markdown: str) -> list[list[str]]:
    return [
        block.strip("\n").splitlines()
        for block in re.findall(r"^```[a-z]*\n(.*?)^```", markdown, re.M | re.S)
    ]


def section(markdown: str, title: str) -> str:
    start = markdown.index(f"\n## {title}\n")
    end = markdown.find("\n## ", start + 1)
    return markdown[start : end if end > 0 else None]


def test_the_readme_starts_with_make_demo_and_make_test_then_says_how_to_get_on_path() -> None:
    text = README.read_text(encoding="utf-8")
    blocks = code_blocks(text)
    assert [line.split("#")[0].strip() for line in blocks[0]] == ["make demo", "make test"]
    assert blocks[1][0].split("#")[0].strip() == ". .venv/bin/activate"
    assert text.index(". .venv/bin/activate") < text.index("\n## Using it\n")


@pytest.mark.slow
def test_the_readme_commands_run_in_a_fresh_login_shell(tmp_path: Path) -> None:
    activate = REPO / ".venv" / "bin" / "activate"
    if not (activate.exists() and (REPO / ".venv" / "bin" / "sharecrawl").exists()):
        pytest.skip("no .venv with sharecrawl here: run `make install` first")
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    lines = [line for line in code_blocks(section(README.read_text(), "Using it"))[0] if line]
    assert lines[0].startswith("echo ") and any(ln.startswith("sharecrawl crawl") for ln in lines)
    make_media(
        tmp_path / "lan" / "alpha" / "music" / "song_01.mp3",
        "mp3",
        artist="Madonna",
        title="Music",
        year=2000,
    )
    last_echo = max(i for i, line in enumerate(lines) if line.startswith("echo "))
    lines.insert(last_echo + 1, f"echo 'file://{tmp_path / 'lan' / 'alpha'}' >> hosts.txt")
    script = [f"cd {REPO}", ". .venv/bin/activate", f"cd {tmp_path}"]  # as the README says
    commands = []
    for line in lines:
        command = line.split("  #")[0].strip()
        if command.startswith(LONG_RUNNING):  # they run until stopped, or minutes: help only
            command = " ".join(command.split()[:2]) + " --help"
        if command.startswith("sharecrawl"):
            n = len(commands)
            commands.append(command)
            command += f" > out{n}.txt 2>&1 || {{ echo 'FAILED: {n}'; cat out{n}.txt; exit 1; }}"
        script.append(command)
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "HOME": str(home),
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
    }
    done = subprocess.run(
        [bash, "-lc", "\n".join(script)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    outputs = {c: (tmp_path / f"out{n}.txt").read_text() for n, c in enumerate(commands)}
    search = next(c for c in commands if c.startswith("sharecrawl search") and "--json" not in c)
    assert "Madonna — Music" in outputs[search], outputs[search]
    assert (tmp_path / "crawl" / "crawldb" / "CURRENT").exists()
