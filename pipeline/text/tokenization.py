"""WordPiece tokenization with HuggingFace `tokenizers`, built to give exactly google's FullTokenizer ids.

google's BasicTokenizer (bert/tokenization.py) decides every character class with the running Python's
`unicodedata`. The `tokenizers` built-ins (BertNormalizer, BertPreTokenizer) use their own, older Unicode tables
and other rules; each row below changes ids on some input (measured against bert-tensorflow 1.0.4 on
Python 3.11, Unicode 14):

    google                                      BertNormalizer / BertPreTokenizer
    drops NUL, U+FFFD and categories Cc, Cf     also drops Co (private use: U+E000 ...); keeps newer Cf (U+0890)
    isolates CJK ideographs U+2B820..U+2CEAF    only from U+2B920
    lowercasing strips category Mn after NFD    misses marks newer than its tables (U+07FD, U+0898 ...)
    punctuation: ASCII symbols + categories P*  misses newer P* (U+061D, U+2E43 ...); splits U+166D (now So)
    str.lower(): word-final capital sigma -> ς  char by char: σ (ΑΧΙΛΛΕΥΣ, in the bundled Wikipedia sample)
    words over 200 characters -> [UNK]          (this module had 100, HF BertTokenizer's default)

So the tokenizer is assembled from generic `tokenizers` steps whose character classes are computed once per
process from `unicodedata`, the tables google's code consults:

    normalizer:     drop google's control set -> google's whitespace (and U+2028/9, which str.split() splits
                    on) to ' ' [uncased: final sigma -> lowercase -> NFD -> drop Mn]
    pre-tokenizer:  split on ' ' -> isolate each CJK ideograph and each google punctuation character
    model:          WordPiece, '##' continuations, [UNK], at most 200 characters per word

Most sentences are ASCII, where all of google's cleanup is one character map: controls dropped, \t \n \r to
' ', A-Z lowercased (uncased), each of the 32 ASCII symbols spaced apart. Those sentences are mapped so in
Python (`_ascii_texts`) and go to a second HF tokenizer that only splits on spaces: half the CPU of the regex
steps, the same ids (tests/test_tokenization.py checks random ASCII text and every ASCII code point against
google).

tests/test_tokenization.py compares ids with google's FullTokenizer over real text and every code point of the
BMP and SMP, both vocabs. A sweep of all 1,112,064 code points (alone, inside a word, after "É", before "Σ")
differs in one case: U+1171E before a final Σ, uncased, because the regex engine's Case_Ignorable table is
newer than Python's. Characters unassigned in Python's Unicode but assigned in the Rust tables (55 lowercase
mappings, 1 decomposition) are changed differently but are [UNK] either way with google's vocabs. google's own
ids move with the Python version in the same places.
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import unicodedata
from dataclasses import dataclass

import numpy as np
from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

from pipeline.text import unicode_classes

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
UNK = "[UNK]"
MAX_CHARS_PER_WORD = 200  # google's WordpieceTokenizer default: longer words become one [UNK]

# google's _is_chinese_char ranges ("CJK Unified Ideographs" and friends), inclusive.
_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
               (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))

# Python's str.lower() maps a capital sigma to final 'ς' when a cased letter precedes it (case-ignorable
# characters such as ' or a combining mark may sit between) and no cased letter follows (same skipping).
# google lowercases whitespace-separated tokens, and a space is neither cased nor case-ignorable, so the
# context never crosses a token boundary here either. The Σ comes first so the regex engine can scan for it.
_FINAL_SIGMA = r"Σ(?<=\p{Cased}\p{Case_Ignorable}*Σ)(?!\p{Case_Ignorable}*\p{Cased})"


def vocab_bytes(path: str) -> bytes:
    """A vocab.txt's bytes, local or any path Beam's FileSystems read."""
    from apache_beam.io.filesystems import FileSystems   # deferred: Beam (~1 s) for importers that read no vocab

    with FileSystems.open(path) as f:
        return f.read()


def parse_vocab(raw: bytes) -> list[str]:
    """google's vocab.txt (its bytes) as a list, index = id.

    Follows google's load_vocab: each line is stripped of surrounding whitespace, and a repeated token keeps
    its first id without using up a new one (so ids equal line numbers exactly when the file has no repeats).
    """
    lines = raw.decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    seen: set[str] = set()
    vocab = []
    for line in lines:
        token = line.strip()
        if token not in seen:
            seen.add(token)
            vocab.append(token)
    return vocab


def read_vocab(path: str) -> list[str]:
    """google's vocab.txt at `path` as a list, index = id (parse_vocab)."""
    return parse_vocab(vocab_bytes(path))


