"""Two machines never merge, one machine never splits, a moved machine is found in the next
round, and one gone for good retires (docs/DESIGN.md, Sources: a found host is its machine).
Real smbd servers on loopback addresses; Samba derives its ServerGuid from the NetBIOS name, so
two servers of one name differ only in what their shares say (crawl_io.share_marks)."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sharecrawl.crawl_io.share_marks import same_machine, share_marks
from sharecrawl.crawl_io.sources import Credentials, parse_host_url, parse_range_url
from sharecrawl.pipeline.discovery import Sweeper
from sharecrawl.pipeline.settings import read_settings
from tests.conftest import LAN
from tests.media import make_media
from tests.smbd import SmbServer, chmod_tree, make_base_dir, remove_tree, start_smbd

pytestmark = pytest.mark.smb
CENTURY = timedelta(days=36525)


def free_port_on(addresses: list[str]) -> int:
    """A port free on every one of `addresses` (one range line names one port)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind((addresses[0], 0))
            port = s.getsockname()[1]
        try:
            for address in addresses[1:]:
                with socket.socket() as s:
                    s.bind((address, port))
            return port
        except OSError:
            continue
    raise RuntimeError("no port free on every address")


class Machines:
    """Samba machines on one port; `start(name, address, title)` shares one song titled
    `title`; `again(server, address)` starts the same machine (its folders) elsewhere."""

    def __init__(self, addresses: list[str]) -> None:
        self.port = free_port_on(addresses)
        self.started: list[tuple[SmbServer, Path]] = []

    def start(self, name: str, address: str, title: str, extra_config: str = "") -> SmbServer:
        base = make_base_dir()
        make_media(base / "tree" / "media" / f"{title}.mp3", artist="Band", title=title)
        (base / "tree" / "private").mkdir(parents=True)
        chmod_tree(base / "tree")
        return self._run(base, name, address, extra_config)

    def again(self, server: SmbServer, name: str, address: str) -> SmbServer:
        return self._run(server.base.parent, name, address, "")

    def _run(self, base: Path, name: str, address: str, extra_config: str) -> SmbServer:
        server = start_smbd(
            base / "server",
            base / "tree",
            port=self.port,
            host=address,
            netbios_name=name,
            extra_config=extra_config,
        )
        self.started.append((server, base))
        return server

    def stop_all(self) -> None:
        for server, _ in self.started:
            server.stop()
        for base in {b for _, b in self.started}:
            remove_tree(base)


@pytest.fixture
def machines(smbd_factory) -> Iterator[Callable[[list[str]], Machines]]:
    made: list[Machines] = []

    def make(addresses: list[str]) -> Machines:
        made.append(Machines(addresses))
        return made[-1]

    yield make
    for m in made:
        m.stop_all()


def hosts(run_json, lan: LAN) -> list[dict]:
    return run_json(lan, "sql", "SELECT host, address, online FROM hosts ORDER BY address")


def test_two_machines_of_one_name_stay_two(lan: LAN, machines, luigi_cfg, run_json, capsys):
    luigi_cfg("[sharecrawl]\nliveness_timeout_s = 1\n")
    lan_machines = machines(["127.0.0.41", "127.0.0.42"])
    first = lan_machines.start("SAME-NAME", "127.0.0.41", "First Song")
    lan_machines.start("SAME-NAME", "127.0.0.42", "Second Song")
    port = lan_machines.port
    lan.hosts_file.write_text(f"smb://127.0.0.40-127.0.0.43:{port}\n")
    lan.crawl()
    found = hosts(run_json, lan)
    assert [(h["address"], h["online"]) for h in found] == [
        ("127.0.0.41", True),
        ("127.0.0.42", True),
    ]
    assert found[0]["host"] == f"SAME-NAME:{port}" and found[1]["host"] != found[0]["host"]
    titles = sorted(r["title"] for r in run_json(lan, "search", "band"))
    assert titles == ["First Song", "Second Song"]

    first.stop()  # the first machine goes: the second one stays where it is
    capsys.readouterr()
    lan.crawl()
    assert " moved: " not in capsys.readouterr().out
    assert [(h["host"], h["address"], h["online"]) for h in hosts(run_json, lan)] == [
        (found[0]["host"], "127.0.0.41", False),
        (found[1]["host"], "127.0.0.42", True),
    ]
    kept = run_json(lan, "sql", "SELECT host, path FROM files WHERE NOT is_dir ORDER BY path")
    assert kept == [
        {"host": found[0]["host"], "path": "First Song.mp3"},
        {"host": found[1]["host"], "path": "Second Song.mp3"},
    ]
    assert [r["title"] for r in run_json(lan, "search", "band")] == ["Second Song"]


