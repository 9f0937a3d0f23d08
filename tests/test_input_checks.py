"""Input checked before anything is written: each bad input gets one line on stderr, exit
status 2, and no crawl directory is created or changed. Names are resolved under one
deadline, like the liveness check."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from sharecrawl.crawl_io.liveness import check_hosts, resolve_names
from sharecrawl.crawl_io.sources import (
    ConfigError,
    check_credentials,
    check_hostname,
    credentials_for,
    parse_host_url,
)
from tests.cliproc import run_cli
from tests.conftest import LAN
from tests.smbd import free_port


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under `folder` with its size and mtime."""
    if not folder.exists():
        return {}
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }


def one_error_line(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("sharecrawl: error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture
def small_lan(lan: LAN) -> LAN:
    lan.media("alpha", "music/song.mp3", artist="Madonna", title="Music")
    lan.write_hosts("alpha")
    return lan


# -- credentials file --------------------------------------------------------------------


def cred_file(tmp_path: Path, content: bytes | str, mode: int = 0o600) -> Path:
    path = tmp_path / "creds"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    path.chmod(mode)
    return path


@pytest.mark.parametrize(
    ("content", "mode", "message"),
    [
        (None, 0o600, "does not exist"),
        ("username = bob\npassword = hunter2\n", 0o644, "readable only by its owner"),
        ("username = bob\npassword = hunter2\n", 0o640, "readable only by its owner"),
        ("just some text\n", 0o600, "line 1: not a 'username = ...'"),
        ("username = bob\n", 0o600, "has no 'password = ...' line"),
        ("password = hunter2\n", 0o600, "has no 'username = ...' line"),
        ("username = bob\npassword = hunter2\nhunter2 = x\n", 0o600, "line 3:"),
        ("username = bob\npassword = a\npassword = hunter2\n", 0o600, "password given twice"),
        (b"\x7fELF\x02\x01\x01\x00\x00\x00password = hunter2", 0o600, "binary"),
        (b"username = \xff\xfe\npassword = x\n", 0o600, "not UTF-8"),
        ("", 0o600, "has no 'username = ...' line"),
    ],
)
def test_bad_credentials_file_exits_2_before_anything_is_written(
    small_lan: LAN, capsys, monkeypatch, tmp_path: Path, content, mode: int, message: str
) -> None:
    path = tmp_path / "creds" if content is None else cred_file(tmp_path, content, mode)
    monkeypatch.setenv("SHARECRAWL_SMB_CREDENTIALS", str(path))
    assert small_lan.cli("crawl") == 2
    line = one_error_line(capsys, message, "SHARECRAWL_SMB_CREDENTIALS")
    assert "hunter2" not in line  # a value never reaches a message
    assert not small_lan.crawl_dir.exists()


def test_credentials_file_that_is_not_a_file(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    for path, message in (
        (tmp_path, "not a regular file"),
        (fifo, "not a regular file"),
        (tmp_path / "creds" / "x", "does not exist"),
    ):
        with pytest.raises(ConfigError, match=message):
            check_credentials({"SHARECRAWL_SMB_CREDENTIALS": str(path)})
    with pytest.raises(ConfigError, match="set but empty"):
        check_credentials({"SHARECRAWL_SMB_CREDENTIALS": ""})
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="cannot be read"):  # ENOTDIR
        check_credentials({"SHARECRAWL_SMB_CREDENTIALS": str(tmp_path / "file" / "creds")})


def test_good_credentials_file_with_comments_and_domain(tmp_path: Path) -> None:
    path = cred_file(
        tmp_path, "# lab\nusername = bob\n\n; smbclient style\npassword = p=1\ndomain = LAB\n"
    )
    env = {"SHARECRAWL_SMB_CREDENTIALS": str(path)}
    check_credentials(env)
    creds = credentials_for(parse_host_url("smb://nas/music"), env)
    assert (creds.user, creds.password) == ("LAB\\bob", "p=1")
    assert credentials_for(parse_host_url("smb://ann@nas/music"), env).user == "ann"


# -- host names and ports ------------------------------------------------------------------

LONG_LABEL = "a" * 64
LONG_NAME = ".".join(["a" * 60] * 5)  # 304 characters


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (f"smb://{LONG_NAME}/music", "longer than 253 characters"),
        (f"smb://{LONG_LABEL}.lan/music", "label longer than 63"),
        ("smb://my host/music", "characters a DNS name cannot"),
        ("smb://bad\x00name/music", "characters a DNS name cannot"),
        ("smb://semi;colon/music", "characters a DNS name cannot"),
        ("smb://a..b/music", "empty label"),
        ("smb://nas:0/music", "port 0"),
        ("smb://nas:65536/music", "out of range"),
        ("smb://" + "x" * 5000 + "/music", "longer than 253"),
        ("smb://" + "я" * 5000 + "/music", "IDNA"),
        ("file:///srv/lan/a%00b", "NUL"),
        ("file:////", "not the root"),
        ("smb://[nas.lan]/music", "does not appear to be an IPv4 or IPv6"),
        ("smb://[v1.nas]/music", "brackets hold an IPv6 address"),
    ],
)
def test_bad_host_names_and_ports_exit_2(small_lan: LAN, capsys, url: str, message: str) -> None:
    small_lan.hosts_file.write_text(f"file://{small_lan.host('alpha')}\n{url}\n")
    assert small_lan.cli("crawl") == 2
    line = one_error_line(capsys, message, "hosts.txt:2")
    assert len(line) < 300  # a 5,000-character name is not printed whole
    assert not small_lan.crawl_dir.exists()


