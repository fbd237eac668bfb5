"""Altered copies of a book, as copies of one book from different sources differ (Bandy & Vincent 2021):
re-wrapped lines, curly quotes and dashes, another header, a chapter dropped, chapters shuffled, an excerpt.

    ALTERATIONS[name](text, rng) -> the altered text

Used by bench/bench_dedup.py and tests/test_dedup.py; each works on a book's raw text, before extraction.
"""
from __future__ import annotations

import random
import re
import textwrap

_CHAPTER = re.compile(r"\n(?=(?:CHAPTER|Chapter|BOOK|Book|STAVE|PART|Part|VOLUME)\b[^\n]{0,60}\n)")


def paragraphs(text: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n", text) if p.strip()]


def chapters(text: str) -> list[str]:
    """The text cut before each chapter heading (the first piece is what comes before the first)."""
    return _CHAPTER.split(text)


def rewrap(text: str, rng: random.Random) -> str:
    """Every paragraph re-wrapped at another width (a different edition's line breaks)."""
    width = rng.choice((50, 60, 66, 90))
    return "\n\n".join(textwrap.fill(" ".join(p.split()), width) for p in paragraphs(text)) + "\n"


def curly(text: str, rng: random.Random) -> str:
    """Straight quotes turned curly and -- into em dashes (a typeset edition)."""
    out, opening = [], True
    for c in text:
        if c == '"':
            out.append("\u201c" if opening else "\u201d")
            opening = not opening
        elif c == "'":
            out.append("\u2019")
        else:
            out.append(c)
    return "".join(out).replace("--", "\u2014")


def header(text: str, rng: random.Random) -> str:
    """Another source's front matter instead of the first paragraph."""
    front = ("Transcribed from the 1906 edition by a volunteer. Produced for a digital library; spelling and "
             "punctuation as in the original. This copy may be shared freely.")
    return front + "\n\n" + "\n\n".join(paragraphs(text)[1:]) + "\n"


def drop_chapter(text: str, rng: random.Random) -> str:
    """One chapter (or, in a book without headings, a twentieth of its paragraphs) left out."""
    parts = chapters(text)
    if len(parts) > 3:
        del parts[rng.randrange(1, len(parts))]
        return "\n".join(parts)
    paras = paragraphs(text)
    start = rng.randrange(0, max(1, len(paras) - len(paras) // 20))
    return "\n\n".join(paras[:start] + paras[start + len(paras) // 20:]) + "\n"


def shuffle_chapters(text: str, rng: random.Random) -> str:
    """The chapters in another order (a compilation's ordering)."""
    parts = chapters(text)
    if len(parts) <= 3:
        paras = paragraphs(text)
        cut = len(paras) // 2
        return "\n\n".join(paras[cut:] + paras[:cut]) + "\n"
    body = parts[1:]
    rng.shuffle(body)
    return "\n".join([parts[0]] + body)


def excerpt(text: str, rng: random.Random) -> str:
    """The first 30% of the paragraphs: a sample edition (Jaccard about 0.3: not a near duplicate)."""
    paras = paragraphs(text)
    return "\n\n".join(paras[:max(1, len(paras) * 3 // 10)]) + "\n"


ALTERATIONS = {"rewrap": rewrap, "curly": curly, "header": header, "drop_chapter": drop_chapter,
               "shuffle_chapters": shuffle_chapters, "excerpt": excerpt}
