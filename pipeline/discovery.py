"""Hosts found by the hosts file's ranges: sweep, probe, and give each machine its key
(docs/DESIGN.md, Sources: a machine is its ServerGuid, with its NetBIOS name where the GUID is
zeros or shared by several names)."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

import pyarrow as pa

from sharecrawl.crawl_io.discover import Identity, probe_all, sweep
from sharecrawl.crawl_io.sources import HOST_OK, AddressRange

IDENTITY_COLUMNS = (
    "address",
    "netbios_name",
    "dns_name",
    "server_guid",
    "dialect",
    "signing_required",
    "discovered_by",
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
    ]
)


def identity_fields(found: Identity) -> dict:
    return {c: getattr(found, c) for c in IDENTITY_COLUMNS if c != "discovered_by"}


def _identity(guid: str | None, name: str | None, names: dict) -> tuple:
    zero = guid is None or uuid.UUID(guid).int == 0
    return (guid, name) if zero or len(names[guid]) > 1 else (guid, None)


class Sweeper:
    """One round's discovery over `ranges`, given the previous hosts rows and sweeps."""

    def __init__(
        self,
        previous: list[dict],
        last_sweeps: dict[str, datetime],
        taken: set[str],
        settings: object,
    ) -> None:
        self.known = [p for p in previous if p.get("discovered_by")]
        self.last_sweeps = last_sweeps
        self.taken = taken | {p["host"] for p in previous}
        self.s = settings

    def _answered(self, r: AddressRange, now: datetime) -> tuple[list[str], dict]:
        last = self.last_sweeps.get(r.line)
        due = last is None or now - last >= timedelta(seconds=self.s.discover_every_s)
        if due:
            todo: Iterable[str] = r.addresses()
            size = r.size
        else:  # between sweeps: the addresses its hosts answered at last
            todo = sorted({k["address"] for k in self.known if k["discovered_by"] == r.line})
            size = len(todo)
        port, timeout = r.host.port or 445, self.s.liveness_timeout_s
        found = sweep(todo, port, timeout, self.s.discover_concurrency, self.s.discover_rate)
        summary = {"line": r.line, "swept_at": now if due else last, "swept": due}
        return found, {**summary, "n_addresses": size, "n_answered": len(found)}

    def rows(self, ranges: list[AddressRange], skip: set[tuple[str, int]]) -> tuple[list, list]:
        """Inject rows of every host the ranges hold (found now or known), and a summary
        per range. `skip`: (address, port) of hosts the file lists by name."""
        now = datetime.now(UTC)
        found: list[tuple[AddressRange, Identity]] = []
        sweeps = []
        for r in ranges:
            answered, summary = self._answered(r, now)
            port = r.host.port or 445
            todo = [a for a in answered if (a, port) not in skip]
            smb = [i for i in probe_all(todo, port, self.s.liveness_timeout_s) if not i.error]
            found += [(r, i) for i in smb]
            sweeps.append({**summary, "n_smb": len(smb), "n_new": 0, "n_moved": 0, "n_gone": 0})
        names: dict = defaultdict(set)
        for k in self.known:
            names[k["server_guid"]].add(k["netbios_name"])
        for _, i in found:
            names[i.server_guid].add(i.netbios_name)
        known = {_identity(k["server_guid"], k["netbios_name"], names): k for k in self.known}
        rows, seen, stats = [], set(), {s["line"]: s for s in sweeps}
        for r, i in found:
            ident = _identity(i.server_guid, i.netbios_name, names)
            if ident in seen:  # one machine at two addresses: its first
                continue
            seen.add(ident)
            prev = known.pop(ident, None)
            key = prev["host"] if prev else self._new_key(i, r.host.port)
            moved = prev is not None and prev.get("address") != i.address
            if prev is None or moved:
                stats[r.line]["n_moved" if moved else "n_new"] += 1
            rows.append(
                {
                    "host": key,
                    "url": r.at(i.address, key).url,
                    "shares": [],
                    "online": True,
                    "checked_at": now,
                    "status": HOST_OK,
                    "notify_trusted": r.host.notify_trusted,
                    **identity_fields(i),
                    "discovered_by": r.line,
                    "moved_from": prev.get("address") if moved else None,
                }
            )
        lines = {r.line for r in ranges}
        for k in known.values():  # not found: offline where it was last, until it answers
            if k["discovered_by"] in lines:
                stats[k["discovered_by"]]["n_gone"] += 1
                where = f"did not answer at {k['address']} nor elsewhere in {k['discovered_by']}"
                rows.append(
                    {
                        **{c: k.get(c) for c in ("host", "url", "notify_trusted")},
                        "shares": [],
                        "online": False,
                        "error": where,
                        "checked_at": now,
                        "status": "offline",
                        **{c: k.get(c) for c in IDENTITY_COLUMNS},
                    }
                )
        return rows, sweeps

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
