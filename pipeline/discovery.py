"""Hosts found by the hosts file's ranges: sweep, probe, give each machine its key, and retire
the long gone (docs/DESIGN.md, Sources: a found host is its machine, told by its name and
ServerGuid, and by its share marks where those agree for more than one)."""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pyarrow as pa

from sharecrawl.crawl_io.discover import Identity, probe_all, sweep
from sharecrawl.crawl_io.readable import readable_text
from sharecrawl.crawl_io.share_marks import same_machine, share_marks
from sharecrawl.crawl_io.sources import HOST_OK, AddressRange, HostURL, credentials_for

if TYPE_CHECKING:
    from sharecrawl.pipeline.settings import Settings

log = logging.getLogger("sharecrawl")
SWEEP_EARLY = 0.1  # a range's sweep is due this share of discover_every_s early (Sweeper._due)
IDENTITY_COLUMNS = (
    "address",
    "netbios_name",
    "dns_name",
    "server_guid",
    "dialect",
    "signing_required",
    "discovered_by",
    "share_marks",
)

SWEEPS = pa.schema(  # segments/rN/discover.parquet: one row per range line
    [
        ("line", pa.string()),
        ("swept_at", pa.timestamp("us", tz="UTC")),  # the last sweep (maybe an earlier round's)
        ("swept", pa.bool_()),  # swept this round (else its known hosts were rechecked)
        ("n_addresses", pa.int64()),  # addresses tried this round
        ("n_answered", pa.int64()),  # accepted TCP
        ("n_smb", pa.int64()),  # answered the SMB probe
        ("n_new", pa.int64()),
        ("n_moved", pa.int64()),
        ("n_gone", pa.int64()),
        ("n_retired", pa.int64()),  # found hosts silent past retire_after_days: rows gone
    ]
)


def identity_fields(found: Identity) -> dict:
    return {c: getattr(found, c) for c in IDENTITY_COLUMNS if hasattr(found, c)}


def _identity(guid: str | None, name: str | None, names: dict) -> tuple:
    zero = guid is None or uuid.UUID(guid).int == 0
    return (guid, name) if zero or len(names[guid]) > 1 else (guid, None)


