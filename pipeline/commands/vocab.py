"""`bertprep vocab`: learn a WordPiece vocab.txt in google's format from extracted documents, train a tokenizer.json
(WordPiece, byte-level BPE or Unigram) from them, or give a tokenizer.json BERT's special tokens.

    bertprep vocab --input out/documents --output vocab.txt [--vocab-size 30522] [--cased] [--unused 0]
                   [--sample-docs N --seed 12345] [--min-frequency 2] [--limit-alphabet 1000]
    bertprep vocab --input out/documents --model wordpiece|bpe|unigram --output tokenizer.json
                   [--vocab-size 30522] [--cased] [--pad-to-multiple 64] [--sample-docs N --seed 12345]
                   [--min-frequency 2 (wordpiece, bpe)] [--limit-alphabet 1000 (wordpiece)]
    bertprep vocab --extend IN.json --output OUT.json [--pad-to-multiple 64]

--model (`train_tokenizer`, at the end) learns from the paragraphs of the documents step 1 selects, in its order, and
writes a tokenizer.json with [PAD] [UNK] [CLS] [SEP] [MASK] at ids 0-4 and BERT's pair template
(pipeline/text/training.py): wordpiece is steps 2 to 4 below with google's normalizer and pre-tokenizer in the file;
bpe a byte-level BPE as GPT-2's and OLMo's (case kept: --cased is refused); unigram a SentencePiece-style Unigram
with Metaspace. --vocab-size counts the trained tokens, specials included; --pad-to-multiple N then adds [unusedK]
up to a multiple of N, as --extend does. A flag the model's trainer has no use for is refused, never ignored.

--extend (`extend`, at the end) reads a `tokenizers` tokenizer.json (GPT-2's or OLMo's byte-level BPE, a Unigram,
a WordPiece) and writes it with [UNK] [CLS] [SEP] [PAD] [MASK] added as special tokens, BERT's pair template, and
with --pad-to-multiple unused tokens to a multiple of N (pipeline/text/subwords.py), as ModernBERT extended OLMo's.

Steps, each a function below:
  1. `select_documents`: the documents of --input (a directory written by `extract`, or globs of
     documents-*.jsonl.gz), all of them or, with --sample-docs N, the N whose sha256(seed, id) is smallest:
     the same sample whatever the sharding or order of the input (two passes; only the N ids are held).
  2. `count_words`: each paragraph through build_tokenizer's own normalizer and pre-tokenizer (lowercase and
     accents stripped unless --cased), so the vocab is learned on exactly the words the tokenizer will see.
  3. `choose_alphabet`: the --limit-alphabet most frequent characters (ties by code point); words holding any
     other character are left out, since google's WordPiece makes such a word [UNK] whole anyway.
  4. `train`: tokenizers' WordPieceTrainer (count-based merges, '##' continuations). Every kept character
     gets its '##' form too, as in google's vocabs, except punctuation and CJK ideographs, which the
     pre-tokenizer always cuts off alone. Determinism: the trainer breaks ties in merge counts by symbol id,
     and it numbers new '##c' symbols in hash-map order, which changes from process to process; handing it
     the sorted '##c' symbols up front fixes every id, so equal input gives an identical vocab.txt.
  5. `layout`: google's order of special tokens with N [unused] slots: [PAD], [unused0..min(N,99)-1], [UNK],
     [CLS], [SEP], [MASK], [unusedK..N-1]. --unused 994 gives bert-base-uncased's exact layout ([UNK]=100,
     [CLS]=101, [SEP]=102, [MASK]=103). The default is 0 ([PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4): every
     row of the embedding is trained, and a later fine-tune can grow the vocab instead of renaming slots.
     --vocab-size counts everything in the file, slots included.

Writes --output (one token per line, UTF-8; a tokenizer.json with --model or --extend) and --output + ".json":
sha256 and size of the file, casing, special token ids, every parameter, and counts (documents seen and used,
paragraphs, words, word types, words left out for rare characters).
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import heapq
import itertools
import json
import sys
from typing import Iterable, Iterator

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from tokenizers import Tokenizer

from pipeline.formats import manifest
from pipeline.formats.documents import Document, read_gzip_jsonl
from pipeline.commands.flags import positive_int
from pipeline.text import subwords, tokenization, training

GOOGLE_UNUSED_BEFORE_UNK = 99  # google puts [unused0..98] between [PAD] and [UNK]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Adds every `bertprep vocab` flag to `p`."""
    p.add_argument("--input",
                   help="an `extract` output directory, or GLOB[,GLOB...] of documents-*.jsonl.gz (or --extend)")
    p.add_argument("--output", required=True,
                   help="vocab.txt (with --model or --extend: tokenizer.json) to write (local path or gs://...); "
                        "also OUTPUT.json")
    p.add_argument("--model", choices=training.MODELS,
                   help="with --input: train a tokenizer.json instead of vocab.txt: wordpiece (BERT's, '##' "
                        "continuations), bpe (byte-level, as GPT-2 and OLMo), unigram (SentencePiece's, Metaspace); "
                        "[PAD] [UNK] [CLS] [SEP] [MASK] at ids 0-4 and BERT's pair template")
    p.add_argument("--extend", metavar="IN.json",
                   help="instead of learning from --input: a tokenizer.json to give BERT's special tokens ([UNK] "
                        "[CLS] [SEP] [PAD] [MASK], those it lacks) and its [CLS] A [SEP] B [SEP] template")
    p.add_argument("--pad-to-multiple", type=positive_int, metavar="N",
                   help="with --extend or --model: [unusedK] tokens until the vocabulary's size is a multiple of N "
                        "(64, as ModernBERT: embedding rows that suit the GPU's matmuls; default: no unused tokens)")
    p.add_argument("--vocab-size", type=int, default=30522,
                   help="lines of vocab.txt, special and unused included (with --model: trained tokens, special "
                        "included, before --pad-to-multiple)")
    p.add_argument("--cased", action="store_true",
                   help="keep case and accents (default: lowercase, strip accents; unigram: lowercase; not with bpe, "
                        "which keeps case)")
    p.add_argument("--unused", type=int, default=0,
                   help="[unusedN] placeholder slots, at google's positions (994 = bert-base-uncased's layout; not "
                        "with --model: --pad-to-multiple)")
    p.add_argument("--sample-docs", type=int, default=0, help="learn from this many documents (0: all)")
    p.add_argument("--seed", type=int, default=12345, help="picks the --sample-docs sample")
    p.add_argument("--min-frequency", type=int, default=None,
                   help=f"merges need a pair seen this often (default {TRAINER_DEFAULTS['min_frequency']}; "
                        "vocab.txt, wordpiece, bpe)")
    p.add_argument("--limit-alphabet", type=int, default=None,
                   help=f"most frequent characters kept (default {TRAINER_DEFAULTS['limit_alphabet']}; vocab.txt, "
                        "wordpiece)")
    p.add_argument("-v", "--verbose", action="store_true", help="(accepted for symmetry with the other commands)")