def test_good_host_names() -> None:
    for name in (
        "nas",
        "dorm5-pc",
        "lab_3.local",
        "10.0.0.7",
        "::1",
        "fe80::1%eth0",
        "мадонна-пк",
        "bücher.example",
        "a" * 63 + ".lan",
        "fqdn.example.",
    ):
        assert check_hostname(name) is None, name
    assert parse_host_url("smb://мадонна-пк/музыка").share == "музыка"
    assert parse_host_url("smb://[::1]:1445/media").host == "[::1]:1445"


# -- numeric options and settings ------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--round-seconds", "-1"], "--round-seconds must be above 0"),
        (["--round-seconds", "0"], "--round-seconds must be above 0"),
        (["--round-seconds", "nan"], "--round-seconds must be a finite number"),
        (["--round-seconds", "inf"], "--round-seconds must be a finite number"),
        (["--crawlers", "0"], "--crawlers must be at least 1"),
        (["--crawlers", "-3"], "--crawlers must be at least 1"),
        (["--rounds", "0"], "--rounds must be at least 1"),
        (["--rounds", "-1"], "--rounds must be at least 1"),
        (["--rules-file", "no-such.rules"], "--rules-file 'no-such.rules' does not exist"),
    ],
)
def test_bad_crawl_options_exit_2(small_lan: LAN, capsys, args: list[str], message: str) -> None:
    assert small_lan.cli("crawl", *args) == 2
    one_error_line(capsys, message)
    assert not small_lan.crawl_dir.exists()


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("host_timeout_s = nan", "host_timeout_s (luigi.cfg or LUIGI_CONFIG_PATH) must be a"),
        ("host_timeout_s = -1", "must be above 0"),
        ("liveness_timeout_s = 0", "liveness_timeout_s"),
        ("liveness_timeout_s = inf", "finite"),
        ("host_timeout_s = 1e300", "at most 86400"),
        ("partition_max_seconds = 0", "partition_max_seconds"),
        ("partition_max_bytes = -5", "partition_max_bytes"),
        ("round_seconds = -inf", "round_seconds"),
        ("crawlers = 1.5", "crawlers (luigi.cfg or LUIGI_CONFIG_PATH): '1.5' is not a valid"),
        ("crawlers = 0", "crawlers"),
        ("stats_every = 0", "stats_every"),
        ("tag_s_per_file = nan", "tag_s_per_file"),
        ("keep_rounds = 1", "keep_rounds (luigi.cfg or LUIGI_CONFIG_PATH) must be 0 (keep every"),
        ("keep_rounds = -3", "keep_rounds (luigi.cfg or LUIGI_CONFIG_PATH) must be at least 0"),
        ("history_days = -3", "history_days (luigi.cfg or LUIGI_CONFIG_PATH) must be at least 0"),
    ],
)
def test_bad_numeric_settings_exit_2(
    small_lan: LAN, capsys, luigi_cfg, setting: str, message: str
) -> None:
    luigi_cfg(f"[sharecrawl]\n{setting}\n")
    assert small_lan.cli("crawl") == 2
    one_error_line(capsys, message)
    assert not small_lan.crawl_dir.exists()


def test_bad_setting_in_luigi_config_path_exits_2(small_lan: LAN, tmp_path: Path) -> None:
    """As cron runs it: LUIGI_CONFIG_PATH names a file with a NaN timeout."""
    cfg = tmp_path / "bad.cfg"
    cfg.write_text("[sharecrawl]\nhost_timeout_s = nan\n")
    done = run_cli(
        "crawl",
        "--crawl-dir",
        str(small_lan.crawl_dir),
        "--hosts-file",
        str(small_lan.hosts_file),
        config=cfg,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "sharecrawl: error: [sharecrawl] host_timeout_s (luigi.cfg or LUIGI_CONFIG_PATH) must "
        "be a finite number, not nan"
    ]
    assert not small_lan.crawl_dir.exists()


def simulate(*args: str) -> int:
    """`sharecrawl simulate ARGS`'s exit status, its stderr on this process's."""
    done = run_cli("simulate", *args)
    sys.stderr.write(done.stderr)
    return done.returncode


