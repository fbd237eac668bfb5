"""Sentence splitting of a document's paragraphs (paragraph boundaries are always sentence boundaries).

The splitter is blingfire plus five boundary rules, chosen on evidence (docs/sentence_splitting.md; measured by
bench/bench_sentences.py). Accuracy is the share of paragraphs split exactly as a person did it, on
tests/data/sentences/: `labelled.jsonl`, 142 paragraphs (426 sentences) of the Wikipedia sample and the
Gutenberg books picked for hard cases (Mr., St., U.S., e.g., initials, decimals, quotes, ellipses, brackets);
the rules were written while looking at it. `heldout.jsonl`, 50 paragraphs drawn at random and labelled after
the rules were fixed. Speed: MB of paragraph text per CPU-second, 2 MB of the books and Wikipedia.

    splitter                  hard cases   held out   MB/s per core
    blingfire 0.1.8           82.4%        96%        13
    syntok 1.4.4              81.7%        90%        0.8
    pysbd 0.3.4               71.8%        88%        0.16
    sentencex 1.0.32          68.3%        90%        99
    blingfire + rules (this)  96.5%        96%        6.3

blingfire is as accurate as the best of the others and 16-80 times faster than them; sentencex, faster still,
misses a quarter of the boundaries. blingfire's errors are systematic, so it is kept and corrected. The rules
act on its boundaries, never on the text:

  1. no boundary after a title or abbreviation that is followed by a name or a number: "Mr." "Mrs." "Dr."
     "St." "Mt." "Gen." "e.g." "i.e." "cf." "vs." "v." ..., and "No." "Vol." "pp." "c." before a digit
     (blingfire: '"Mr.' | 'Elton going to be married!"');
  2. no boundary inside a run of initials ("H." | "N." | "Abrams also published");
  3. no boundary before a lowercase letter ('"Absurd!"' | 'said the Colonel angrily.');
  4. no boundary before a dash, which starts an attribution or continues a sentence ('... of us."' | "--COOK'S
     VOYAGES.");
  5. a boundary blingfire misses: before "Mr." "Mrs." "Ms." "Dr." "Messrs." or initials after a word that ends
     in two lowercase letters and . ! or ? ("...dropt a hint. Mr. Knightley was ..." and "Tolkien wrote it.
     H. N. Abrams published it." are one sentence to it), and before a bracketed sentence after a full stop
     ("... non-P. (Non-P and non-Q designate ...)").

Sentences are stripped slices of the paragraph, so no character is lost or changed: " ".join(sentences) is
the paragraph wherever the paragraph is single-spaced. Line breaks inside a paragraph are layout, not
boundaries.
"""
from __future__ import annotations

import re

import blingfire

from pipeline.documents import Document

# Rule 1. Left out on purpose: "etc." "al." "Jr." "Sr." "Inc." "Co." (they often end a sentence), and "No."
# (a whole sentence in dialogue) unless a digit follows.
_NEVER_FINAL = ("Mr Mrs Ms Messrs Mme Mlle Dr Prof Rev Hon St Ste Mt Ft Gen Col Capt Lt Sgt Cpl Maj Adm Cmdr "
                "Brig Gov Sen Rep Supt e.g i.e cf viz vs v").split()
_BEFORE_DIGIT = "No Nos Vol Vols pp p c ca Fig Figs".split()
_ENDS_NEVER_FINAL = re.compile(r"(?<![\w.])(?:%s)\.$" % "|".join(map(re.escape, _NEVER_FINAL)))
_ENDS_BEFORE_DIGIT = re.compile(r"(?<![\w.])(?:%s)\.$" % "|".join(map(re.escape, _BEFORE_DIGIT)))
_STARTS_DIGIT = re.compile(r"\d")

# Rule 2. An initial is one capital letter (any script) and a full stop.
_OPENERS = re.escape("\"'“‘`([{«")
_INITIAL = r"[^\W\d_a-z]\."
_ONLY_INITIALS = re.compile(rf"[{_OPENERS}]*{_INITIAL}(?:\s*{_INITIAL})*")
_ENDS_INITIAL = re.compile(rf"(?<!\w){_INITIAL}$")
_STARTS_INITIAL = re.compile(rf"[{_OPENERS}]*{_INITIAL}(?:\s|$)")