def argument_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the flags' values, or None."""
    if (args.input is None) == (args.extend is None):
        return ("give one of --input (learn a vocab.txt, or with --model a tokenizer.json, from documents) and --extend "
                "(add BERT's tokens to a tokenizer)")
    if args.extend is not None and args.model is not None:
        return "--model trains a tokenizer from --input; --extend keeps IN.json's own model and vocabulary"
    if args.extend is not None:
        given = [f"--{name.replace('_', '-')}" for name in LEARNING if getattr(args, name) != LEARNING[name]]
        if given:
            return (f"{given[0]} is for learning a vocab.txt from --input; --extend keeps the tokenizer's own "
                    "vocabulary and casing")
        return None
    if args.pad_to_multiple is not None and args.model is None:
        return "--pad-to-multiple goes with --extend or --model (a learned vocab.txt has --unused slots instead)"
    if args.vocab_size < len(tokenization.SPECIAL_TOKENS) + args.unused + 1:
        return f"--vocab-size {args.vocab_size} leaves no room beside {args.unused} unused and the special tokens"
    for name in ("unused", "sample_docs", "min_frequency"):
        if (getattr(args, name) or 0) < 0:
            return f"--{name.replace('_', '-')} must be >= 0"
    if args.limit_alphabet is not None and args.limit_alphabet < 1:
        return "--limit-alphabet must be >= 1"
    return model_problem(args) if args.model is not None else None


def model_problem(args: argparse.Namespace) -> str | None:
    """What --model's trainer cannot do with the flags: each one it would ignore, or a size it cannot fill."""
    if args.unused:
        return "--unused places a vocab.txt's [unused] slots; with --model, use --pad-to-multiple N"
    idle = [name for name in TRAINER_DEFAULTS if getattr(args, name) is not None and name in IDLE[args.model]]
    if idle:
        return f"--{idle[0].replace('_', '-')} means nothing to --model {args.model}: {IDLE[args.model][idle[0]]}"
    if args.model == "bpe" and args.cased:
        return "--cased: byte-level BPE has no normalizer and always keeps case"
    if args.model == "bpe" and args.vocab_size <= len(training.SPECIALS) + training.BYTES:
        return (f"--vocab-size {args.vocab_size} leaves no room for merges beside byte-level BPE's "
                f"{training.BYTES} bytes and the {len(training.SPECIALS)} special tokens")
    return None