class Sweeper:
    """One round's discovery over `ranges`, given the previous hosts rows and sweeps, the
    listed hosts' Inject rows with their URLs, and the round's clock."""

    def __init__(
        self,
        previous: list[dict],
        last_sweeps: dict[str, datetime],
        taken: set[str],
        settings: Settings,
        listed: Iterable[tuple[dict, HostURL]] = (),
        now: datetime | None = None,
    ) -> None:
        self.known = [p for p in previous if p.get("discovered_by")]
        self.last_sweeps = last_sweeps
        self.taken = taken | {p["host"] for p in previous}
        self.s = settings
        self.listed = [(row, url) for row, url in listed if row.get("server_guid")]
        self.now = now or datetime.now(UTC)
        self._said: dict[tuple[str, int], Identity] = {}  # this round's probes
        self._marks: dict[tuple[str, int], list[str]] = {}
        self._unmatched: list[dict] = []  # known hosts no answer is this round
        self._listed_now: list[dict] = []  # known hosts that are a listed host's machine

    def _due(self, line: str) -> bool:
        """Is the range's sweep due? A last sweep in the future (the clock moved back) counts
        as now and makes it due, as a last scan there does (docs/DESIGN.md, Time can jump).
        Rounds a timer starts every `discover_every_s` come a little more or less apart (its
        random delay, the start-up): within SWEEP_EARLY of the interval is due, or an hourly
        round would sweep one round in two."""
        last = self.last_sweeps.get(line)
        if last is None or last > self.now:
            return True
        return self.now - last >= timedelta(seconds=self.s.discover_every_s * (1 - SWEEP_EARLY))

    def _probed(self, r: AddressRange, addresses: Iterable[str], skip: set) -> list[Identity]:
        """The SMB answers at `addresses` (each probed once a round); a listener of another
        protocol is one line."""
        port = r.host.port or 445
        todo = [a for a in addresses if (a, port) not in skip and (a, port) not in self._said]
        for i in probe_all(todo, port, self.s.liveness_timeout_s):
            self._said[(i.address, port)] = i
            if i.not_smb:  # a listener of another protocol on the port: not a host
                log.warning("sharecrawl: %s: %s:%s: error: not SMB", r.line, i.address, port)
        said = [self._said.get((a, port)) for a in addresses]
        return [i for i in said if i is not None and not i.error]

    def _sweep(self, r: AddressRange, skip: set) -> tuple[list[Identity], dict]:
        """The range's SMB answers this round, and its summary. Between sweeps its hosts are
        rechecked where they answered last; one of them that answered last round and does
        not now sends the round to sweep the range at once, so a moved machine is found."""
        port, timeout = r.host.port or 445, self.s.liveness_timeout_s
        bounds = (self.s.discover_concurrency, self.s.discover_rate)
        due = self._due(r.line)
        mine = [k for k in self.known if k["discovered_by"] == r.line]
        tried, accepted = 0, set()
        if not due:
            todo = sorted({k["address"] for k in mine if k.get("address")})
            tried = len(todo)
            answered = sweep(todo, port, timeout, *bounds)
            accepted = set(answered)
            smb = self._probed(r, answered, skip)
            here = {(i.address, i.server_guid) for i in smb}
            due = any(
                k.get("online") and (k["address"], k["server_guid"]) not in here for k in mine
            )
        if due:
            tried += r.size
            answered = sweep(r.addresses(), port, timeout, *bounds)
            accepted |= set(answered)
            smb = self._probed(r, answered, skip)
        last = self.last_sweeps.get(r.line)
        summary = {"line": r.line, "swept_at": self.now if due else last, "swept": due}
        counts = {"n_addresses": tried, "n_answered": len(accepted), "n_smb": len(smb)}
        return smb, {**summary, **counts}

    def marks(self, url: HostURL) -> list[str]:
        """The share marks of the host at `url` (taken once a round)."""
        key = (url.hostname, url.port or 445)
        if key not in self._marks:
            timeout = max(self.s.liveness_timeout_s, self.s.host_timeout_s)
            self._marks[key] = share_marks(url, credentials_for(url), timeout)
        return self._marks[key]

    def rows(self, ranges: list[AddressRange], skip: set[tuple[str, int]]) -> tuple[list, list]:
        """Inject rows of every host the ranges hold (found now or known), and a summary
        per range. `skip`: (address, port) of hosts the file lists by name."""
        found: list[tuple[AddressRange, Identity]] = []
        sweeps = []
        for r in ranges:
            smb, summary = self._sweep(r, skip)
            found += [(r, i) for i in smb]
            zeros = dict.fromkeys(("n_new", "n_moved", "n_gone", "n_retired"), 0)
            sweeps.append({**summary, **zeros})
        stats = {s["line"]: s for s in sweeps}
        rows = [self._row(r, i, prev, stats) for r, i, prev in self._matched(found)]
        lines = {r.line for r in ranges}
        for k in self._unmatched:  # not found: offline where it was last, until it answers
            if k["discovered_by"] not in lines:
                continue  # its range left the hosts file: Update retires it
            line = k["discovered_by"]
            if self.gone_for_good(k):
                stats[line]["n_retired"] += 1
                continue
            stats[line]["n_gone"] += 1
            where = f"did not answer at {k['address']} nor elsewhere in {line}"
            rows.append(
                {
                    **{c: k.get(c) for c in ("host", "url", "notify_trusted")},
                    "shares": [],
                    "online": False,
                    "error": where,
                    "checked_at": self.now,
                    "status": "offline",
                    **{c: k.get(c) for c in IDENTITY_COLUMNS},
                }
            )
        for k in self._listed_now:  # one machine, one host: the listed one keeps its files
            if k["discovered_by"] in stats:
                stats[k["discovered_by"]]["n_retired"] += 1
            log.warning(
                "sharecrawl: %s retired: the hosts file lists its machine now",
                readable_text(k.get("netbios_name") or k["host"]),
            )
        return rows, sweeps

    def gone_for_good(self, k: dict) -> bool:
        """Has a found host not answered for `retire_after_days`? (A last sighting in the
        future counts as now.) Its rows then leave the live tables; fetchlog keeps them."""
        seen = k.get("last_seen") or k.get("first_seen")
        if seen is None or self.now - min(seen, self.now) <= timedelta(
            days=self.s.retire_after_days
        ):
            return False
        log.warning(
            "sharecrawl: %s retired: a range found it, and it has not answered since %s",
            readable_text(k.get("netbios_name") or k["host"]),
            seen.strftime("%Y-%m-%d"),
        )
        return True

    def _row(self, r: AddressRange, i: Identity, prev: dict | None, stats: dict) -> dict:
        key = prev["host"] if prev else self._new_key(i, r.host.port)
        moved = prev is not None and prev.get("address") != i.address
        if prev is None or moved:
            stats[r.line]["n_moved" if moved else "n_new"] += 1
        url = r.at(i.address, key)
        if prev is None or moved:  # a machine's marks are kept for when it moves
            self.marks(url)
        return {
            "host": key,
            "url": url.url,
            "shares": [],
            "online": True,
            "checked_at": self.now,
            "status": HOST_OK,
            "notify_trusted": r.host.notify_trusted,
            **identity_fields(i),
            "discovered_by": r.line,
            "share_marks": self._marks.get((i.address, r.host.port or 445)),
            "moved_from": prev.get("address") if moved else None,
        }

    def _matched(
        self, found: list[tuple[AddressRange, Identity]]
    ) -> list[tuple[AddressRange, Identity, dict | None]]:
        """Each machine among the answers, once, with its known row (None: new). One machine
        never splits: its answers at several addresses, or at a listed host's, are one; two
        never merge: answers alike in name and ServerGuid whose share marks differ are two.
        A known machine moves only when its old address no longer answers as it."""
        names: dict = defaultdict(set)
        for row in [*self.known, *(row for row, _ in self.listed)]:
            names[row["server_guid"]].add(row["netbios_name"])
        for _, i in found:
            names[i.server_guid].add(i.netbios_name)
        groups: dict[tuple, tuple[list, list, list]] = defaultdict(lambda: ([], [], []))
        for r, i in found:
            groups[_identity(i.server_guid, i.netbios_name, names)][0].append((r, i))
        for k in self.known:
            groups[_identity(k["server_guid"], k["netbios_name"], names)][1].append(k)
        for row, url in self.listed:
            groups[_identity(row["server_guid"], row["netbios_name"], names)][2].append(url)
        out, self._unmatched, self._listed_now = [], [], []
        for answers, known, listed in groups.values():
            matched, left = self._group(answers, known, listed)
            out += matched
            self._unmatched += left
        return out

    def _answer_marks(self, answer: tuple[AddressRange, Identity]) -> list[str]:
        r, i = answer
        return self.marks(r.at(i.address, i.address))

    def _group(self, answers: list, known: list[dict], listed: list[HostURL]) -> tuple[list, list]:
        """One identity's answers matched to its known hosts: (matched, known left over)."""
        if not answers:
            return [], self._not_listed(known, listed, set())
        if len(answers) == 1 and len(known) <= 1 and not listed:
            (r, i), k = answers[0], (known[0] if known else None)
            if k is None or k.get("address") == i.address:
                return [(r, i, k)], []
            if same_machine(k.get("share_marks"), self._answer_marks(answers[0])) is False:
                return [(r, i, None)], [k]  # a namesake where it went: another machine
            return [(r, i, k)], []
        at_known = {k.get("address") for k in known}
        answers = sorted(answers, key=lambda a: a[1].address not in at_known)
        machines: list[list] = []  # answers that are one machine, its first answer first
        for answer in answers:
            mine = self._answer_marks(answer)
            same = (
                m for m in machines if same_machine(self._answer_marks(m[0]), mine) is not False
            )
            if (machine := next(same, None)) is not None:
                machine.append(answer)
            else:
                machines.append([answer])
        at_listed = {
            a[1].address
            for m in machines
            if any(self._is_listed(m[0], url) for url in listed)
            for a in m
        }
        machines = [m for m in machines if m[0][1].address not in at_listed]
        matched, left = [], []
        for k in known:  # a known machine answering where it was stays there
            here = next(
                (
                    m
                    for m in machines
                    for a in m
                    if a[1].address == k.get("address")
                    and same_machine(k.get("share_marks"), self._answer_marks(a)) is not False
                ),
                None,
            )
            if here is None:
                left.append(k)
                continue
            machines.remove(here)
            matched.append(next((r, i, k) for r, i in here if i.address == k.get("address")))
        for k in list(left):  # one that no longer answers where it was: moved, if it is there
            verdicts = [
                (same_machine(k.get("share_marks"), self._answer_marks(m[0])), m) for m in machines
            ]
            best = next((m for v, m in verdicts if v), None) or next(
                (m for v, m in verdicts if v is None), None
            )
            if best is not None:
                machines.remove(best)
                left.remove(k)
                matched.append((*best[0], k))
        return matched + [(*m[0], None) for m in machines], self._not_listed(
            left, listed, at_listed
        )

    def _not_listed(self, left: list[dict], listed: list[HostURL], at_listed: set) -> list[dict]:
        """`left` but the known hosts that are a listed host's machine (answering at an address
        where it does, or with its share marks): those retire, the listed host has the files."""
        if not listed:
            return left
        kept = []
        for k in left:
            marks = k.get("share_marks")
            if k.get("address") in at_listed or any(
                same_machine(marks, self.marks(u)) for u in listed
            ):
                self._listed_now.append(k)
            else:
                kept.append(k)
        return kept

    def _is_listed(self, answer: tuple[AddressRange, Identity], url: HostURL) -> bool:
        """Is the answer the machine the hosts file lists at `url` (it keeps its own key)?"""
        return same_machine(self.marks(url), self._answer_marks(answer)) is not False

    def _new_key(self, found: Identity, port: int | None) -> str:
        suffix = f":{port}" if port and port != 445 else ""
        base = found.name or found.address
        key = f"{base}{suffix}"
        if key in self.taken:
            key = f"{base}-{(found.server_guid or '').replace('-', '')[:8]}{suffix}"
        if key in self.taken:
            key = f"{base}-{found.address}{suffix}"
        self.taken.add(key)
        return key