# Rules 3 and 4.
_FIRST_LETTER = re.compile(rf"[{_OPENERS}]*([^\W\d_])")
_STARTS_DASH = re.compile(r"[-‐‑‒–—―]")

# Rule 5. A sentence ending, then (group 1) whitespace, then a title or initials and a name ...
_MISSED = re.compile(r"[.!?][\"'”’)\]]*(\s+)"
                     r"(?=(?P<name>(?:Mr|Mrs|Ms|Dr|Messrs)\.\s+[A-Z]|(?:[A-Z]\.\s*){1,3}[A-Z][a-z])"
                     r"|\([A-Z][^()]*[.!?]\))")
# ... where the ending is a word of two lowercase letters or more (no initial) and no abbreviation ("etc. Mr.
# Smith"); or a bracketed sentence after any word.
_NOT_A_WORD = "|".join(map(re.escape, _NEVER_FINAL + _BEFORE_DIGIT +
                           "etc al approx esp ibid ed eds trans comp illus repr vol".split()))
_LOWER_WORD_END = re.compile(rf"(?<![\w.])(?!(?:{_NOT_A_WORD})\.)[^\W\d_]*[a-z]{{2}}[.!?]\Z")
_WORD_END = re.compile(r"\w[.!?]\Z")

# What blingfire reads instead of the paragraph, character for character so that offsets carry over. It turns
# NUL and line breaks into spaces in its output (so each of its sentences is then found in this text), and it
# always ends a sentence after U+2028/U+2029, which inside a paragraph are layout.
_FOR_BLINGFIRE = str.maketrans({c: " " for c in "\n\r\v\f\x85\u2028\u2029\x00"})
_TAIL = 16  # characters: more than the longest abbreviation above and the one before it


def _keeps_boundary(before: str, after: str) -> bool:
    """Whether blingfire's boundary between its sentences `before` and `after` stands (rules 1-4)."""
    tail = before[-_TAIL:]
    if _ENDS_NEVER_FINAL.search(tail):
        return False
    if _ENDS_BEFORE_DIGIT.search(tail) and _STARTS_DIGIT.match(after):
        return False
    if _ONLY_INITIALS.fullmatch(before) or (_ENDS_INITIAL.search(tail) and _STARTS_INITIAL.match(after)):
        return False
    first = _FIRST_LETTER.match(after)
    if first and first.group(1).islower():
        return False
    return not _STARTS_DASH.match(after)


def _blingfire_starts(text: str) -> list[int]:
    """Offsets in `text` where blingfire starts a sentence, after the first."""
    plain = text.translate(_FOR_BLINGFIRE)
    starts, pos = [], 0
    for sentence in blingfire.text_to_sentences(plain).split("\n"):
        sentence = sentence.strip()
        start = plain.find(sentence, pos) if sentence else -1
        if start < 0:  # blingfire changed the text (it only drops control characters at the edges): go on
            continue
        starts.append(start)
        pos = start + len(sentence)
    return starts[1:]


def split_paragraph(text: str) -> list[str]:
    """The sentences of one paragraph, in order: stripped, non-empty slices of `text` that together hold all of
    it but the whitespace between them."""
    cuts = [0] + _blingfire_starts(text) + [len(text)]
    pieces = [text[a:b].strip() for a, b in zip(cuts, cuts[1:])]
    kept = [0] + [cut for cut, before, after in zip(cuts[1:-1], pieces, pieces[1:])
                  if _keeps_boundary(before, after)] + [len(text)]
    sentences = []
    for start, end in zip(kept, kept[1:]):
        for m in _MISSED.finditer(text, start, end):
            word_end = _LOWER_WORD_END if m.group("name") else _WORD_END
            if word_end.search(text, max(start, m.start() - 40), m.start() + 1):
                sentences.append(text[start:m.start(1)])
                start = m.end(1)
        sentences.append(text[start:end])
    return [s.strip() for s in sentences if s.strip()]


def document_sentences(doc: Document) -> list[str]:
    """The document's sentences in order; google-format (presplit) documents keep their lines as given."""
    if doc.presplit:
        return [p for p in doc.paragraphs if p.strip()]
    return [s for p in doc.paragraphs for s in split_paragraph(p)]