# the learning flags and their defaults: with --extend, any of them given is refused, never ignored (None: the
# trainer's default, TRAINER_DEFAULTS, taken in `run`)
LEARNING = {"vocab_size": 30522, "cased": False, "unused": 0, "sample_docs": 0, "seed": 12345, "min_frequency": None,
            "limit_alphabet": None}
TRAINER_DEFAULTS = {"min_frequency": 2, "limit_alphabet": 1000}
# the trainer flags a --model has no use for, and why: given, they are refused
IDLE = {
    "wordpiece": {},
    "bpe": {"limit_alphabet": "its alphabet is the 256 bytes, all kept"},
    "unigram": {"min_frequency": "its trainer has no such option (it prunes pieces by likelihood)",
                "limit_alphabet": "its trainer keeps every character of the input"},
}


def input_files(spec: str) -> list[str]:
    """Document files of an `extract` directory (from its manifest) or of globs, in a stable order."""
    return manifest.open_output(spec, (manifest.DOCUMENTS,), foreign=True,
                                advice="name its documents-*.jsonl.gz files with a glob to read them anyway").files


def read_documents(files: list[str]) -> Iterator[Document]:
    for path in files:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:  # gzip is ours to read
            yield from read_gzip_jsonl(f, path)


def sample_key(seed: int, doc_id: str) -> int:
    """A document's place in the seeded random order: independent of where and when it is read."""
    return int.from_bytes(hashlib.sha256(f"{seed}\0{doc_id}".encode()).digest()[:8], "big")


def select_documents(files: list[str], sample_docs: int, seed: int, counts: collections.Counter) -> Iterator[Document]:
    """All documents, or those whose ids are among the `sample_docs` smallest sample keys (all copies of an id)."""
    if sample_docs <= 0:
        for doc in read_documents(files):
            counts["documents_seen"] += 1
            yield doc
        return
    smallest: list[tuple[int, str]] = []  # the sample so far, as a max-heap of (-key, id)
    in_sample: set[str] = set()
    for doc in read_documents(files):
        counts["documents_seen"] += 1
        if doc.id in in_sample:  # a repeated id has the same key: it is in the sample already, or never
            continue
        item = (-sample_key(seed, doc.id), doc.id)
        if len(smallest) < sample_docs:
            heapq.heappush(smallest, item)
        elif item > smallest[0]:
            in_sample.discard(heapq.heapreplace(smallest, item)[1])
        else:
            continue
        in_sample.add(doc.id)
    chosen = {doc_id for _, doc_id in smallest}
    yield from (doc for doc in read_documents(files) if doc.id in chosen)


def paragraphs(documents: Iterable[Document], counts: collections.Counter) -> Iterator[str]:
    """The documents' paragraphs, in order: the text the pipeline encodes."""
    for doc in documents:
        counts["documents"] += 1
        for paragraph in doc.paragraphs:
            counts["paragraphs"] += 1
            yield paragraph


def count_words(documents: Iterable[Document], lowercase: bool, counts: collections.Counter) -> collections.Counter:
    """Word -> occurrences, words as build_tokenizer's normalizer and pre-tokenizer produce them."""
    normalizer, pre_tokenizer = tokenization.bert_normalizer(lowercase), tokenization.bert_pre_tokenizer()
    words: collections.Counter = collections.Counter()
    for paragraph in paragraphs(documents, counts):
        words.update(w for w, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(paragraph)))
    counts["words"] = sum(words.values())
    counts["word_types"] = len(words)
    return words


def choose_alphabet(words: collections.Counter, limit: int, counts: collections.Counter) -> list[str]:
    """The `limit` most frequent characters, sorted; drops from `words` every word with another character."""
    chars: collections.Counter = collections.Counter()
    for word, n in words.items():
        for c in word:
            chars[c] += n
    alphabet = sorted(sorted(chars, key=lambda c: (-chars[c], c))[:limit])
    keep = set(alphabet)
    counts["words_with_rare_characters"] += 0  # present in the metadata even when none
    for word in [w for w in words if not keep.issuperset(w)]:
        counts["words_with_rare_characters"] += words.pop(word)
    counts["alphabet"] = len(alphabet)
    return alphabet


