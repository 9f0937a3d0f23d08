"""Facets: kind, format, host and year of the best works of a search, each value a link that
adds its field to the query (clicking it again takes it away). All four are fields of the
query language (queries.querylang), so the page and `sharecrawl search` give the same.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from sharecrawl.queries.work_values import value_counts
from sharecrawl.web.catalog import CopyTable

FACET_POOL = 100  # facets count the best this many works of a search
FACET_VALUES = 8  # values shown per facet


def _field_re(field: str) -> re.Pattern[str]:
    # a field token as queries.querylang reads one: field:"quoted words" or field:word
    return re.compile(rf'(?<!\S){re.escape(field)}:(?:"([^"]*)"?|(\S*))', re.IGNORECASE)


def field_value(q: str, field: str) -> str | None:
    """The value the query gives `field` (the last one when given twice), or None."""
    found = _field_re(field).findall(q)  # (quoted, bare) pairs: one of the two is empty
    return (found[-1][0] or found[-1][1]) if found else None


def without_field(q: str, field: str) -> str:
    return " ".join(_field_re(field).sub(" ", q).split())


def with_field(q: str, field: str, value: str | None) -> str:
    """The query with `field` set to `value` (replacing what it had), or removed (None)."""
    rest = without_field(q, field)
    if value is None:
        return rest
    value = value.replace('"', "")  # a quote cannot be inside a quoted value
    token = f'{field}:"{value}"' if not value or re.search(r"\s", value) else f"{field}:{value}"
    return f"{rest} {token}".strip()


def facets(q: str, results: list[dict], copies: CopyTable, offline: bool, link) -> list[dict]:
    """The facets of the best works of a search. `link(query)` makes a value's URL."""
    pool = results[:FACET_POOL]
    out = []

    def facet(name: str, label: str, counts: list[tuple[str, str, int]]) -> None:
        given = field_value(q, name)
        values = []
        for text, value, count in counts[:FACET_VALUES]:
            on = given is not None and given.casefold() == value.casefold()
            target = with_field(q, name, None if on else value)
            values.append(dict(label=text, count=count, active=on, href=link(target), q=target))
        if values:
            out.append({"name": name, "label": label, "values": values})

    kinds = Counter(r["kind"] for r in pool if r.get("kind"))
    facet("kind", "Kind", [(k, k, n) for k, n in kinds.most_common()])
    work_ids = np.array([r["work_id"] for r in pool], dtype=np.int64)
    formats = value_counts(copies.formats, work_ids, offline)
    facet("format", "Format", [(f.upper(), f, n) for f, n in formats])
    hosts = value_counts(copies.hosts, work_ids, offline)
    facet("host", "Host", [(h, h, n) for h, n in hosts])
    decades = Counter(r["year"] // 10 * 10 for r in pool if isinstance(r.get("year"), int))
    decade_counts = sorted(decades.items(), reverse=True)
    facet("year", "Year", [(f"{d}s", f"{d}..{d + 9}", n) for d, n in decade_counts])
    return out