def vocab_sha256(path: str) -> str:
    return hashlib.sha256(vocab_bytes(path)).hexdigest()


def _char_class(codepoints: list[int]) -> str:
    """A regex character class matching exactly `codepoints` (sorted), as ranges."""
    parts, i = [], 0
    while i < len(codepoints):
        j = i
        while j + 1 < len(codepoints) and codepoints[j + 1] == codepoints[j] + 1:
            j += 1
        lo, hi = codepoints[i], codepoints[j]
        parts.append(f"\\x{{{lo:X}}}" if lo == hi else f"\\x{{{lo:X}}}-\\x{{{hi:X}}}")
        i = j + 1
    return "[" + "".join(parts) + "]"


def stands_alone(ch: str) -> bool:
    """google's _is_punctuation or _is_chinese_char: the character is always a word of its own."""
    return _stands_alone(ord(ch), unicodedata.category(ch))


def _stands_alone(cp: int, category: str) -> bool:
    return (category[0] == "P" or 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126
            or (0x3400 <= cp <= 0x2FA1F and any(lo <= cp <= hi for lo, hi in _CJK_RANGES)))


@functools.lru_cache(maxsize=None)
def _google_char_classes() -> dict[str, str]:
    """google's character sets as regex classes for this Python's Unicode version: shipped precomputed in
    pipeline/text/unicode_classes.py for the versions we know (computing them takes ~1 s a process, and every Beam
    worker builds a tokenizer), computed from unicodedata for any other."""
    return unicode_classes.CLASSES.get(unicodedata.unidata_version) or compute_char_classes()


def compute_char_classes() -> dict[str, str]:
    """google's character sets as regex classes, from this Python's unicodedata (~1 s)."""
    drop, space, isolate, nonspacing = [], [], [], []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        ch = chr(cp)
        cat = unicodedata.category(ch)
        # _clean_text: drop NUL, U+FFFD and controls (\t \n \r count as whitespace instead) ...
        if cp == 0 or cp == 0xFFFD or (cat in ("Cc", "Cf") and ch not in "\t\n\r"):
            drop.append(cp)
        # ... map _is_whitespace to ' '; the later str.split() also splits on U+2028/U+2029 (Python isspace).
        # ' ' itself is left out: replacing it with itself only costs time.
        elif cp != 0x20 and (ch in "\t\n\r" or cat == "Zs" or ch.isspace()):
            space.append(cp)
        if _stands_alone(cp, cat):  # _is_punctuation (printable ASCII symbols too) or _is_chinese_char
            isolate.append(cp)
        # _run_strip_accents removes category Mn after NFD (not Me, not Mc).
        if cat == "Mn":
            nonspacing.append(cp)
    return {"drop": _char_class(drop), "space": _char_class(space), "isolate": _char_class(isolate),
            "nonspacing": _char_class(nonspacing)}


def write_unicode_classes(path: str = os.path.join(os.path.dirname(__file__), "unicode_classes.py")) -> None:
    """Adds this Python's Unicode version to pipeline/text/unicode_classes.py (run it under a new Python version)."""
    classes = {**unicode_classes.CLASSES, unicodedata.unidata_version: compute_char_classes()}
    head = unicode_classes.__doc__
    with open(path, "w", encoding="utf-8") as f:
        f.write(f'"""{head}"""\n\nCLASSES = {{\n')
        for version in sorted(classes):
            f.write(f"    {version!r}: {{\n")
            for name, value in classes[version].items():
                f.write(f"        {name!r}: (\n")
                for at in range(0, len(value), 80):
                    f.write(f"            {value[at:at + 80]!r}\n")
                f.write("        ),\n")
            f.write("    },\n")
        f.write("}\n")


def bert_normalizer(lowercase: bool) -> normalizers.Normalizer:
    """google's BasicTokenizer text cleanup; lowercasing also strips accents, exactly as do_lower_case does."""
    k = _google_char_classes()
    steps = [normalizers.Replace(Regex(k["drop"]), ""), normalizers.Replace(Regex(k["space"]), " ")]
    if lowercase:
        # google lowercases, then NFD, then drops Mn; CJK spacing comes first there but commutes with these
        # (NFD maps no character into or out of the CJK ranges, checked by the code point sweep test).
        steps += [normalizers.Replace(Regex(_FINAL_SIGMA), "ς"), normalizers.Lowercase(), normalizers.NFD(),
                  normalizers.Replace(Regex(k["nonspacing"]), "")]
    return normalizers.Sequence(steps)