TWO_ADDRESSES = "[global]\n  interfaces = 127.0.0.45/8 127.0.0.46/8\n"


def test_one_machine_at_two_addresses_of_a_range_is_one_host(
    lan: LAN, machines, luigi_cfg, run_json
) -> None:
    luigi_cfg("[sharecrawl]\nliveness_timeout_s = 1\ndiscover_every_s = 0\n")
    lan_machines = machines(["127.0.0.45", "127.0.0.46"])
    lan_machines.start("TWOFACE", "127.0.0.45", "Twin Song", TWO_ADDRESSES)
    port = lan_machines.port
    lan.hosts_file.write_text(f"smb://127.0.0.44-127.0.0.47:{port}\n")
    for _ in range(2):  # swept again: still one
        lan.crawl()
        assert hosts(run_json, lan) == [
            {"host": f"TWOFACE:{port}", "address": "127.0.0.45", "online": True}
        ]
        copies = run_json(lan, "sql", "SELECT count(*) AS n FROM copies")
        assert copies == [{"n": 1}]


def test_a_listed_machine_found_at_another_address_is_one_host(
    lan: LAN, machines, luigi_cfg, run_json
) -> None:
    luigi_cfg("[sharecrawl]\nliveness_timeout_s = 1\n")
    lan_machines = machines(["127.0.0.45", "127.0.0.46"])
    lan_machines.start("TWOFACE", "127.0.0.45", "Twin Song", TWO_ADDRESSES)
    port = lan_machines.port
    lan.hosts_file.write_text(
        f"smb://127.0.0.45:{port}/media\nsmb://127.0.0.46-127.0.0.47:{port}\n"
    )
    lan.crawl()
    assert run_json(lan, "sql", "SELECT host, discovered_by FROM hosts") == [
        {"host": f"127.0.0.45:{port}", "discovered_by": None}
    ]
    result = run_json(lan, "search", "twin song")
    assert [(r["title"], r["copies"]) for r in result] == [("Twin Song", 1)]
    sweep = run_json(lan, "status")["sweeps"][0]
    assert (sweep["n_smb"], sweep["n_new"]) == (1, 0)


@pytest.mark.parametrize("listed_at", ["127.0.0.46", "127.0.0.45"])
def test_a_found_machine_listed_later_stays_one_host(
    lan: LAN, machines, luigi_cfg, run_json, capsys, listed_at: str
) -> None:
    """The other order: a range finds the machine, then the operator lists it by hand, at its
    other address or where it was found. The listed host is the machine (its URL is the
    operator's word): the found one retires at once, rather than stay as an offline second
    copy of every file."""
    luigi_cfg("[sharecrawl]\nliveness_timeout_s = 1\n")
    lan_machines = machines(["127.0.0.45", "127.0.0.46"])
    lan_machines.start("TWOFACE", "127.0.0.45", "Twin Song", TWO_ADDRESSES)
    port = lan_machines.port
    line = f"smb://127.0.0.44-127.0.0.45:{port}"
    lan.hosts_file.write_text(line + "\n")
    lan.crawl()
    lan.hosts_file.write_text(f"{line}\nsmb://{listed_at}:{port}/media\n")
    for n in range(2):  # and the next round does not find it again
        capsys.readouterr()
        lan.crawl()
        out = capsys.readouterr()
        retired = "sharecrawl: TWOFACE retired: the hosts file lists its machine now"
        assert (retired in out.err) is (n == 0), out.err
        found = run_json(lan, "sql", "SELECT host, address, online, discovered_by FROM hosts")
        assert found == [
            {
                "host": f"{listed_at}:{port}",
                "address": listed_at,
                "online": True,
                "discovered_by": None,
            }
        ]
        result = run_json(lan, "search", "--all-hosts", "twin song")
        assert [(r["title"], r["copies"]) for r in result] == [("Twin Song", 1)]


