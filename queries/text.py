"""Text normalisation for search: words, transliteration, stems, terms.

One function decides what a piece of text means to the index, for the index builder and for
queries alike, so both sides always agree:

- casefold, Unicode NFC, split into words (letters and digit runs apart: 'track01' is
  'track' + '01');
- Cyrillic words are transliterated to Latin (a common informal scheme: 'Мумий Тролль' ->
  'mumiy troll'), so one Latin form serves both scripts;
- accents are stripped ('Beyoncé' -> 'beyonce');
- every word yields its surface form and a Snowball stem (Russian stemmer on the Cyrillic
  form before transliteration, English on Latin words), so 'песни' meets 'песня' and
  'songs' meets 'song';
- and a loose spelling that folds common transliteration variants ('kh'/'h', 'j'/'y',
  '-iy'/'-ii'/'-ij'), so 'holidey' meets 'Холидей' and 'mumii' meets 'Мумий'.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import snowballstemmer

_RU_TO_LATIN = {
    "а": "a", "б": "b", "в": "v", "г": "g", "д": "d", "е": "e", "ё": "e", "ж": "zh",
    "з": "z", "и": "i", "й": "y", "к": "k", "л": "l", "м": "m", "н": "n", "о": "o",
    "п": "p", "р": "r", "с": "s", "т": "t", "у": "u", "ф": "f", "х": "kh", "ц": "ts",
    "ч": "ch", "ш": "sh", "щ": "shch", "ъ": "", "ы": "y", "ь": "", "э": "e", "ю": "yu",
    "я": "ya",
    # Ukrainian and Belarusian letters met on Russian-speaking LANs
    "і": "i", "ї": "yi", "є": "ye", "ґ": "g", "ў": "u",
}  # fmt: skip
_TRANSLIT_TABLE = str.maketrans(_RU_TO_LATIN)


_WORD_RE = re.compile(r"[^\W\d_]+|\d+")
_CYRILLIC_RE = re.compile(r"[\u0400-\u04ff]")

# Names that say nothing about the work ('track01.mp3', 'Запись 3.wav'): an untagged file
# with such a name is grouped with copies in a folder of the same name, not across folders.
GENERIC_WORDS = frozenset(
    "track tracks trk song songs audio video clip file new untitled unknown record recording "
    "part cd disc disk side title episode movie film mp3 wav "
    "trek pesnya zapis fayl diski".split()
)

_english = snowballstemmer.stemmer("english")
_russian = snowballstemmer.stemmer("russian")


def transliterate(text: str) -> str:
    """Cyrillic letters to Latin; other characters unchanged (expects lower case)."""
    return text.translate(_TRANSLIT_TABLE)


def strip_accents(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def words(text: str | None) -> list[str]:
    """Casefolded words of `text` in their original script, in order."""
    if not text:
        return []
    return _WORD_RE.findall(unicodedata.normalize("NFC", text.casefold()))


_LOOSE_ENDING_RE = re.compile(r"(?:iy|ii|yi|ij|yj)$")


def loose(surface: str) -> str:
    """Collapse spelling variants of transliteration: 'kholidey', 'holidey' -> 'holidey';
    'mumiy', 'mumii', 'mumij' -> 'mumy'. Applied alike to indexed and queried words."""
    return _LOOSE_ENDING_RE.sub("y", surface.replace("kh", "h").replace("j", "y"))


@lru_cache(maxsize=1 << 18)
def word_forms(word: str) -> tuple[str, ...]:
    """Forms of one casefolded word in the common Latin form: surface first, then its stem
    and its loose spelling when they differ."""
    if _CYRILLIC_RE.search(word):
        cyrillic = word.replace("ё", "е")
        surface = strip_accents(transliterate(cyrillic))
        stem = strip_accents(transliterate(_russian.stemWord(cyrillic))) or surface
    else:
        surface = strip_accents(word)
        stem = _english.stemWord(surface) if surface.isalpha() else surface
    return tuple(dict.fromkeys((surface, stem or surface, loose(surface))))


def indexable(surface: str) -> bool:
    """Whether a word's surface form is worth indexing: single letters and one- or two-digit
    numbers (track numbers) only add noise."""
    return len(surface) > 2 or (len(surface) == 2 and not surface.isdigit())


def is_generic_word(surface: str) -> bool:
    """Whether a word's surface form says nothing about a work ('track', '01')."""
    return surface.isdigit() or surface in GENERIC_WORDS


def surface_words(text: str | None) -> list[str]:
    """The Latin surface forms of the words of `text` worth indexing, in order."""
    forms = (word_forms(w)[0] for w in words(text))
    return [s for s in forms if indexable(s)]


def normalised(text: str | None) -> str:
    """A key for grouping: 'Мадонна!' and 'madonna' both give 'madonna'."""
    return " ".join(word_forms(w)[0] for w in words(text))


def word_terms(word: str) -> tuple[str, ...]:
    """The terms one query word may match: its surface form, stem and loose spelling."""
    return word_forms(word)


def terms(text: str | None) -> list[str]:
    """Distinct index terms of `text`: surface forms and stems of its indexable words."""
    out: dict[str, None] = {}
    for word in words(text):
        forms = word_forms(word)
        if indexable(forms[0]):
            out.update(dict.fromkeys(forms))
    return list(out)


def query_words(text: str) -> list[tuple[str, ...]]:
    """Per indexable query word, the terms that may match it (surface, stem)."""
    result = []
    for word in words(text):
        forms = word_terms(word)
        if indexable(forms[0]):
            result.append(forms)
    return result


def is_generic_name(stem: str | None) -> bool:
    """True when a file name (without extension) has no word beyond generic ones."""
    return all(is_generic_word(w) for w in surface_words(stem))
