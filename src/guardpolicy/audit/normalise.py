"""Text normalisation before overlap matching, so trivial re-encodings of a prompt still count as copies.

A benchmark prompt that reached the pool through another dataset often differs only in Unicode form
(full-width letters, ligatures), case, punctuation or spacing. Each step is switchable in params
`audit.normalise`, in the order NFKC -> casefold -> punctuation and symbols to spaces -> whitespace
collapsed and stripped.
"""

from __future__ import annotations

import functools
import sys
import unicodedata

import pandas as pd

from guardpolicy.config.audit import NormaliseConfig


@functools.cache
def _punctuation_and_symbols_to_space() -> dict[int, str]:
    """str.translate table mapping every code point of Unicode category P* or S* to a space.

    Built once over all code points (about 0.3 s) because a per-character category lookup would be far slower
    on thousands of long jailbreak prompts.
    """
    return {
        code: " " for code in range(sys.maxunicode + 1) if unicodedata.category(chr(code))[0] in ("P", "S")
    }


def normalise_text(text: str, config: NormaliseConfig) -> str:
    """Normalise one text for matching; see the module docstring for the steps and their order."""
    if config.nfkc:
        text = unicodedata.normalize("NFKC", text)
    if config.casefold:
        text = text.casefold()
    if config.strip_punctuation:
        # A space rather than nothing, so "end.Start" does not fuse into one word.
        text = text.translate(_punctuation_and_symbols_to_space())
    if config.collapse_whitespace:
        text = " ".join(text.split())
    return text


def normalise_series(texts: pd.Series, config: NormaliseConfig) -> pd.Series:
    """`normalise_text` over a Series of strings; index preserved, missing values become empty strings."""
    return texts.fillna("").astype(str).map(lambda text: normalise_text(text, config)).astype(str)