def train(words: collections.Counter, alphabet: list[str], size: int, min_frequency: int) -> list[str]:
    """WordPiece tokens learned from `words` (special tokens first, as SPECIAL_TOKENS): `size` of them, or
    fewer when the merges run out."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers   # the trainer, for this step only

    continuations = ["##" + c for c in alphabet if not tokenization.stands_alone(c)]
    fixed = list(tokenization.SPECIAL_TOKENS) + continuations
    if size < len(fixed) + len(alphabet):
        raise ValueError(f"a vocab of {size} trained tokens cannot hold the {len(alphabet)} characters, their "
                         f"{len(continuations)} '##' forms and the special tokens: raise --vocab-size or lower "
                         "--limit-alphabet")
    tok = Tokenizer(models.WordPiece(unk_token=tokenization.UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="removed")  # the words are normalized already
    trainer = trainers.WordPieceTrainer(vocab_size=size, min_frequency=min_frequency, show_progress=False,
                                        special_tokens=fixed, continuing_subword_prefix="##")

    def repeated_words() -> Iterator[str]:
        for word in sorted(words):
            n = words[word]
            while n > 0:
                k = min(n, 4096)
                yield " ".join([word] * k)
                n -= k

    tok.train_from_iterator(repeated_words(), trainer)
    vocab = tok.get_vocab()
    return sorted(vocab, key=vocab.__getitem__)


def layout(trained: list[str], unused: int) -> list[str]:
    """google's order: [PAD], [unused0..], [UNK], [CLS], [SEP], [MASK], [unused..], then the learned tokens."""
    pad, unk, cls, sep, mask = tokenization.SPECIAL_TOKENS
    assert trained[:5] == [pad, unk, cls, sep, mask]
    before = min(unused, GOOGLE_UNUSED_BEFORE_UNK)
    slots = [f"[unused{i}]" for i in range(unused)]
    return [pad] + slots[:before] + [unk, cls, sep, mask] + slots[before:] + trained[5:]


def check(vocab: list[str]) -> None:
    """What google's load_vocab needs to read the file back with ids = line numbers."""
    if len(set(vocab)) != len(vocab):
        raise ValueError("vocab has repeated tokens")
    bad = [t for t in vocab if not t or t != t.strip() or "\n" in t or "\r" in t]
    if bad:
        raise ValueError(f"vocab tokens google's reader would change: {bad[:5]!r}")


