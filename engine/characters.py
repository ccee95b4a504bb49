"""Characters that make a name read differently from what it is, and names folded to compare.

A person reads a name; the file system compares its code points. Where the two
disagree a name can deceive: `evil\\u202etxt.exe` shows as `evilexe.txt`, a
soft hyphen or a zero-width space hides inside a name, `\\u3164` (a Hangul
filler) looks like a blank, a variation selector or a tag character is not
shown at all. `deceptive_character` finds the first such character in a name;
the sandbox refuses it in every name a call creates (engine/paths.py).

`folded` is the form the secret and internal name rules compare: NFKC, case
folded, with the default-ignorable code points dropped (Unicode's NFKC_Casefold
does the same), so `\\uff0eenv` (a full-width dot) and `.\\uff27\\uff29\\uff34`
(full-width GIT) are `.env` and `.git`.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["deceptive_character", "folded", "is_default_ignorable"]

# Default_Ignorable_Code_Point, as DerivedCoreProperties.txt of the Unicode
# Character Database lists it (https://www.unicode.org/Public/UCD/latest/ucd/
# DerivedCoreProperties.txt) from Unicode 14.0 (which added U+180F, and which
# this Python's unicodedata has) on; adjacent ranges of the file are merged
# here. Python's unicodedata has no such property, so the ranges are written
# out: (first, last), sorted, inclusive. A range of reserved code points is
# ignorable too: a later Unicode may assign them as invisible characters.
_DEFAULT_IGNORABLE: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD),  # SOFT HYPHEN
    (0x034F, 0x034F),  # COMBINING GRAPHEME JOINER
    (0x061C, 0x061C),  # ARABIC LETTER MARK
    (0x115F, 0x1160),  # HANGUL CHOSEONG FILLER, HANGUL JUNGSEONG FILLER
    (0x17B4, 0x17B5),  # KHMER VOWEL INHERENT AQ, AA
    (0x180B, 0x180F),  # MONGOLIAN FREE VARIATION SELECTORS, VOWEL SEPARATOR
    (0x200B, 0x200F),  # ZERO WIDTH SPACE .. RIGHT-TO-LEFT MARK
    (0x202A, 0x202E),  # bidirectional embeddings and overrides
    (0x2060, 0x206F),  # WORD JOINER .. invisible operators, isolates, deprecated formats
    (0x3164, 0x3164),  # HANGUL FILLER
    (0xFE00, 0xFE0F),  # VARIATION SELECTOR-1 .. 16
    (0xFEFF, 0xFEFF),  # ZERO WIDTH NO-BREAK SPACE (byte order mark)
    (0xFFA0, 0xFFA0),  # HALFWIDTH HANGUL FILLER
    (0xFFF0, 0xFFF8),  # unassigned, reserved as ignorable
    (0x1BCA0, 0x1BCA3),  # SHORTHAND FORMAT controls
    (0x1D173, 0x1D17A),  # MUSICAL SYMBOL BEGIN BEAM .. END PHRASE
    (0xE0000, 0xE0FFF),  # tags (U+E0001, U+E0020-E007F), VARIATION SELECTOR-17 .. 256
)
# One character class: a whole name is searched in C, not a code point at a time.
_IGNORABLE = re.compile(
    "[" + "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in _DEFAULT_IGNORABLE) + "]"
)

#: The Hangul fillers and the variation selectors: named by the rule on their own
#: (each is default-ignorable too), so a reason says what was found.
_FILLERS = frozenset("\u115f\u1160\u3164\uffa0")

# General categories refused whatever the code point: controls (Cc), formats
# (Cf: bidirectional controls, joiners, invisible operators, tags, ...), line
# and paragraph separators (Zl, Zp).
_CATEGORIES = {
    "Cc": "a control character",
    "Cf": "a format character",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
}


def is_default_ignorable(char: str) -> bool:
    """Whether `char` has Unicode's Default_Ignorable_Code_Point property.

    >>> [is_default_ignorable(c) for c in ("\\u00ad", "\\U000e0041", "a", "\\u00e9")]
    [True, True, False, False]
    """
    return _IGNORABLE.fullmatch(char) is not None


def deceptive_character(name: str) -> tuple[str, str] | None:
    """The first character a new name may not hold, as (`U+XXXX`, why), or None.

    >>> deceptive_character("in\\u200bvisible.txt")
    ('U+200B', 'ZERO WIDTH SPACE, a format character')
    >>> deceptive_character("caf\\u00e9 \\u6587\\u4ef6 \\U0001f600.txt") is None
    True
    """
    if name.isascii() and name.isprintable():
        return None  # in ASCII exactly the control characters are not printable
    ignorable = _IGNORABLE.search(name)
    end = len(name) if ignorable is None else ignorable.start()
    # Before the first ignorable, only a refused category can be refused.
    for char in name[:end]:
        if unicodedata.category(char) in _CATEGORIES:
            return _described(char)
    return None if ignorable is None else _described(name[end])


def _described(char: str) -> tuple[str, str]:
    why = _why_refused(char)
    assert why is not None
    label = unicodedata.name(char, "")
    return f"U+{ord(char):04X}", f"{label}, {why}" if label else why


def _why_refused(char: str) -> str | None:
    # Surrogates (Cs) pass: U+DC80-DCFF are the bytes of a name that is not UTF-8.
    category = unicodedata.category(char)
    if category in _CATEGORIES:
        return _CATEGORIES[category]
    if char in _FILLERS:
        return "a Hangul filler"
    if "\ufe00" <= char <= "\ufe0f" or "\U000e0100" <= char <= "\U000e01ef":
        return "a variation selector"
    if is_default_ignorable(char):
        return "a default-ignorable code point"
    return None


def folded(name: str) -> str:
    """`name` as the name rules compare it: NFKC, case folded, ignorables dropped.

    >>> folded("\\uff0eenv"), folded(".\\uff27\\uff29\\uff34"), folded(".e\\u00adnv")
    ('.env', '.git', '.env')
    >>> folded("README.md")
    'readme.md'
    """
    if name.isascii():
        return name.lower()  # NFKC keeps ASCII; its case fold is lower()
    name = _IGNORABLE.sub("", name)
    # Case folding can undo a normal form: normalise again after it.
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())
