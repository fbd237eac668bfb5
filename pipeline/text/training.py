"""Tokenizers trained from documents for `bertprep vocab --model` (issue 37, part 6): a tokenizer.json with BERT's
[PAD] [UNK] [CLS] [SEP] [MASK] at ids 0-4 (special, never split or normalized) and its pair template, so that
subwords.find_specials finds every role; the same file from the same input.

    --model    normalizer                              pre-tokenizer, decoder          trainer
    bpe        none (bytes as typed: case kept)        ByteLevel, no prefix space      BpeTrainer, the 256 bytes
               as GPT-2's and OLMo's                                                   as its alphabet, no [UNK]
    unigram    Nmt, NFKC, runs of spaces as one        Metaspace ('▁' before a word)   UnigramTrainer, [UNK]
               [, Lowercase]: SentencePiece's nmt_nfkc
    wordpiece  google's BasicTokenizer (tokenization.bert_normalizer, bert_pre_tokenizer), '##' continuations,
               a decoder that joins words with spaces; the vocab is vocab.py's WordPiece, learned as for vocab.txt

Unigram's whitespace: the pipeline encodes a paragraph's first sentence after a blank line (subwords.PARAGRAPH_BREAK);
Nmt makes it spaces and the spaces one, as SentencePiece's default normalization does, so a segment decodes to its
text with whitespace collapsed and the break costs no token.

Determinism. BpeTrainer counts and breaks ties by ids, all fixed: the same file in every process. UnigramTrainer's
is not: its E-step sums the words in hash-map order, which changes from process to process (scores differ by up to
~4e-11 on the test corpus, and so may the order of pieces; one thread, RAYON_NUM_THREADS=1 or
TOKENIZERS_PARALLELISM=false, changes nothing), and each character its EM dropped comes back scored the lowest
score + k * 1e-4 with k in hash-set order. `canonical_unigram` gives those characters the same scores in code point
order, rounds every score to SCORE_DECIMALS and numbers the pieces by (score, piece). On the mixed-language test
corpus (6,000 pieces) rounding to 1e-3 changes the segmentation of 1 of its 13,262 word types (a near tie). What
is left to chance: a score within its float noise of a rounding boundary (at ~4e-11, about 1 piece in 10^7: one
file of 30,000 pieces in ~400), or a near tie in the trainer's pruning that the noise breaks; the piece sets were
equal in every run so far. tests/test_vocab_models.py trains in two processes.
"""
from __future__ import annotations

import json
from typing import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from pipeline.text import subwords, tokenization

MODELS = ("wordpiece", "bpe", "unigram")
SPECIALS = tokenization.SPECIAL_TOKENS   # [PAD] [UNK] [CLS] [SEP] [MASK]: ids 0-4, vocab.txt's default layout
BYTES = 256   # byte-level BPE's alphabet
SCORE_DECIMALS = 3   # a Unigram score's precision in the file (module doc)
PENALTY = 0.0001   # UnigramTrainer's step between the scores of the characters its EM dropped


def unigram_normalizer(lowercase: bool) -> normalizers.Normalizer:
    """SentencePiece's nmt_nfkc as `tokenizers` spells it (Nmt: controls dropped, \\t \\n \\r as spaces), spaces
    collapsed, and lowercased unless cased."""
    steps = [normalizers.Nmt(), normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")]
    return normalizers.Sequence(steps + ([normalizers.Lowercase()] if lowercase else []))


def train_bpe(texts: Iterable[str], size: int, min_frequency: int) -> Tokenizer:
    """Byte-level BPE of `size` tokens, the specials and the 256 bytes included, learned from `texts`."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=size, min_frequency=min_frequency, special_tokens=list(SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def train_unigram(texts: Iterable[str], size: int, lowercase: bool) -> Tokenizer:
    """SentencePiece-style Unigram of at most `size` pieces, the specials included, learned from `texts`; its
    scores and ids canonical (module doc). ValueError when the input's characters alone pass `size`."""
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = unigram_normalizer(lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=size, special_tokens=list(SPECIALS), unk_token=tokenization.UNK,
                                      show_progress=False)
    try:
        tokenizer.train_from_iterator(texts, trainer)
    except Exception as e:   # tokenizers raises a bare Exception
        if "not large enough to contain all chars" not in str(e):
            raise
        raise ValueError(f"a vocab of {size} tokens cannot hold every character of the input (a Unigram keeps "
                         "them all) beside the special tokens: raise --vocab-size") from None
    return canonical_unigram(tokenizer)


def canonical_unigram(tokenizer: Tokenizer) -> Tokenizer:
    """The trained Unigram with the scores and ids every process gives: the characters scored lowest + k * PENALTY
    (the trainer's order) rescored in code point order, every score rounded to SCORE_DECIMALS, and the pieces after
    the specials ordered by (-score, piece)."""
    spec = json.loads(tokenizer.to_str())
    pieces = spec["model"]["vocab"]   # [[piece, score], ...], the specials first
    fixed, learned = pieces[:len(SPECIALS)], pieces[len(SPECIALS):]
    assert [p for p, _ in fixed] == list(SPECIALS), fixed
    lowest = min(score for _, score in learned)
    steps, penalty = [], 0.0
    for _ in learned:   # lowest + k * PENALTY exactly as the trainer sums them, bit for bit
        steps.append(lowest + penalty)
        penalty += PENALTY
    at_steps = set(steps)
    dropped = sorted(p for p, score in learned if len(p) == 1 and score in at_steps)
    scores = dict(learned) | dict(zip(dropped, steps))
    learned = sorted(((p, round(scores[p], SCORE_DECIMALS)) for p, _ in learned), key=lambda ps: (-ps[1], ps[0]))
    spec["model"]["vocab"] = fixed + [list(ps) for ps in learned]
    spec["model"]["unk_id"] = SPECIALS.index(tokenization.UNK)
    return Tokenizer.from_str(json.dumps(spec, ensure_ascii=False))


def wordpiece(vocab: list[str], lowercase: bool) -> Tokenizer:
    """A WordPiece tokenizer.json on vocab.py's learned tokens (specials first), with google's text cleanup and
    word splitting, as tokenization.build_tokenizer's general path."""
    tokenizer = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token=tokenization.UNK,
                                           continuing_subword_prefix="##",
                                           max_input_chars_per_word=tokenization.MAX_CHARS_PER_WORD))
    tokenizer.normalizer = tokenization.bert_normalizer(lowercase)
    tokenizer.pre_tokenizer = tokenization.bert_pre_tokenizer()
    # no cleanup: HF's rewrites " do not" as " don't" and " ' " as "'", text that encodes to other ids
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    return tokenizer


def with_specials(tokenizer: Tokenizer, pad_to_multiple: int | None) -> tuple[Tokenizer, list[str]]:
    """(the trained tokenizer with BERT's specials as special added tokens at their ids 0-4 and BERT's template,
    the [unusedK] tokens added up to a multiple of `pad_to_multiple`): subwords.extend, with nothing left to add
    but the template and the unused tokens."""
    tokenizer.add_special_tokens([subwords.bert_special(t) for t in SPECIALS])
    assert [tokenizer.token_to_id(t) for t in SPECIALS] == list(range(len(SPECIALS)))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return subwords.extend(tokenizer, pad_to_multiple)
