"""Sentence splitting of a document's paragraphs (paragraph boundaries are always sentence boundaries).

The splitter is blingfire plus boundary rules, chosen on evidence (docs/sentence_splitting.md; measured by
bench/bench_sentences.py on hand-labelled English paragraphs in tests/data/sentences/ and on gold sentences in
Arabic, German, French, Hindi, Russian and Chinese, with a third of each language held out of development).
blingfire was trained on English: it splits after titles and ordinals, misses boundaries before a capital that
is not ASCII ("À", "Ç", "Е") or a number, and does not know the danda "।". The rules act on its boundaries and
never on the text:

  1. no boundary after a title or abbreviation followed by a name or a number ("Mr." "Dr." "e.g." "bzw." "z. B."
     "Mme" "им." "डॉ." ...; "No." "Nr." "pp." "c." before a digit; Russian "г." unless it follows a number);
  2. no boundary inside a run of initials: capitals of any script, or a lone letter of a script without case
     ("H." | "N." | "Abrams", "أحمد ز." | "أمين");
  3. no boundary before a lowercase letter ('"Absurd!"' | 'said the Colonel angrily.');
  4. no boundary before a dash, which starts an attribution or continues a sentence;
  5. no boundary after a German ordinal ("am 3." | "Oktober", "im 20." | "Jahrhundert", "den 45." | "Präsidenten");
  6. closing quotes and brackets after a sentence end belong to that sentence ("importants. »", "。”"), and a
     Japanese quotation goes on into its quotative particle ("「本当？」と言った");
  7. boundaries blingfire misses: after . ! ? ending a word of two lowercase letters or more that is no
     abbreviation, before a capital of any script or a number that starts a clause ("...deux ans. La police",
     "...war. 1987 wurde"); before a bracketed sentence; after an era ("J.-C." "н. э." "v. Chr.") before a
     capital; and after the danda । ॥ and the Urdu full stop ۔.

The splitter takes no language: the `Document` carries none (a dump knows its language, google-format text
does not), and the rules need none. Each is keyed to a script (the danda, 。, caseless initials) or to words of
one language that do not end sentences in the others (every table below is one language's, and applying their
union moved none of the English figures).

Sentences are stripped slices of the paragraph, so no character is lost or changed: " ".join(sentences) is
the paragraph wherever the paragraph is single-spaced. Line breaks inside a paragraph are layout, not
boundaries.
"""
from __future__ import annotations

import re

import blingfire

from pipeline.formats.documents import Document

# Rule 1: words that never end a sentence before a name or a noun, and words that do not before a digit, by
# language. Left out on purpose: en "etc." "al." "Jr." "Sr." "Inc." "Co.", de "usw." "u. a.", ru "т. д." "др."
# (they often end a sentence), en "No." (a whole sentence in dialogue) unless a digit follows, ru "г." (below).
_NEVER_FINAL = {
    "en": "Mr Mrs Ms Messrs Mme Mlle Dr Prof Rev Hon Lieut St Ste Mt Ft Gen Col Capt Lt Sgt Cpl Maj Adm Cmdr Brig "
          "Gov Sen Rep Supt e.g i.e cf viz vs v",
    "de": "bzw vgl sog ggf evtl inkl zzgl bspw insb Hr Hrn Fr Dipl Ing Mio Mrd Tsd geb",
    "fr": "MM Mmes Mlles Mgr Pr av apr env",
    "ru": "им ул пер просп пл обл св проф акад доц ген см напр тыс млн млрд",
    "hi": "डॉ प्रो",
}
_BEFORE_DIGIT = {
    "en": "No Nos Vol Vols pp p c ca Fig Figs",
    "de": "Nr Abs Art Bd Jg Kap Abb S",
    "fr": "n° no t chap",
    "ru": "№ стр с т рис гл",
}
_ERAS = ("J.-C.", "J-C.", "н. э.", "н.э.", "v. Chr.", "n. Chr.")   # rule 7: "... avant J.-C. La ville ..."


def _word_alternation(*tables: dict[str, str]) -> str:
    """The words of all the tables' languages as one regex alternation, longest first."""
    words = {re.escape(w) for table in tables for line in table.values() for w in line.split()}
    return "|".join(sorted(words, key=len, reverse=True))


_ENDS_NEVER_FINAL = re.compile(r"(?<![\w.])(?:%s)\.$" % _word_alternation(_NEVER_FINAL))
_ENDS_BEFORE_DIGIT = re.compile(r"(?<![\w.])(?:%s)\.$" % _word_alternation(_BEFORE_DIGIT))
_ENDS_CITY = re.compile(r"(?<!\d )(?<![\w.])г\.$")   # "г. Москва" (city); "1990 г. Он ..." is a year
_STARTS_DIGIT = re.compile(r"\d")