def run(args: argparse.Namespace) -> int:
    """`bertprep vocab`: steps 1 to 5, then vocab.txt and its .json. Bad flag values exit 2 as argparse's own do."""
    problem = argument_problem(args)
    if problem:
        print(f"bertprep vocab: error: {problem}", file=sys.stderr)
        raise SystemExit(2)
    if args.extend is not None:
        return extend(args)
    for name, value in TRAINER_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.model is not None:
        return train_tokenizer(args)
    counts: collections.Counter = collections.Counter()
    documents = select_documents(input_files(args.input), args.sample_docs, args.seed, counts)
    words = count_words(documents, lowercase=not args.cased, counts=counts)
    if not words:
        print("bertprep vocab: no words in the input documents", file=sys.stderr)
        return 1
    alphabet = choose_alphabet(words, args.limit_alphabet, counts)
    vocab = layout(train(words, alphabet, args.vocab_size - args.unused, args.min_frequency), args.unused)
    check(vocab)

    data = ("\n".join(vocab) + "\n").encode("utf-8")
    with FileSystems.create(args.output, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.write(data)
    info = {
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": len(vocab),
        "cased": args.cased,
        "lowercase": not args.cased,
        "strip_accents": not args.cased,
        "special_tokens": {t: vocab.index(t) for t in tokenization.SPECIAL_TOKENS},
        "unused": args.unused,
        "parameters": {"input": args.input, "vocab_size": args.vocab_size, "sample_docs": args.sample_docs,
                       "seed": args.seed, "min_frequency": args.min_frequency,
                       "limit_alphabet": args.limit_alphabet},
        "counts": dict(sorted(counts.items())),
        "created_by": f"bertprep {manifest.VERSION}",
    }
    with FileSystems.create(args.output + ".json", compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.write((json.dumps(info, indent=2, ensure_ascii=False) + "\n").encode())
    short = "" if len(vocab) == args.vocab_size else f" (asked for {args.vocab_size}: the merges ran out)"
    print(f"wrote {args.output}: {len(vocab)} tokens{short} from {counts['documents']} documents, "
          f"{counts['words']} words")
    return 0


def extend(args: argparse.Namespace) -> int:
    """`bertprep vocab --extend`: the tokenizer with BERT's tokens (pipeline/text/subwords.py) to --output, and
    --output + ".json" with what was added and the special ids; a file that is no tokenizer.json is one line."""
    try:
        tokenizer, added = subwords.extend(subwords.load(args.extend), args.pad_to_multiple)
        specials = subwords.find_specials(tokenizer, args.output)
    except subwords.TokenizerError as e:
        print(f"bertprep vocab: error: --extend {e}", file=sys.stderr)
        return 2
    size = write_tokenizer(args.output, tokenizer, specials, added,
                           {"extend": args.extend, "pad_to_multiple": args.pad_to_multiple})
    print(f"wrote {args.output}: {size:,} tokens ({subwords.model_type(tokenizer)}), {len(added)} added "
          f"({', '.join(added[:5])}{', ...' if len(added) > 5 else ''}); [CLS] {specials.cls}, [SEP] {specials.sep}, "
          f"[MASK] {specials.mask}, [PAD] {specials.pad}")
    return 0


def train_tokenizer(args: argparse.Namespace) -> int:
    """`bertprep vocab --model`: a tokenizer.json trained on the paragraphs of step 1's documents
    (pipeline/text/training.py) to --output, and --output + ".json" as --extend writes it, with the counts."""
    counts: collections.Counter = collections.Counter()
    documents = select_documents(input_files(args.input), args.sample_docs, args.seed, counts)
    parameters = {"input": args.input, "model": args.model, "vocab_size": args.vocab_size, "cased": args.cased,
                  "pad_to_multiple": args.pad_to_multiple, "sample_docs": args.sample_docs, "seed": args.seed}
    if args.model == "wordpiece":
        words = count_words(documents, lowercase=not args.cased, counts=counts)
        if not words:
            print("bertprep vocab: no words in the input documents", file=sys.stderr)
            return 1
        alphabet = choose_alphabet(words, args.limit_alphabet, counts)
        trained = training.wordpiece(train(words, alphabet, args.vocab_size, args.min_frequency), not args.cased)
        parameters.update(min_frequency=args.min_frequency, limit_alphabet=args.limit_alphabet)
    else:
        texts = paragraphs(documents, counts)
        first = next(texts, None)
        if first is None:
            print("bertprep vocab: no paragraphs in the input documents", file=sys.stderr)
            return 1
        texts = itertools.chain([first], texts)
        if args.model == "bpe":
            trained = training.train_bpe(texts, args.vocab_size, args.min_frequency)
            parameters.update(min_frequency=args.min_frequency)
        else:
            trained = training.train_unigram(texts, args.vocab_size, lowercase=not args.cased)
    learned = trained.get_vocab_size(with_added_tokens=True)
    tokenizer, added = training.with_specials(trained, args.pad_to_multiple)
    specials = subwords.find_specials(tokenizer, args.output)
    size = write_tokenizer(args.output, tokenizer, specials, added, parameters, counts)
    short = "" if learned == args.vocab_size else f" (asked for {args.vocab_size}: the input ran out)"
    print(f"wrote {args.output}: {size:,} tokens ({subwords.model_type(tokenizer)}), {learned:,} trained{short}"
          f"{f', {len(added)} unused' if added else ''}, from {counts['documents']} documents; [CLS] {specials.cls}, "
          f"[SEP] {specials.sep}, [MASK] {specials.mask}, [PAD] {specials.pad}")
    return 0


def write_tokenizer(path: str, tokenizer: Tokenizer, specials: subwords.Specials, added: list[str], parameters: dict,
                    counts: collections.Counter | None = None) -> int:
    """Writes the tokenizer.json and its PATH.json (sha256, size, model, casing, special ids, tokens added,
    parameters, counts); returns its size."""
    data = tokenizer.to_str(pretty=True).encode("utf-8")
    with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.write(data)
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    info = {"sha256": hashlib.sha256(data).hexdigest(), "size": size, "model": subwords.model_type(tokenizer),
            "lowercase": subwords.lowercases(tokenizer), "special_ids": specials.to_json(), "added": added,
            "parameters": parameters}
    if counts is not None:
        info["counts"] = dict(sorted(counts.items()))
    info["created_by"] = f"bertprep {manifest.VERSION}"
    with FileSystems.create(path + ".json", compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.write((json.dumps(info, indent=2, ensure_ascii=False) + "\n").encode())
    return size


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bertprep vocab", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))
