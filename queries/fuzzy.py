"""Typo tolerance: a query word of five letters or more also finds index terms one edit away
('metalica' -> 'metallica'). Candidates come from deletion keys after SymSpell (W. Garbe):
two words one edit apart always share a key (a word or it with one letter deleted). The
index keeps its vocabulary's keys as sorted CRC-32 hashes, looked up by binary search; a hash
may collide, so `one_edit` checks every candidate."""

from __future__ import annotations

import zlib
from collections.abc import Iterable

import numpy as np

from sharecrawl.queries.work_values import distinct

MIN_WORD = 5  # query words shorter than this match exactly only
MIN_TERM = MIN_WORD - 1  # the shortest term one edit from such a word
# Longer words match exactly only: a word's keys cost the square of its length, and no
# name people type has a word this long (it bounds what a hostile query costs).
MAX_WORD = 32
MAX_TERM = MAX_WORD + 1


def fuzzy_word(surface: str) -> bool:
    """Whether a query word's surface form gets typo tolerance."""
    return MIN_WORD <= len(surface) <= MAX_WORD and surface.isalpha()


def deletion_keys(word: str) -> set[str]:
    """The word itself and every form of it with one letter deleted."""
    return {word} | {word[:i] + word[i + 1 :] for i in range(len(word))}


def key_hash(key: str) -> int:
    """The stored form of a key: CRC-32 of its UTF-8, the same in every process."""
    return zlib.crc32(key.encode("utf-8"))


def term_key_rows(terms: Iterable[tuple[str, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(key hashes, term ids): one row per distinct deletion key of each keyed term."""
    hashes: list[int] = []
    ids: list[int] = []
    for term, term_id in terms:
        if MIN_TERM <= len(term) <= MAX_TERM and term.isalpha():  # may be one edit from one
            keys = {key_hash(k) for k in deletion_keys(term)}
            hashes.extend(keys)
            ids.extend([term_id] * len(keys))
    return np.array(hashes, dtype=np.uint32), np.array(ids, dtype=np.int32)


def query_hashes(surface: str) -> list[int]:
    """The key hashes a fuzzy query word looks up."""
    return sorted({key_hash(k) for k in deletion_keys(surface)})


def one_edit(a: str, b: str) -> bool:
    """Whether `a` and `b` are exactly one edit apart (optimal string alignment distance 1:
    one insertion, deletion, substitution or swap of neighbours)."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        if len(diff) == 1:
            return True
        return (
            len(diff) == 2
            and diff[1] == diff[0] + 1
            and a[diff[0]] == b[diff[1]]
            and a[diff[1]] == b[diff[0]]
        )
    short, long = (a, b) if len(a) < len(b) else (b, a)
    i = 0
    while i < len(short) and short[i] == long[i]:
        i += 1
    return short[i:] == long[i + 1 :]


class KeyTable:
    """The vocabulary's deletion keys in memory: hashes sorted, with their term ids."""

    def __init__(self, hashes: np.ndarray, term_ids: np.ndarray) -> None:
        order = np.argsort(hashes, kind="stable")
        self.hashes = hashes[order]
        self.term_ids = term_ids[order]

    @classmethod
    def presorted(cls, hashes: np.ndarray, term_ids: np.ndarray) -> KeyTable:
        """A table of hashes already sorted (an arrays file's): nothing is copied."""
        table = cls.__new__(cls)
        table.hashes, table.term_ids = hashes, term_ids
        return table

    def candidates(self, surface: str) -> np.ndarray:
        """Term ids sharing a key hash with the word (to be checked with one_edit)."""
        wanted = np.array(query_hashes(surface), dtype=np.uint32)
        lo = np.searchsorted(self.hashes, wanted, side="left")
        hi = np.searchsorted(self.hashes, wanted, side="right")
        if not np.any(hi > lo):
            return np.zeros(0, dtype=np.int32)
        return distinct(np.concatenate([self.term_ids[a:b] for a, b in zip(lo, hi, strict=True)]))