def test_bad_input_leaves_an_existing_crawl_dir_unchanged(
    small_lan: LAN, capsys, monkeypatch, tmp_path: Path, luigi_cfg
) -> None:
    small_lan.crawl()
    before = snapshot(small_lan.crawl_dir)
    bad = [
        lambda: small_lan.cli("crawl", "--round-seconds", "nan"),
        lambda: small_lan.cli("crawl", "--rules-file", str(tmp_path / "absent.rules")),
        lambda: small_lan.cli("search", "--limit", "0", "music"),
        lambda: small_lan.cli("search", "--limit", "-1", "music"),
        lambda: simulate("--days", "nan"),
        lambda: simulate("--policies", "fifo"),
    ]
    for run in bad:
        capsys.readouterr()
        assert run() == 2
        one_error_line(capsys)
    monkeypatch.setenv("SHARECRAWL_SMB_CREDENTIALS", str(cred_file(tmp_path, "x\n")))
    assert small_lan.cli("crawl") == 2
    one_error_line(capsys, "credentials file")
    monkeypatch.delenv("SHARECRAWL_SMB_CREDENTIALS")
    small_lan.hosts_file.write_text("smb://two words/x\n")
    assert small_lan.cli("crawl") == 2
    one_error_line(capsys, "hosts.txt:1")
    small_lan.write_hosts("alpha")  # the hosts file is checked before the settings
    luigi_cfg("[sharecrawl]\nliveness_timeout_s = -2\n")
    assert small_lan.cli("crawl") == 2
    one_error_line(capsys, "liveness_timeout_s")
    assert snapshot(small_lan.crawl_dir) == before


def test_options_argparse_refuses_get_one_line(small_lan: LAN, capsys) -> None:
    for args in (
        ["crawl", "--crawlers", "many"],
        ["search", "--limit", "x", "q"],
        ["crawl", "--bogus"],
    ):
        assert small_lan.cli(*args) == 2
        one_error_line(capsys)
    assert not small_lan.crawl_dir.exists()


def test_default_rules_file_may_be_absent(small_lan: LAN, luigi_cfg, tmp_path: Path) -> None:
    luigi_cfg(f"[sharecrawl]\nrules_file = {tmp_path / 'not-written-yet.rules'}\n")
    small_lan.crawl()  # luigi.cfg names a rules file nobody wrote: no rules, no error


# -- name resolution under one deadline ----------------------------------------------------------


def test_a_resolver_that_never_answers_is_unknown_name_at_the_deadline() -> None:
    release = threading.Event()
    asked: list[str] = []

    def hanging(name: str, port: int, **_: object) -> list:
        asked.append(name)
        release.wait()  # an unresponsive DNS server
        raise socket.gaierror(socket.EAI_AGAIN, "temporary failure")

    names = [(f"host{i}.invalid", 445) for i in range(1000)]
    started = time.monotonic()
    try:
        result = resolve_names(names, 0.5, hanging)
    finally:
        release.set()
    elapsed = time.monotonic() - started
    print(f"1000 names, a resolver that never answers: {elapsed:.2f} s (deadline 0.5 s)")
    assert set(result) == set(names)
    assert {r.status for r in result.values()} == {"unknown_name"}  # type: ignore[union-attr]
    assert {r.error for r in result.values()} == {  # type: ignore[union-attr]
        "no answer from the name resolver within 0.5 s"
    }
    assert len(asked) >= 1


def test_liveness_classifies_each_host(tmp_path: Path) -> None:
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    port = listening.getsockname()[1]

    def resolver(name: str, port_: int, **kwargs: object) -> list:
        if name == "known.test":
            return socket.getaddrinfo("127.0.0.1", port_, **kwargs)  # type: ignore[arg-type]
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    hosts = [
        parse_host_url(f"smb://127.0.0.1:{port}/m"),
        parse_host_url(f"smb://known.test:{port}/m"),
        parse_host_url(f"smb://127.0.0.1:{free_port()}/m"),
        parse_host_url("smb://nowhere.invalid/m"),
        parse_host_url(f"file://{tmp_path}"),
        parse_host_url(f"file://{tmp_path / 'gone'}"),
    ]
    try:
        result = check_hosts(hosts, 2.0, resolver)
    finally:
        listening.close()
    assert [(r.status, r.error) for r in result] == [
        ("ok", None),
        ("ok", None),
        ("refused", "connection refused"),
        ("unknown_name", "unknown host name"),
        ("ok", None),
        ("offline", "folder is not there"),
    ]


def test_international_and_unknown_names_through_the_system_resolver() -> None:
    """Real getaddrinfo: an IDN name is encoded, never a UnicodeError; .invalid (RFC 2606)
    is unknown (or unanswered within the deadline, where no resolver is reachable)."""
    hosts = [parse_host_url("smb://мадонна-пк.invalid/m"), parse_host_url("smb://nas.invalid/m")]
    assert {r.status for r in check_hosts(hosts, 2.0)} == {"unknown_name"}
