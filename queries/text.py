"""What text means to the search index, for builder and queries alike (docs/DESIGN.md, Search):
casefolded NFC words ('track01' -> 'track', '01'), Cyrillic transliterated, accents and 'ø'-like
letters folded, compounds whole and by parts, Snowball stems and loose spellings."""

from __future__ import annotations

import re
import threading
import unicodedata
from functools import lru_cache

import Stemmer  # PyStemmer

# Russian letters, then Ukrainian and Belarusian ones met on Russian-speaking LANs
_TRANSLIT = str.maketrans("абвгдеёзийклмнопрстуфыэіґў", "abvgdeeziyklmnoprstufyeigu", "ъь") | {
    ord(x[0]): x[2:] for x in "ж=zh х=kh ц=ts ч=ch ш=sh щ=shch ю=yu я=ya ї=yi є=ye".split()
}
# Latin letters that Unicode does not decompose into a base letter and an accent
_LATIN_FOLD = str.maketrans(
    {"ø": "o", "æ": "ae", "œ": "oe", "ł": "l", "đ": "d", "ð": "d", "þ": "th", "ı": "i"}
)


_WORD_RE = re.compile(r"[^\W\d_]+|\d+")
_LETTERS = r"[^\W\d_]"
# 'spider-man', "don't", 'jay-z': letter runs joined by hyphens or apostrophes, no spaces
_COMPOUND_RE = re.compile(rf"{_LETTERS}+(?:[-\u2010\u2011'\u2019]{_LETTERS}+)+")
# 'b.o.s.e', 'r.e.m.': single letters joined by dots (not 'the.matrix', a dotted file name)
_INITIALS_RE = re.compile(rf"(?<!{_LETTERS}){_LETTERS}(?:\.{_LETTERS})+(?!{_LETTERS})")
_JOINERS_RE = re.compile(r"[-\u2010\u2011'\u2019.]")
# A query's words, initials taken as one ('b.o.s.e' before 'b', 'o', 's', 'e')
_QUERY_WORD_RE = re.compile(f"{_INITIALS_RE.pattern}|{_WORD_RE.pattern}")
_CYRILLIC_RE = re.compile(r"[\u0400-\u04ff]")

# Names that say nothing about the work ('track01.mp3', 'Запись 3.wav'): an untagged file
# with such a name is grouped with copies in a folder of the same name, not across folders.
GENERIC_WORDS = frozenset(
    "track tracks trk song songs audio video clip file new untitled unknown record recording "
    "part cd disc disk side title episode movie film mp3 wav "
    "trek pesnya zapis fayl diski".split()
)

_stemmers = threading.local()  # a Snowball stemmer holds its word while it works: one per thread


def snowball_stem(language: str, word: str) -> str:
    """The Snowball stem of a casefolded word (libstemmer's, by PyStemmer)."""
    stemmer = getattr(_stemmers, language, None)
    if stemmer is None:
        stemmer = Stemmer.Stemmer(language)
        setattr(_stemmers, language, stemmer)
    return stemmer.stemWord(word)


def transliterate(text: str) -> str:
    """Cyrillic letters to Latin; other characters unchanged (expects lower case)."""
    return text.translate(_TRANSLIT)


def strip_accents(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text.translate(_LATIN_FOLD))
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def words(text: str | None) -> list[str]:
    """Casefolded words of `text` in their original script, in order."""
    if not text:
        return []
    return _WORD_RE.findall(unicodedata.normalize("NFC", text.casefold()))


def compounds(text: str | None) -> list[str]:
    """The joined forms of `text`'s compounds, casefolded, in order: 'Spider-Man' ->
    ['spiderman'], 'B.O.S.E.' -> ['bose']. Their parts are words of their own (words)."""
    # Every compound holds a joiner, most names none: several times cheaper than two searches
    if not text or not _JOINERS_RE.search(text):
        return []
    folded = unicodedata.normalize("NFC", text.casefold())
    found = _COMPOUND_RE.findall(folded) + _INITIALS_RE.findall(folded)
    return [_JOINERS_RE.sub("", run) for run in found]