def test_a_moved_machine_is_online_at_its_new_address_the_next_round(
    lan: LAN, machines, luigi_cfg, run_json, capsys
) -> None:
    luigi_cfg("[sharecrawl]\nliveness_timeout_s = 1\n")  # discover_every_s as by default
    lan_machines = machines(["127.0.0.51", "127.0.0.52"])
    mover = lan_machines.start("MOVER", "127.0.0.51", "Moving Song")
    port, key = lan_machines.port, f"MOVER:{lan_machines.port}"
    line = f"smb://127.0.0.50-127.0.0.53:{port}"
    lan.hosts_file.write_text(line + "\n")
    lan.crawl()
    files = run_json(lan, "sql", "SELECT host, share, path, first_seen FROM files ORDER BY ALL")

    mover.stop()
    lan_machines.again(mover, "MOVER", "127.0.0.52")
    capsys.readouterr()
    lan.crawl()
    assert "  MOVER moved: 127.0.0.51 -> 127.0.0.52" in capsys.readouterr().out
    assert hosts(run_json, lan) == [{"host": key, "address": "127.0.0.52", "online": True}]
    log = run_json(
        lan,
        "sql",
        "SELECT host, share, status, n_tags_read FROM fetchlog "
        "WHERE round = 2 AND share = 'media'",  # (private is closed to guests)
    )
    assert log == [{"host": key, "share": "media", "status": "unchanged", "n_tags_read": 0}]
    assert run_json(lan, "sql", "SELECT host, share, path, first_seen FROM files ORDER BY ALL") == (
        files
    )
    sweep = run_json(lan, "status")["sweeps"][0]
    assert (sweep["swept"], sweep["n_moved"], sweep["n_new"]) == (True, 1, 0)


def test_a_found_host_gone_past_the_limit_retires_and_a_listed_one_never(
    lan: LAN, machines, luigi_cfg, run_json, capsys
) -> None:
    # a limit of 0.1 ms: the round after a machine's last answer is past it
    luigi_cfg("[sharecrawl]\nliveness_timeout_s = 1\nretire_after_days = 0.000000001\n")
    lan_machines = machines(["127.0.0.55", "127.0.0.56"])
    gone = lan_machines.start("GONE", "127.0.0.55", "Gone Song")
    listed = lan_machines.start("LISTED", "127.0.0.56", "Listed Song")
    port = lan_machines.port
    lan.hosts_file.write_text(f"{listed.url}/media\nsmb://127.0.0.55-127.0.0.55:{port}\n")
    lan.crawl()
    assert len(hosts(run_json, lan)) == 2
    gone.stop()
    listed.stop()
    capsys.readouterr()
    assert lan.cli("crawl", "--rounds", "1") == 1  # no host answered: a person should look
    captured = capsys.readouterr()
    assert "sharecrawl: round 2: no host answered (1 refused)" in captured.err
    assert "sharecrawl: GONE retired: a range found it, and it has not answered since" in (
        captured.err
    )
    assert "hosts 0 new, 0 moved, 0 gone, 1 retired" in captured.out
    assert hosts(run_json, lan) == [
        {"host": f"127.0.0.56:{port}", "address": "127.0.0.56", "online": False}
    ]
    assert run_json(lan, "sql", "SELECT DISTINCT host FROM files") == [
        {"host": f"127.0.0.56:{port}"}
    ]
    assert run_json(lan, "status")["retired"] == 1
    # out of search too, offline copies included; the listed host's copy only goes offline
    assert [r["title"] for r in run_json(lan, "search", "--all-hosts", "song")] == ["Listed Song"]
    history = run_json(
        lan,
        "sql",
        f"SELECT round, status FROM fetchlog WHERE host = 'GONE:{port}' AND share = 'media'",
    )
    assert history == [{"round": 1, "status": "new"}]
    # the crawl's history: the retired machine's song deleted once (not again in round 3),
    # the listed one's, offline, not at all
    assert lan.cli("crawl", "--rounds", "1") == 1
    changes = "SELECT round, change, host, path FROM changes ORDER BY round, host"
    assert [tuple(r.values()) for r in run_json(lan, "sql", changes)] == [
        (1, "added", f"127.0.0.56:{port}", "Listed Song.mp3"),
        (1, "added", f"GONE:{port}", "Gone Song.mp3"),
        (2, "deleted", f"GONE:{port}", "Gone Song.mp3"),
    ]


@pytest.mark.parametrize("jump", [CENTURY, -CENTURY])
def test_a_sweep_stored_in_the_future_or_past_is_due(machines, jump: timedelta) -> None:
    """After a round under a clock a century fast (or slow), the next round sweeps the range
    and finds a machine new in it; the sweep stores the clock now in use."""
    lan_machines = machines(["127.0.0.58"])
    lan_machines.start("NEWBIE", "127.0.0.58", "New Song")
    r = parse_range_url(f"smb://127.0.0.57-127.0.0.59:{lan_machines.port}")
    assert r is not None
    settings = replace(read_settings(), liveness_timeout_s=1.0)
    now = datetime(2030, 1, 1, tzinfo=UTC)
    sweeper = Sweeper([], {r.line: now + jump}, set(), settings, now=now)
    rows, sweeps = sweeper.rows([r], set())
    assert [(row["host"], row["address"]) for row in rows] == [
        (f"NEWBIE:{lan_machines.port}", "127.0.0.58")
    ]
    assert [(s["swept"], s["swept_at"], s["n_new"]) for s in sweeps] == [(True, now, 1)]