# Rule 2. An initial is one letter and a full stop; its case is checked in Python (`_is_initial`), since `re`
# has no class for capitals of every script.
_OPENERS = re.escape("\"'“‘`([{«„")
_INITIAL = r"[^\W\d_]\."
_ONLY_INITIALS = re.compile(rf"[{_OPENERS}]*{_INITIAL}(?:\s*{_INITIAL})*")
_ENDS_INITIAL = re.compile(rf"(?<!\w)({_INITIAL})$")
_STARTS_INITIAL = re.compile(rf"[{_OPENERS}]*({_INITIAL})(?:\s|$)")

# Rules 3 and 4.
_FIRST_LETTER = re.compile(rf"[{_OPENERS}]*([^\W\d_])")
_STARTS_DASH = re.compile(r"[-‐‑‒–—―]")

# Rule 5: a German ordinal is a number and a full stop after an article or preposition, or before a month.
_ORDINAL_CONTEXT = ("im vom zum beim dem den der des ab bis seit ins ans ihr ihre ihrem ihren ihres sein seine "
                    "seinem seinen seines jedes jeden jedem").split()
_ENDS_GERMAN_ORDINAL = re.compile(r"(?<!\w)(?:%s)\s+\d{1,3}\.$" % "|".join(
    w for word in _ORDINAL_CONTEXT for w in (word, word.capitalize())))
_ENDS_NUMBER = re.compile(r"(?<![\d.,])\d{1,2}\.$")
_STARTS_MONTH = re.compile(r"(?:Januar|Jänner|Februar|März|April|Mai|Juni|Juli|August|September|Oktober|"
                           r"November|Dezember|Jahrhunderts?|Jahrtausends?|Jh)\b")

# Rule 6. Closers that are never openers; those that close before a space or the end (»Wort« opens, ’ is also
# an apostrophe, “ opens in English and closes in German); and straight quotes, which close only at the end
# (a straight quote before a space may open a quotation that a dropped template emptied: '" I have ...').
_CLOSERS = "”」』）】》〉"
_CLOSERS_BEFORE_SPACE = "’»)]“"
_CLOSERS_AT_END = "\"'"
_ALL_CLOSERS = _CLOSERS + _CLOSERS_BEFORE_SPACE + _CLOSERS_AT_END
_QUOTATIVE = ("と", "って")   # 「...？」と言った: the quotation is part of the sentence

# Rule 7. A sentence ending, its closers, then (group 1) the space before what follows.
_SENTENCE_END = re.compile(r"[.!?…]+[\"'”’»)\]]*(\s+)(?=\S)")
_DANDA = re.compile(r"[।॥۔][\"'”’»)\]]*(\s+)(?=\S)")
# Besides rule 1's words, abbreviations that may end a sentence but that a capital or number after them does not
# prove ended one: "etc. Mr. Smith", "born Jan. 5, 1990", "from the Dut. and Ger. WALLEN".
_MAY_END = {
    "en": "etc al approx esp ibid ed eds trans comp illus repr vol fl op ch sec para art ref est lbs Esq Bvt "
          "Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec Ger Dut Lat Gr Fr Sp It Ital Heb Skt Icel Dan Sw Norw",
    "de": "usw",
}
_ABBREVIATION = re.compile(r"(?<![\w.])(?:%s)\Z" % _word_alternation(_NEVER_FINAL, _BEFORE_DIGIT, _MAY_END))
_WORD = re.compile(r"(?<![\w.])[^\W\d_]{2,}\Z")
_CLAUSE_NUMBER = re.compile(r"\d{1,4}\s+[^\W\d_]")
_BRACKETED = re.compile(r"\([^\W\d_][^()]*[.!?]\)")   # its first letter a capital (checked in Python)
_FRONT_WORDS = 5

# What blingfire reads instead of the paragraph, character for character so that offsets carry over. It turns
# NUL and line breaks into spaces in its output (so each of its sentences is then found in this text), and it
# always ends a sentence after U+2028/U+2029, which inside a paragraph are layout.
_FOR_BLINGFIRE = str.maketrans({c: " " for c in "\n\r\v\f\x85\u2028\u2029\x00"})
_TAIL = 24  # characters: more than the longest abbreviation or ordinal context above and the word before it


def _is_initial(letter: str) -> bool:
    """A capital, or a letter of a script without case (Arabic, Hebrew, Devanagari)."""
    return not letter.islower()


def _fronted_era(before: str) -> bool:
    """Whether `before` ends in a date with an era that opens its sentence (at most _FRONT_WORDS words from its
    start): an adverbial before the subject, as in "1 января 49 года до н. э. Марк Антоний прочел ...", where a
    capital after the era starts no sentence."""
    if not before.endswith(_ERAS):
        return False
    era = next(era for era in _ERAS if before.endswith(era))
    date_end = len(before) - len(era)
    clause_start = 0
    for m in _SENTENCE_END.finditer(before, 0, date_end):
        nxt = before[m.end(1)]
        if nxt.isupper() or nxt.isdigit():
            clause_start = m.end(1)
    return len(before[clause_start:date_end].split()) <= _FRONT_WORDS


