"""Which group of a host's parts holds which partitions: groups of about GROUP_ROWS files rows,
planned stably (new partitions join their nearest ancestor's group; oversized groups are
cut, small ones compacted)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

GROUP_ROWS = 20_000


def plan_groups(
    old: Mapping[int, Iterable[str]],
    rows: Mapping[str, int],
    order: list[str],
    parent: Mapping[str, str | None],
    target: int | None = None,
) -> dict[int, list[str]]:
    """The host's groups now (group -> partition ids in `order`, parents first) from the `old`
    groups, files `rows` per partition and `parent` links."""
    target = target or GROUP_ROWS
    ordered = [p for p in order if rows.get(p, 0) > 0]
    listed = set(ordered)
    ordered += sorted(p for p in rows if rows[p] > 0 and p not in listed)
    group_of: dict[str, int] = {}
    for group, pids in old.items():
        for pid in pids:
            if rows.get(pid, 0) > 0:
                group_of[pid] = group
    next_id = max([*old, -1]) + 1
    pool = []
    for pid in ordered:
        if pid in group_of:
            continue
        ancestor, seen = parent.get(pid), {pid}
        while ancestor is not None and ancestor not in group_of and ancestor not in seen:
            seen.add(ancestor)
            ancestor = parent.get(ancestor)
        if ancestor in group_of:
            group_of[pid] = group_of[ancestor]
        else:
            pool.append(pid)
    size: dict[int, int] = {}
    for pid, group in group_of.items():
        size[group] = size.get(group, 0) + rows[pid]
    opened: int | None = None  # the group the pool fills first: new partitions stay together
    for pid in pool:
        fits = [
            g
            for g in ([opened] if opened is not None else []) + sorted(size, key=size.get)
            if size[g] + rows[pid] <= target
        ]
        if fits:
            group = fits[0]
        else:
            group, next_id = next_id, next_id + 1
            size[group] = 0
        opened = group
        group_of[pid] = group
        size[group] += rows[pid]
    groups: dict[int, list[str]] = {}
    for pid in ordered:
        groups.setdefault(group_of[pid], []).append(pid)
    for group in sorted(groups):
        if size[group] > 2 * target:
            chunks = _packed(groups.pop(group), rows, target)
            groups[group] = chunks[0]
            for chunk in chunks[1:]:
                groups[next_id], next_id = chunk, next_id + 1
    small = sorted(g for g, pids in groups.items() if sum(rows[p] for p in pids) < target / 4)
    if len(small) > 1:
        in_small = {pid for g in small for pid in groups[g]}
        merged = [pid for pid in ordered if pid in in_small]
        chunks = _packed(merged, rows, target)
        for group in small:
            del groups[group]
        for group, chunk in zip(small, chunks, strict=False):
            groups[group] = chunk
    return {g: groups[g] for g in sorted(groups)}


def _packed(pids: list[str], rows: Mapping[str, int], target: int) -> list[list[str]]:
    """Consecutive partitions in chunks of at most `target` rows (or one partition)."""
    chunks: list[list[str]] = [[]]
    filled = 0
    for pid in pids:
        if chunks[-1] and filled + rows[pid] > target:
            chunks.append([])
            filled = 0
        chunks[-1].append(pid)
        filled += rows[pid]
    return chunks