@pytest.mark.parametrize("jump", [CENTURY, -CENTURY])
def test_a_round_after_a_sweep_under_another_clock_finds_a_new_machine(
    lan: LAN, machines, luigi_cfg, run_json, jump: timedelta
) -> None:
    """The console script's rounds: round 1 swept the range, its sweep stored a century ahead
    (or behind), as under `faketime '2100-01-01'`; round 2, an hour's sweep interval not
    passed by this clock, sweeps again and finds the machine started since."""
    luigi_cfg("[sharecrawl]\nliveness_timeout_s = 1\n")  # discover_every_s: an hour
    lan_machines = machines(["127.0.0.61", "127.0.0.62"])
    lan_machines.start("EARLY", "127.0.0.61", "Early Song")
    port = lan_machines.port
    lan.hosts_file.write_text(f"smb://127.0.0.60-127.0.0.63:{port}\n")
    lan.crawl()
    swept = lan.crawl_dir / "segments" / "r000001" / "discover.parquet"
    table = pq.read_table(swept)
    moved = [t + jump for t in table.column("swept_at").to_pylist()]
    at = table.schema.get_field_index("swept_at")
    pq.write_table(
        table.set_column(at, table.schema.field(at), pa.array(moved, table.schema.field(at).type)),
        swept,
    )
    lan_machines.start("LATE", "127.0.0.62", "Late Song")
    lan.crawl()
    assert [(h["host"], h["online"]) for h in hosts(run_json, lan)] == [
        (f"EARLY:{port}", True),
        (f"LATE:{port}", True),
    ]
    sweep = run_json(lan, "status")["sweeps"][0]
    assert (sweep["swept"], sweep["n_new"]) == (True, 1)
    assert sorted(r["title"] for r in run_json(lan, "search", "song")) == [
        "Early Song",
        "Late Song",
    ]


def test_retiring_counts_days_since_last_seen_and_a_future_sighting_as_now() -> None:
    settings = replace(read_settings(), retire_after_days=30.0)
    now = datetime(2030, 1, 1, tzinfo=UTC)
    sweeper = Sweeper([], {}, set(), settings, now=now)
    for seen, retired in [
        (now - timedelta(days=31), True),
        (now - timedelta(days=29), False),
        (now + CENTURY, False),  # seen under a clock a century fast: seen now
    ]:
        assert sweeper.gone_for_good({"host": "h", "last_seen": seen}) is retired


# FILE_WRITE_DATA, APPEND_DATA, WRITE_EA, WRITE_ATTRIBUTES, DELETE, WRITE_DAC, WRITE_OWNER,
# GENERIC_ALL, GENERIC_WRITE (MS-SMB2 2.2.13.1.1)
WRITE_ACCESS = 0x2 | 0x4 | 0x10 | 0x100 | 0x10000 | 0x40000 | 0x80000 | 0x10000000 | 0x40000000


def test_share_marks_tell_two_folders_apart_and_only_read(smbd_factory) -> None:
    one, two = smbd_factory(), smbd_factory()
    guest = Credentials(None, None)
    marks = [share_marks(parse_host_url(s.url), guest) for s in (one, two)]
    assert [[m.split(":")[0] for m in found] for found in marks] == [["media"], ["media"]]
    assert share_marks(parse_host_url(one.url), guest) == marks[0]  # the same each time
    assert same_machine(marks[0], marks[0]) is True
    assert same_machine(marks[0], marks[1]) is False  # other folders, other file IDs
    assert same_machine(marks[0], []) is None  # none taken: cannot tell
    lines = [line.split("|") for line in one.audit_lines() if "|media|" in line]
    changing = ("pwrite", "write", "fset", "unlinkat", "renameat", "mkdirat", "fch", "lchown")
    changing += ("fntimes", "ftruncate", "fallocate", "fremovexattr", "linkat", "symlinkat")
    assert lines and not [f for f in lines if f[3].startswith(changing)]
    creates = [f for f in lines if f[3] == "create_file"]
    assert creates and all(int(f[5], 16) & WRITE_ACCESS == 0 for f in creates), creates[:5]
    assert all(f[7] == "open" for f in creates), creates[:5]