def _keeps_boundary(before: str, after: str) -> bool:
    """Whether blingfire's boundary between its sentences `before` and `after` stands (rules 1-5)."""
    tail = before[-_TAIL:]
    if _ENDS_NEVER_FINAL.search(tail) or _ENDS_CITY.search(tail) or _fronted_era(before):
        return False
    if _STARTS_DIGIT.match(after) and _ENDS_BEFORE_DIGIT.search(tail):
        return False
    if _ONLY_INITIALS.fullmatch(before) and all(_is_initial(c) for c in before if c.isalpha()):
        return False
    initial, next_initial = _ENDS_INITIAL.search(tail), _STARTS_INITIAL.match(after)
    if initial and _is_initial(initial.group(1)[0]):
        if next_initial and _is_initial(next_initial.group(1)[0]):
            return False
        if not initial.group(1)[0].isupper() and not after[:1].isupper():  # "ز." (caseless) and a word
            return False
    first = _FIRST_LETTER.match(after)
    if first and first.group(1).islower():
        return False
    if _STARTS_DASH.match(after):
        return False
    if _ENDS_GERMAN_ORDINAL.search(tail) or (_ENDS_NUMBER.search(tail) and _STARTS_MONTH.match(after)):
        return False
    return True


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


def _past_closers(text: str, cut: int) -> int | None:
    """Rule 6: where the sentence starting at `cut` really starts once the closers that belong to the sentence
    before are given back to it; None when nothing is left of it or it goes on a quotation."""
    end, n = cut, len(text)
    while end < n and (text[end] in _CLOSERS or
                       (text[end] in _CLOSERS_BEFORE_SPACE and (end + 1 == n or text[end + 1].isspace())) or
                       (text[end] in _CLOSERS_AT_END and n - end <= 8 and
                        not text[end + 1:].strip(_ALL_CLOSERS + " "))):
        end += 1
    if end == cut:
        return cut
    while end < n and text[end].isspace():
        end += 1
    if end == n or (text[end - 1] in "」』" and text.startswith(_QUOTATIVE, end)):
        return None
    return end


def _missed_here(text: str, start: int, m: re.Match) -> bool:
    """Rule 7: whether the sentence end `m` inside blingfire's sentence from `start` is a boundary it missed."""
    run = text[m.start():m.end()].rstrip()
    if ".." in run or "…" in run:  # an ellipsis may end a sentence or pause in one: blingfire decides
        return False
    head, after = text[max(start, m.start() - 40):m.start()], m.end(1)
    nxt = text[after]
    if nxt == "(":
        return head[-1:].isalnum() and bool(_BRACKETED.match(text, after)) and text[after + 1].isupper()
    if text.endswith(_ERAS, start, m.start() + 1):
        return nxt.isupper() and not _fronted_era(text[start:m.start() + 1])
    word = _WORD.search(head)
    if not word or not word.group()[-2:].islower() or _ABBREVIATION.search(head):
        return False
    if nxt.isdigit():
        return bool(_CLAUSE_NUMBER.match(text, after))
    return nxt.isupper() or nxt.istitle()


def split_paragraph(text: str) -> list[str]:
    """The sentences of one paragraph, in order: stripped, non-empty slices of `text` that together hold all of
    it but the whitespace between them."""
    cuts = [0] + _blingfire_starts(text) + [len(text)]
    if "।" in text or "॥" in text or "۔" in text:
        cuts = sorted(set(cuts) | {m.end(1) for m in _DANDA.finditer(text)})
    pieces = [text[a:b].strip() for a, b in zip(cuts, cuts[1:])]
    kept = [0]
    for cut, before, after in zip(cuts[1:-1], pieces, pieces[1:]):
        if _keeps_boundary(before, after):
            cut = _past_closers(text, cut)
            if cut is not None and cut > kept[-1]:
                kept.append(cut)
    kept.append(len(text))
    sentences = []
    for start, end in zip(kept, kept[1:]):
        for m in _SENTENCE_END.finditer(text, start, end):
            if m.end(1) < end and _missed_here(text, start, m):
                sentences.append(text[start:m.start(1)])
                start = m.end(1)
        sentences.append(text[start:end])
    return [s.strip() for s in sentences if s.strip()]


def document_sentences(doc: Document) -> list[str]:
    """The document's sentences in order; google-format (presplit) documents keep their lines as given."""
    if doc.presplit:
        return [p for p in doc.paragraphs if p.strip()]
    return [s for p in doc.paragraphs for s in split_paragraph(p)]