def bert_pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    """Split on spaces; every punctuation character and CJK ideograph becomes a word of its own."""
    return pre_tokenizers.Sequence([pre_tokenizers.Split(" ", behavior="removed"),
                                    pre_tokenizers.Split(Regex(_google_char_classes()["isolate"]),
                                                         behavior="isolated")])


_ASCII_SYMBOLS = [chr(cp) for cp in range(33, 127) if stands_alone(chr(cp))]   # google's ASCII punctuation


def _wordpiece(vocab: list[str]) -> Tokenizer:
    return Tokenizer(models.WordPiece({w: i for i, w in enumerate(vocab)}, unk_token=UNK,
                                      max_input_chars_per_word=MAX_CHARS_PER_WORD))


def ascii_table(lowercase: bool) -> dict[int, str | None]:
    """google's BasicTokenizer on ASCII text as one str.translate map: _clean_text drops the controls (categories
    Cc/Cf but \t \n \r, which become ' '), do_lower_case lowercases A-Z (NFD and accent stripping change no
    ASCII character), and _run_split_on_punc isolates the 32 symbols (33-47, 58-64, 91-96, 123-126)."""
    table: dict[int, str | None] = {cp: None for cp in [*range(0, 9), 11, 12, *range(14, 32), 127]}
    table.update({cp: " " for cp in (9, 10, 13)})
    table.update({ord(c): f" {c} " for c in _ASCII_SYMBOLS})
    if lowercase:
        table.update({cp: chr(cp + 32) for cp in range(65, 91)})
    return table


_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")   # dropped by google (\t \n \r are spaces)


def _ascii_texts(texts: list[str], tokenizer: "WordPieces") -> list[str]:
    """ASCII texts as `tokenizer.table` maps them, the common case done on all of them joined: one lower() and
    a str.replace per symbol over the whole batch cost less than translate(), which takes its slow path for a
    table that maps a character to three. A text holding a control character is translated alone first (it
    then holds none, so the \x00 that joins the texts cannot come from one)."""
    texts = [t.translate(tokenizer.table) if _ASCII_CONTROL.search(t) else t for t in texts]
    joined = "\x00".join(texts)
    if tokenizer.lowercase:
        joined = joined.lower()
    for symbol in _ASCII_SYMBOLS:
        if symbol in joined:
            joined = joined.replace(symbol, f" {symbol} ")
    return joined.split("\x00")


@dataclass(frozen=True)
class WordPieces:
    """google's FullTokenizer as `tokenizers` pipelines: `general` for any text (module doc), `ascii` (split on
    spaces only) for ASCII text passed through `table` first."""
    general: Tokenizer
    ascii: Tokenizer
    table: dict
    lowercase: bool


def build_tokenizer(vocab: list[str], lowercase: bool) -> WordPieces:
    """A tokenizer that maps text to google's WordPiece ids (no special tokens added; "[CLS]" in text is split
    into '[', 'cls', ']' as google does). Build it once per worker: the character classes take ~1 s."""
    general = _wordpiece(vocab)
    general.normalizer = bert_normalizer(lowercase)
    general.pre_tokenizer = bert_pre_tokenizer()
    ascii_only = _wordpiece(vocab)
    ascii_only.pre_tokenizer = pre_tokenizers.WhitespaceSplit()   # only ' ' is left after the table
    return WordPieces(general, ascii_only, ascii_table(lowercase), lowercase)


def tokenize_sentences(tokenizer: WordPieces | Tokenizer, sentences: list[str]) -> list[np.ndarray]:
    """Ids of each sentence, (n_i,) int32; ASCII sentences in one batch, the others in another (a bare HF
    Tokenizer takes them all)."""
    if isinstance(tokenizer, Tokenizer):
        return [np.asarray(e.ids, dtype=np.int32) for e in tokenizer.encode_batch(sentences, add_special_tokens=False)]
    out: list[np.ndarray] = [None] * len(sentences)   # type: ignore[list-item]
    plain = [i for i, s in enumerate(sentences) if s.isascii()]   # O(1) a string in CPython
    other = [i for i, s in enumerate(sentences) if not s.isascii()]
    for rows, tok, texts in ((plain, tokenizer.ascii, lambda: _ascii_texts([sentences[i] for i in plain], tokenizer)),
                             (other, tokenizer.general, lambda: [sentences[i] for i in other])):
        if rows:
            for i, e in zip(rows, tok.encode_batch(texts(), add_special_tokens=False)):
                out[i] = np.asarray(e.ids, dtype=np.int32)
    return out


def word_starts(vocab: list[str]) -> np.ndarray:
    """(V,) bool: True for ids that begin a word, False for '##' continuation pieces."""
    return np.array([not w.startswith("##") for w in vocab], dtype=bool)