_LOOSE_ENDING_RE = re.compile(r"(?:iy|ii|yi|ij|yj)$")


def loose(surface: str) -> str:
    """Collapse spelling variants of transliteration: 'kholidey', 'holidey' -> 'holidey';
    'mumiy', 'mumii', 'mumij' -> 'mumy'. Applied alike to indexed and queried words."""
    return _LOOSE_ENDING_RE.sub("y", surface.replace("kh", "h").replace("j", "y"))


@lru_cache(maxsize=1 << 18)
def word_forms(word: str) -> tuple[str, ...]:
    """Latin forms of one casefolded word: surface, then stem and loose spelling if they differ."""
    if _CYRILLIC_RE.search(word):
        cyrillic = word.replace("ё", "е")
        surface = strip_accents(transliterate(cyrillic))
        stem = strip_accents(transliterate(snowball_stem("russian", cyrillic))) or surface
    else:
        surface = strip_accents(word)
        stem = snowball_stem("english", surface) if surface.isalpha() else surface
    return tuple(dict.fromkeys((surface, stem or surface, loose(surface))))


def indexable(surface: str) -> bool:
    """Whether a word's surface form is worth indexing: single letters and one- or two-digit
    numbers (track numbers) only add noise."""
    return len(surface) > 2 or (len(surface) == 2 and not surface.isdigit())


def is_generic_word(surface: str) -> bool:
    """Whether a word's surface form says nothing about a work ('track', '01')."""
    return surface.isdigit() or surface in GENERIC_WORDS


def normalised(text: str | None) -> str:
    """A key for grouping: 'Мадонна!' and 'madonna' both give 'madonna'."""
    return " ".join(word_forms(w)[0] for w in words(text))


def terms(text: str | None) -> list[str]:
    """Distinct index terms of `text`: surface forms, stems and loose spellings of its
    indexable words and of its compounds' joined forms."""
    out: dict[str, None] = {}
    for word in words(text) + compounds(text):
        forms = word_forms(word)
        if indexable(forms[0]):
            out.update(dict.fromkeys(forms))
    return list(out)


def query_words(text: str) -> list[tuple[str, ...]]:
    """Per query word, the terms that may match it: its own forms (surface, stem, loose), then the
    joined forms it is part of (the typed compound, and its pairing with a neighbour: 'spider
    man' -> 'spiderman')."""
    folded = unicodedata.normalize("NFC", text.casefold())
    items = [  # (word, start, end) in the folded text
        (_JOINERS_RE.sub("", m.group()), m.start(), m.end())
        for m in _QUERY_WORD_RE.finditer(folded)
    ]
    joined: list[list[str]] = [[] for _ in items]
    for match in _COMPOUND_RE.finditer(folded):
        whole = _JOINERS_RE.sub("", match.group())
        for i, (_, start, end) in enumerate(items):
            if start >= match.start() and end <= match.end():
                joined[i].append(whole)
    for i in range(len(items) - 1):
        left, right = items[i][0], items[i + 1][0]
        if left.isalpha() and right.isalpha() and len(left) > 1 and len(right) > 1:
            joined[i].append(left + right)
            joined[i + 1].append(left + right)
    result: list[tuple[str, ...]] = []
    for (word, _, _), others in zip(items, joined, strict=True):
        forms = word_forms(word)
        if not indexable(forms[0]):
            continue
        alternatives = dict.fromkeys(forms)
        for other in others:
            alternatives.update(dict.fromkeys(word_forms(other)))
        result.append(tuple(alternatives))
    return result


def is_generic_name(stem: str | None) -> bool:
    """True when a file name (without extension) has no word beyond generic ones."""
    surfaces = (word_forms(w)[0] for w in words(stem))
    return all(is_generic_word(s) for s in surfaces if indexable(s))
