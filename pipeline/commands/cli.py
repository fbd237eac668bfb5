"""`bertprep`: the one console script. Parses options once and hands plain values to the stages.

Each command is one row of COMMANDS: (help, add_arguments, handler). A command's parser accepts exactly its own
flags; the Beam commands (extract, pairs, mask, prepare) also take every flag Beam's PipelineOptions defines
(`--runner`, `--direct_num_workers`, `--project`, ...), which go to Beam after the `--preset` flags. Anything
else ends in one line naming the flag and the closest known one. A failure a user can cause ends in one line on
stderr and a non-zero exit; `--debug` (or `-v`) shows the traceback.
"""
from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import os
import re
import signal
import sys
from typing import Callable

from corpora import KINDS, RECORD_KINDS
from pipeline.algorithms import packing, pairs
from pipeline.commands import flags
from pipeline.commands.flags import (nonnegative_int, positive_float, positive_int, probability, readable_file,
                                     vocab_file)

BEAM_COMMANDS = ("extract", "pairs", "mask", "prepare", "pack", "dedup", "decontaminate", "convert")
GOOGLE_DUPE_FACTOR = 10   # create_pretraining_data.py's default


# ---------------------------------------------------------------------------------------------- flag groups

def _add_output(p: flags.Parser, shuffles: bool = True) -> None:
    """--output and how the job runs; `shuffles`: the flags of the shuffle, for the jobs that have one."""
    p.add_argument("--output", required=True, help="output directory (local path or gs://...)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output set in --output")
    p.add_argument("--preset", default="local", help="Beam option preset from beam_options/ (local, local-1, "
                                                     "...) or a file of Beam flags; explicit Beam flags win")
    p.add_argument("--gcs-bucket", default=None,
                   help="dataflow preset: gs://BUCKET[/prefix] for temp_location and staging_location")
    p.add_argument("--retries", type=nonnegative_int, default=0,
                   help="local runners: run the whole pipeline again up to N times if it fails (they do not retry a "
                        "failed bundle; Dataflow and the portable runners do, and refuse it)")
    p.add_argument("--wait", action=argparse.BooleanOptionalAction, default=None,
                   help="wait for the job to end and print its counts (default: yes, except on Dataflow). The job "
                        "publishes its output itself, manifest.json last, so a Dataflow job needs nothing of this "
                        "process once submitted; --no-wait is refused where the job runs in this process (the "
                        "local runner, LOOPBACK workers)")
    p.add_argument("-v", "--verbose", action="store_true", help="Beam's and bertprep's INFO logging; tracebacks")
    if not shuffles:
        return
    p.add_argument("--shuffle", choices=("auto", "files", "groupbykey"), default="auto",
                   help="how records are regrouped (into buckets, output files): 'files' = sorted run files on this "
                        "machine's disk, memory flat whatever the input; 'groupbykey' = the runner's GroupByKey "
                        "(Dataflow's shuffle service, Flink, Spark). auto: files on the local runner, groupbykey "
                        "on every other. groupbykey on the local runner holds all records in memory (your choice "
                        "for inputs that fit) and needs one worker (--preset local-1): Beam's multi-worker local "
                        "runner drops records of its GroupByKey. Same bytes either way; every job checks that its "
                        "shuffles delivered every record before it publishes")
    p.add_argument("--sort-buffer-mb", type=positive_float, default=16,
                   help="files shuffle: MiB of records a worker sorts per run file (default 16)")
    p.add_argument("--runs-dir", default=None,
                   help="files shuffle: local directory for run files (default: OUTPUT/.incomplete/runs for a "
                        "local output, else the system's temporary directory); removed when the job ends")


def _add_allow_incomplete(p: flags.Parser, what: str) -> None:
    p.add_argument("--allow-incomplete", action="store_true",
                   help=f"read {what} anyway (no manifest.json: its stage did not finish or it was copied in part)")


def _names(value: str) -> tuple[str, ...]:
    """"A,B" -> ("A", "B"); an empty name is refused."""
    names = tuple(name.strip() for name in value.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"a comma-separated list of names, got {value!r}")
    return names


CORPORA = KINDS
RECORD_CORPORA = RECORD_KINDS   # one document a record: their fields are named by the flags below
RECORD_FIELDS = {"text_field": "text", "id_field": "id"}   # --text-field, --id-field when a record corpus is read


def _add_corpus(p: flags.Parser) -> None:
    p.add_argument("corpus", nargs="?", choices=CORPORA, default=None,
                   help="the kind of every --input; leave it out to name a kind in each --input (KIND:GLOB)")
    p.add_argument("--input", action="append", required=True, metavar="[KIND:]GLOB[,GLOB...]",
                   help="corpus files (books: also directories; jsonl: JSON Lines, plain, .gz or .zst, as C4 and "
                        "Dolma ship them; parquet: as FineWeb and Wikipedia on the Hugging Face Hub ship them). "
                        "Several corpora in one job: leave the kind out and give one --input per kind, e.g. --input "
                        "wikipedia:enwiki-*-multistream.xml.bz2 --input books:books/ (BERT's corpus)")
    p.add_argument("--wiki-index", default=None, type=readable_file,
                   help="wikipedia: the multistream index (default: found beside the dump when present)")
    p.add_argument("--keep-disambiguation", action="store_true", help="wikipedia: keep disambiguation pages")
    p.add_argument("--disambiguation-templates", type=_names, default=(), metavar="NAME,...",
                   help="wikipedia: more templates that mark a disambiguation page, for wikis whose own the "
                        "built-in table lacks (English names and __DISAMBIG__ always count)")
    p.add_argument("--max-document-bytes", type=positive_int, default=None,
                   help="books: split books larger than this into documents of at most this size")
    p.add_argument("--skip-bad-files", action="store_true",
                   help="count and skip corrupt input files instead of failing the job")
    p.add_argument("--text-field", default=None, metavar="NAME",
                   help=f"jsonl, parquet: the field (column) of a record's text (default "
                        f"{RECORD_FIELDS['text_field']}). Blank lines in it separate paragraphs; each paragraph's "
                        "sentences are split as books' are")
    p.add_argument("--id-field", default=None, metavar="NAME",
                   help=f"jsonl, parquet: the field (column) of a record's id (default {RECORD_FIELDS['id_field']}): "
                        "document ids are KIND:FILE:ID, or KIND:FILE:N where a record has none (N: the line number "
                        "from 1, the row index from 0); an id repeated in a file gets #N (counted)")
    p.add_argument("--strict", action="store_true",
                   help="jsonl, parquet: fail on the first malformed record, naming file and line; without it each "
                        "is skipped and counted by reason (jsonl/not_json, jsonl/no_text_field, "
                        "jsonl/text_not_a_string, parquet/null_text, ...)")


def _add_pairs(p: flags.Parser) -> None:
    p.add_argument("--vocab", required=True, type=vocab_file, help="google-format vocab.txt")
    p.add_argument("--cased", action="store_true", help="cased vocab: no lowercasing, accents kept")
    p.add_argument("--max-seq-length", type=positive_int, default=128)
    p.add_argument("--dupe-factor", type=positive_int, default=5,
                   help=f"passes over each document, each with new randomness (google's default is "
                        f"{GOOGLE_DUPE_FACTOR}; BERT's data used 10 with a different mask each pass)")
    p.add_argument("--short-seq-prob", type=probability, default=None,
                   help="share of nsp/sop instances with a random shorter target length (default 0.1; not for "
                        "--objective none, whose rows are filled)")
    p.add_argument("--objective", choices=pairs.OBJECTIVES, default="nsp",
                   help="nsp: google's next-sentence pairs (default); sop: ALBERT's sentence order (B always "
                        "follows A in its document, swapped half of the time, label 1 = swapped); none: RoBERTa's "
                        "rows of whole sentences up to --max-seq-length, segment ids 0, no second objective. A "
                        "dupe pass of `none` is the same rows masked anew. Its rows are full already: --pack is "
                        "for nsp and sop")
    p.add_argument("--cross-documents", action="store_true",
                   help="with --objective none: a row goes on into the next document of its bucket after a [SEP] "
                        "(RoBERTa's FULL-SENTENCES; without it DOC-SENTENCES: a row ends with its document)")
    p.add_argument("--split-sentences", action="store_true",
                   help="with --objective none: fill every row to the last position, the sentence it cuts going on "
                        "in the next row (HF run_mlm's group_texts); without it only whole sentences, and a "
                        "sentence longer than a row is cut (counted)")
    p.add_argument("--bucket-docs", type=positive_int, default=10_000,
                   help="documents per random-next pool: random B segments come from the same bucket (google's "
                        "pool is the whole corpus; a pool of thousands is statistically the same for NSP). At "
                        "least 2; below 1,000 it is warned about")
    p.add_argument("--pair-parallelism", type=nonnegative_int, default=0,
                   help="workers that pair a corpus of few buckets, each spilling a copy of the pool, and that "
                        "tokenize an input of few files (0: the local worker count, or 32 on a distributed runner); "
                        "the output does not depend on it")


def _add_mask(p: flags.Parser) -> None:
    p.add_argument("--masked-lm-prob", type=probability, default=0.15)
    p.add_argument("--max-predictions-per-seq", type=positive_int, default=None,
                   help="predictions an instance holds at most (at most --max-seq-length). Default: max(20, "
                        "round(--max-seq-length x --masked-lm-prob)), the smallest that never caps google's count "
                        "rule (round(n x p) of an instance of n tokens) and never below google's 20: 20 at L=128, "
                        "77 at L=512 (p=0.15). A smaller value masks less than --masked-lm-prob of long instances "
                        "and is warned about")
    p.add_argument("--mask-token-prob", type=probability, default=0.8, help="chosen tokens replaced by [MASK]")
    p.add_argument("--random-token-prob", type=probability, default=0.1,
                   help="chosen tokens replaced by a random id (drawn from the non-special tokens; google draws "
                        "from the whole vocab, [CLS]/[SEP]/[PAD] included)")
    p.add_argument("--whole-word-mask", action="store_true",
                   help="mask whole words, one 80/10/10 draw per word (google draws per piece)")
    p.add_argument("--ngram-max", type=positive_int, default=1, help="mask spans of 1..n whole words (weights 1/n)")


def sequences_per_pack(text: str) -> int:
    return flags.ranged_int(text, 1, packing.MAX_SEQUENCES_PER_PACK)


def _add_pack(p: flags.Parser) -> None:
    p.add_argument("--pack", action="store_true",
                   help="write packed shards: up to --max-sequences-per-pack instances a row, no padding between "
                        "them (the trainer keeps attention inside each); the same instances as without it")
    p.add_argument("--max-sequences-per-pack", type=sequences_per_pack, default=None,
                   help=f"with --pack: instances a row may hold, 1..{packing.MAX_SEQUENCES_PER_PACK} (default "
                        f"{packing.DEFAULT_SEQUENCES_PER_PACK})")


DEDUP_DEFAULTS = {"near_threshold": 0.8, "num_perm": 256, "bands": 32, "shingle_words": 5, "min_paragraph_chars": 64,
                  "max_paragraph_copies": 1}


def jaccard_threshold(text: str) -> float:
    return flags._number(float, text, lambda v: 0 < v <= 1, "a Jaccard similarity is in (0, 1]")


def _add_dedup(p: flags.Parser, switch: bool) -> None:
    """The dedup passes' flags: `bertprep dedup`'s own, or with `switch` prepare's, which take them after --dedup."""
    if switch:
        p.add_argument("--dedup", action="store_true",
                       help="deduplicate the documents before pairing: exact and near-duplicate documents and "
                            "repeated paragraphs out (as `bertprep dedup`; its flags below need --dedup)")
    d = (lambda name: None) if switch else DEDUP_DEFAULTS.get
    p.add_argument("--no-exact", action="store_true", help="skip the exact pass (same normalized text)")
    p.add_argument("--no-near", action="store_true", help="skip the near-duplicate pass (MinHash LSH)")
    p.add_argument("--no-paragraphs", action="store_true", help="skip the repeated-paragraph pass")
    p.add_argument("--near-threshold", type=jaccard_threshold, default=d("near_threshold"),
                   help="estimated Jaccard similarity of word 5-grams that makes two documents near duplicates "
                        f"(default {DEDUP_DEFAULTS['near_threshold']})")
    p.add_argument("--num-perm", type=positive_int, default=d("num_perm"),
                   help=f"MinHash signature values per document (default {DEDUP_DEFAULTS['num_perm']})")
    p.add_argument("--bands", type=positive_int, default=d("bands"),
                   help=f"LSH bands; must divide --num-perm (default {DEDUP_DEFAULTS['bands']}: 8 rows a band; "
                        "bench/bench_dedup.py prints the curve the defaults were chosen by)")
    p.add_argument("--shingle-words", type=positive_int, default=d("shingle_words"),
                   help=f"words a shingle (default {DEDUP_DEFAULTS['shingle_words']})")
    p.add_argument("--min-paragraph-chars", type=positive_int, default=d("min_paragraph_chars"),
                   help="paragraphs shorter than this (normalized) are never dropped as repeats (default "
                        f"{DEDUP_DEFAULTS['min_paragraph_chars']})")
    p.add_argument("--max-paragraph-copies", type=positive_int, default=d("max_paragraph_copies"),
                   help="a paragraph in more documents than this is kept in the first (by id) only (default "
                        f"{DEDUP_DEFAULTS['max_paragraph_copies']})")


def fraction(text: str) -> float:
    return flags._number(float, text, lambda v: 0 < v < 1, "a fraction of the documents is in (0, 1)")


def _add_split(p: flags.Parser) -> None:
    """pairs, prepare: the validation split, by document (pipeline/algorithms/split.py)."""
    p.add_argument("--validation-documents", type=positive_int, default=None, metavar="N",
                   help="hold out N documents (a seeded draw by id, after --dedup; per corpus in proportion to its "
                        "documents) as a validation set in OUTPUT/validation/, never seen by training: neither their "
                        "instances nor their text as a random next segment. Exactly N: the draws of every document "
                        "are counted first (the documents pass one more shuffle)")
    p.add_argument("--validation-fraction", type=fraction, default=None, metavar="F",
                   help="hold out each document with probability F (a seeded draw by id): about F of every corpus, "
                        "no step waits on a count (the other way to make OUTPUT/validation/)")


def _add_validation_masking(p: flags.Parser, source: str) -> None:
    p.add_argument("--validation-masked-lm-prob", type=probability, default=None,
                   help=f"mask the validation set at this share instead of --masked-lm-prob ({source}; ModernBERT "
                        "trains at 0.3 and evaluates at 0.15)")


JANITOR = {"ngram": 13, "window": 200, "min_fragment": 200, "max_matches": 10}   # lm-eval's Janitor's defaults


def _add_decontaminate(p: flags.Parser, switch: bool) -> None:
    """The decontamination flags: `bertprep decontaminate`'s own, or with `switch` prepare's (after --dedup, before a
    validation split), which need --decontaminate."""
    if switch:
        p.add_argument("--decontaminate", default=None, metavar="FILE[,FILE...]",
                       help="drop the n-grams of these eval sets from the documents before pairing (after --dedup, "
                            "before a validation split), as `bertprep decontaminate --against` does")
    else:
        p.add_argument("--against", required=True, metavar="FILE[,FILE...]",
                       help="eval sets: SQuAD .json (v1.1 or v2.0: every context, question and answer), .jsonl (every "
                            "string, or --against-fields) or .txt (one example a line); .gz too")
    d = (lambda name: None) if switch else JANITOR.get
    p.add_argument("--against-fields", type=_names, default=(), metavar="NAME,...",
                   help=".jsonl eval sets: read only these top-level fields (default: every string)")
    p.add_argument("--ngram", type=positive_int, default=d("ngram"),
                   help=f"words an n-gram (lm-eval's Janitor: {JANITOR['ngram']})")
    p.add_argument("--window", type=nonnegative_int, default=d("window"),
                   help=f"characters cut either side of a match (default {JANITOR['window']})")
    p.add_argument("--min-fragment", type=nonnegative_int, default=d("min_fragment"),
                   help="pieces of a cut document this long or shorter are dropped (default "
                        f"{JANITOR['min_fragment']})")
    p.add_argument("--max-matches", type=nonnegative_int, default=d("max_matches"),
                   help="a document with more matching n-grams than this (overlapping ones each count) is dropped "
                        f"whole (default {JANITOR['max_matches']})")


def _add_seed(p: flags.Parser) -> None:
    p.add_argument("--seed", type=int, default=12345)


def add_extract(p: flags.Parser) -> None:
    _add_corpus(p)
    p.add_argument("--num-shards", type=nonnegative_int, default=0,
                   help="document files to write (0: from the input's size, ~128 MiB each)")
    _add_output(p)


def add_pairs(p: flags.Parser) -> None:
    p.add_argument("--input", required=True, help="document directories or GLOBs of documents-*.jsonl.gz")
    _add_allow_incomplete(p, "the documents-*.jsonl.gz of a directory without manifest")
    _add_pairs(p)
    _add_split(p)
    _add_seed(p)
    p.add_argument("--num-shards", type=nonnegative_int, default=0,
                   help="pair files to write (0: from the input's size, ~128 MiB each, at least 8)")
    _add_output(p)


def add_mask(p: flags.Parser) -> None:
    p.add_argument("--input", required=True, help="a pairs directory (with its manifest.json)")
    p.add_argument("--vocab", default=None, type=vocab_file,
                   help="optional: refuse unless the pairs were made with this vocab")
    _add_allow_incomplete(p, "the pairs-*.tfrecord of a directory without manifest (then give --vocab and "
                             "--max-seq-length)")
    p.add_argument("--objective", choices=pairs.OBJECTIVES, default=None,
                   help="optional: refuse unless the pairs were made for this objective (the shards keep the pairs' "
                        "objective; with --allow-incomplete, what the pairs are: default nsp)")
    p.add_argument("--max-seq-length", type=positive_int, default=None,
                   help="with --allow-incomplete: the pairs' max_seq_length (otherwise from their manifest)")
    _add_mask(p)
    _add_validation_masking(p, "when the pairs have a validation set, which is masked too")
    _add_pack(p)
    _add_seed(p)
    p.add_argument("--num-shards", type=nonnegative_int, default=0,
                   help="TFRecord shards (0: from the records' size, ~128 MiB each)")
    _add_output(p)


def corpus_weights(text: str) -> dict[str, float]:
    """"books=2,wikipedia=1" -> {"books": 2.0, "wikipedia": 1.0}: kinds of corpora, each a positive weight."""
    weights = {}
    for item in text.split(","):
        kind, _, value = item.partition("=")
        kind = kind.strip()
        if kind not in CORPORA or kind in weights:
            raise argparse.ArgumentTypeError(f"{item!r}: KIND=WEIGHT with KIND one of {', '.join(CORPORA)}, once each")
        weights[kind] = positive_float(value)
    return weights


def add_prepare(p: flags.Parser) -> None:
    _add_corpus(p)
    p.add_argument("--corpus-weights", type=corpus_weights, default=None, metavar="KIND=W,...",
                   help="sampling weights of the corpora: each document of a corpus of weight W is paired in "
                        "round(--dupe-factor x W) dupe passes (at least 1), e.g. books=2 to see books twice as "
                        "often; recorded in the manifest (default: 1 for every corpus)")
    p.add_argument("--mix-corpora", action="store_true",
                   help="several corpora: one random-next pool over all of them (by default each corpus pairs in "
                        "its own buckets: a B segment never comes from another corpus)")
    _add_dedup(p, switch=True)
    _add_decontaminate(p, switch=True)
    _add_pairs(p)
    _add_split(p)
    _add_mask(p)
    _add_validation_masking(p, "with --validation-documents or --validation-fraction")
    _add_pack(p)
    _add_seed(p)
    p.add_argument("--num-shards", type=nonnegative_int, default=0,
                   help="TFRecord shards (0: from the input's size, ~128 MiB each)")
    _add_output(p)


def _add_google_shards(p: flags.Parser, vocab_use: str) -> None:
    """What shards made by google's tool (no manifest) were made with; `vocab_use`: what the command does with it."""
    p.add_argument("--max-seq-length", type=positive_int, default=None,
                   help="shards without a manifest (google's): their max_seq_length")
    p.add_argument("--max-predictions-per-seq", type=positive_int, default=None,
                   help="shards without a manifest: their max_predictions_per_seq")
    p.add_argument("--vocab", default=None, type=vocab_file,
                   help=f"shards without a manifest: their vocab.txt ({vocab_use}); with a manifest, optional: "
                        "refuse unless the shards were made with it")


def add_pack(p: flags.Parser) -> None:
    p.add_argument("--input", required=True,
                   help="masked-LM shards in google's layout: a `mask`/`prepare` output directory, or google-made "
                        "shards (a glob, with --max-seq-length, --max-predictions-per-seq and --vocab)")
    p.add_argument("--max-sequences-per-pack", type=sequences_per_pack, default=packing.DEFAULT_SEQUENCES_PER_PACK,
                   help=f"instances a row may hold, 1..{packing.MAX_SEQUENCES_PER_PACK}: more packs tighter "
                        f"(bench/bench_packing.py prints the efficiency of each)")
    _add_google_shards(p, "recorded for the trainer and verify")
    p.add_argument("--masked-lm-prob", type=probability, default=0.15,
                   help="shards without a manifest: the masked_lm_prob they were masked with, which sizes a row's "
                        "masked slots (a row that would need more is split, and counted)")
    _add_seed(p)
    p.add_argument("--num-shards", type=nonnegative_int, default=0,
                   help="TFRecord shards (0: from the input's size, ~128 MiB each). Each file is packed on its own, "
                        "in one worker's memory: fewer, bigger files pack a little tighter")
    _add_output(p)


def mds_shard_mb(text: str) -> float:
    return flags._number(float, text, lambda v: 0 < v < 4096, "MiB of an MDS shard, in (0, 4096)")


def add_convert(p: flags.Parser) -> None:
    p.add_argument("--input", required=True,
                   help="masked-LM shards (a `mask`/`prepare`/`pack` output: google's layout or packed, any "
                        "objective; or google-made shards as a glob, with --max-seq-length, "
                        "--max-predictions-per-seq and --vocab), or pair records (a `pairs` output: unmasked rows "
                        "for trainers that mask as they load). A validation set beside them is converted too")
    p.add_argument("--format", required=True, choices=("parquet", "mds"),
                   help="parquet: Hugging Face datasets/transformers (input_ids, token_type_ids, attention_mask, "
                        "labels, next_sentence_label; train-*.parquet, one file per input file); mds: MosaicML "
                        "streaming / ModernBERT (index.json and shard.*.mds, rows cut to their real tokens, with "
                        "len). docs: README, 'Training with another trainer'")
    p.add_argument("--hf-dataset-card", action="store_true",
                   help="parquet: also write README.md, a dataset card (splits, features, counts, the bertprep "
                        "parameters) so that the directory can be pushed to a hub as it is")
    p.add_argument("--mds-shard-mb", type=mds_shard_mb, default=None,
                   help="mds: MiB a shard holds at most (default 64, streaming's own default); an input file "
                        "makes one shard or more")
    _add_google_shards(p, "its size picks input_ids' type, its [CLS] and [SEP] the special tokens")
    _add_output(p, shuffles=False)


def add_dedup(p: flags.Parser) -> None:
    p.add_argument("--input", required=True, help="document directories or GLOBs of documents-*.jsonl.gz")
    _add_allow_incomplete(p, "the documents-*.jsonl.gz of a directory without manifest")
    _add_dedup(p, switch=False)
    _add_seed(p)
    p.add_argument("--pair-parallelism", type=nonnegative_int, default=0,
                   help="work items per shuffle are 4 per worker: this many workers (0: the local worker count, "
                        "or 32 on a distributed runner); the output does not depend on it")
    p.add_argument("--num-shards", type=nonnegative_int, default=0,
                   help="document files to write (0: from the input's size, ~128 MiB each)")
    _add_output(p)


def add_inspect(p: flags.Parser) -> None:
    p.add_argument("directory")
    p.add_argument("--examples", type=nonnegative_int, default=3, help="decoded examples to print")
    p.add_argument("--vocab", default=None, type=vocab_file, help="vocab to decode with (default: the manifest's)")
    _add_allow_incomplete(p, "the data files of a directory without manifest")


def add_decontaminate(p: flags.Parser) -> None:
    p.add_argument("--input", required=True, help="document directories or GLOBs of documents-*.jsonl.gz")
    _add_allow_incomplete(p, "the documents-*.jsonl.gz of a directory without manifest")
    _add_decontaminate(p, switch=False)
    _add_seed(p)
    p.add_argument("--num-shards", type=nonnegative_int, default=0,
                   help="document files to write (0: from the input's size, ~128 MiB each)")
    _add_output(p)


def add_verify(p: flags.Parser) -> None:
    p.add_argument("directory")
    p.add_argument("--max-seq-length", type=nonnegative_int, default=0,
                   help="for shards without a manifest (google's)")
    p.add_argument("--max-predictions-per-seq", type=nonnegative_int, default=0,
                   help="for shards without a manifest")
    p.add_argument("--vocab-size", type=nonnegative_int, default=0,
                   help="for shards without a manifest: check ids below it")
    p.add_argument("--vocab", default=None, type=vocab_file,
                   help="for shards without a manifest: their vocab (size, [CLS], [SEP])")
    p.add_argument("--cls-id", type=nonnegative_int, default=101,
                   help="without a manifest or --vocab (google's vocabs: 101)")
    p.add_argument("--sep-id", type=nonnegative_int, default=102,
                   help="without a manifest or --vocab (google's vocabs: 102)")
    p.add_argument("--pattern", default="*.tfrecord", help="files to read when there is no manifest")


def add_demo(p: flags.Parser) -> None:
    p.add_argument("--output", default="demo_out")
    p.add_argument("--steps", type=positive_int, default=300, help="training steps of the tiny model")


# ---------------------------------------------------------------------------------------------- the table

# command: (help, add_arguments, handler); "module:function" is imported only when that command runs, so
# `bertprep prepare` never imports torch and no module imports this one back.
COMMANDS: dict[str, tuple[str, Callable | str, str]] = {
    "extract": ("corpus files -> documents (gzip JSON Lines)", add_extract, "pipeline.commands.run:main"),
    "vocab": ("documents -> a WordPiece vocab.txt", "pipeline.commands.vocab:add_arguments",
              "pipeline.commands.vocab:run"),
    "pairs": ("documents -> NSP pair records (tokenized, unmasked)", add_pairs, "pipeline.commands.run:main"),
    "mask": ("pair records -> TFRecord shards in google's schema (re-mask without re-tokenizing)", add_mask,
             "pipeline.commands.run:main"),
    "prepare": ("corpus files -> TFRecord shards in one Beam pipeline (extract + pairs + mask)", add_prepare,
                "pipeline.commands.run:main"),
    "pack": ("masked shards -> packed shards: the same instances, several a row, no padding between them",
             add_pack, "pipeline.commands.run:main"),
    "convert": ("masked shards or pair records -> Parquet (Hugging Face) or MDS (MosaicML streaming, ModernBERT)",
                add_convert, "pipeline.commands.run:main"),
    "dedup": ("documents -> documents without exact or near duplicates and repeated paragraphs", add_dedup,
              "pipeline.commands.run:main"),
    "decontaminate": ("documents -> documents without the n-grams of eval sets (lm-eval's Janitor), with a report",
                      add_decontaminate, "pipeline.commands.run:main"),
    "inspect": ("counts, length/masking stats and decoded examples of an output directory", add_inspect,
                "pipeline.commands.inspection:main"),
    "verify": ("read every record of an output directory: framing, CRCs, schema, invariants, counts",
               add_verify, "pipeline.commands.verify:main"),
    "train": ("train BERT on the shards (PyTorch)", "pipeline.commands.training:add_train",
              "pipeline.commands.training:run_train"),
    "export-hf": ("convert a training run to a HuggingFace BertForPreTraining checkpoint",
                  "pipeline.commands.training:add_export_hf", "pipeline.commands.training:run_export_hf"),
    "plot": ("draw a training run's loss/accuracy curves to PNG", "pipeline.commands.training:add_plot",
             "pipeline.commands.training:run_plot"),
    "demo": ("everything above on the bundled sample, then a short CPU training run", add_demo,
             "pipeline.commands.demo:main"),
}


def _resolve(ref: Callable | str) -> Callable:
    if callable(ref):
        return ref
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def handler(command: str) -> Callable:
    """The function that runs a command, given its parsed args."""
    return _resolve(COMMANDS[command][2])


def _usage() -> str:
    return ("usage: bertprep COMMAND [flags]   (bertprep COMMAND --help lists every flag)\n\n"
            + __doc__.split("\n")[0] + "\n\ncommands:\n"
            + "\n".join(f"  {name:<10} {text}" for name, (text, _, _) in COMMANDS.items()))


def build_parser(command: str) -> flags.Parser:
    """The parser of one command: its own flags, plus --debug."""
    text, add_arguments, _ = COMMANDS[command]
    p = flags.Parser(prog=f"bertprep {command}", description=text)
    _resolve(add_arguments)(p)
    p.add_argument("--debug", action="store_true", help="show the traceback of a failure")
    return p


def beam_flag_names() -> set[str]:
    """Every flag Beam's PipelineOptions defines, in all its option classes (the runners' included)."""
    return set(beam_flags())


def beam_flags() -> dict[str, bool]:
    """Every flag Beam's PipelineOptions defines -> whether it takes a value (`--project P`; not `--dry_run`)."""
    from apache_beam.options import pipeline_options as po

    class Recorder(po._BeamArgumentParser):   # Beam's own parser class: its options use its extra methods
        names: dict[str, bool] = {}

        def add_argument(self, *names, **kwargs):
            action = super().add_argument(*names, **kwargs)
            Recorder.names.update((n, action.nargs != 0) for n in names if n.startswith("-"))
            return action

    recorder, todo, seen = Recorder(allow_abbrev=False), [po.PipelineOptions], set()
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        cls._add_argparse_args(recorder)   # how Beam itself collects them (PipelineOptions.get_all_options)
        todo.extend(cls.__subclasses__())
    return Recorder.names


def parse(argv: list[str]) -> tuple[str, argparse.Namespace]:
    """`COMMAND FLAGS...` -> (command, args); exits 2 with one line on any flag the command does not take. For a
    Beam command, args.beam_args holds the Beam flags (checked against Beam's option classes)."""
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(), file=sys.stdout if argv else sys.stderr)
        raise SystemExit(0 if argv else 2)
    command = argv[0]
    if command not in COMMANDS:
        near = difflib.get_close_matches(command, list(COMMANDS), n=1)
        print(f"bertprep: unknown command {command!r}" + (f"; did you mean {near[0]}?" if near else "")
              + f" (commands: {', '.join(COMMANDS)})", file=sys.stderr)
        raise SystemExit(2)
    parser = build_parser(command)
    takes_value = beam_flags() if command in BEAM_COMMANDS else {}
    beam = set(takes_value)
    for token in argv[1:]:   # first: an unknown flag's value would otherwise be taken for the optional corpus kind
        name = token.split("=", 1)[0]
        if name.startswith("--") and name not in parser.flag_names | beam | {"--help"}:
            parser.unknown(token, beam)
    args, extra = parser.parse_known_args(_beam_values_joined(argv[1:], takes_value, parser.flag_names))
    args.command, args.beam_args = command, []
    if extra and command in BEAM_COMMANDS:
        for i, token in enumerate(extra):
            name = token.split("=", 1)[0]
            if name.startswith("--") and name in beam:
                continue
            previous = extra[i - 1].split("=", 1)[0] if i else ""
            if not token.startswith("-") and "=" not in extra[i - 1] and previous in beam:
                continue   # the value of `--beam_flag VALUE`
            parser.unknown(token, beam)
        args.beam_args = extra
    elif extra:
        parser.unknown(extra[0])
    _check(parser, args)
    return command, args


def _beam_values_joined(argv: list[str], takes_value: dict[str, bool], own: set[str]) -> list[str]:
    """Beam's flags as Beam's docs write them, `--project P` as well as `--project=P`: each Beam flag that takes a
    value is joined to the value after it, so that the value is never taken for a positional argument (the corpus
    kind of `prepare`) or for a flag of ours. A flag of ours with the same name is ours."""
    out, i = [], 0
    while i < len(argv):
        token = argv[i]
        if (takes_value.get(token) and token not in own and i + 1 < len(argv)
                and not argv[i + 1].startswith("--")):
            out.append(f"{token}={argv[i + 1]}")
            i += 2
            continue
        out.append(token)
        i += 1
    return out


def _corpora(parser: flags.Parser, args: argparse.Namespace) -> None:
    """extract, prepare: --input KIND:GLOB (or the positional kind for all) -> args.corpora [(kind, globs)] in the
    order given; args.input becomes the globs alone, comma-joined."""
    corpora: dict[str, str] = {}
    for spec in args.input:
        kind, sep, globs = spec.partition(":")
        named = bool(sep) and kind in CORPORA
        if args.corpus and named and kind != args.corpus:
            parser.error(f"--input {spec}: a {kind} input in a {args.corpus} job (leave the positional kind out to "
                         "give several)")
        if not args.corpus and not named:
            parser.error(f"--input {spec}: name its kind ({'|'.join(CORPORA)}:GLOB), or give the kind of every "
                         "input as the first argument")
        kind, globs = (kind, globs) if named else (args.corpus, spec)
        if kind in corpora and not args.corpus:
            parser.error(f"--input {kind}: given twice: join its globs with commas")
        corpora[kind] = f"{corpora[kind]},{globs}" if kind in corpora else globs
    args.corpora = list(corpora.items())
    args.input = ",".join(corpora.values())
    weights = getattr(args, "corpus_weights", None) or {}
    for kind in weights:
        if kind not in corpora:
            parser.error(f"--corpus-weights {kind}=...: no {kind} input")
    if weights and getattr(args, "mix_corpora", False):
        parser.error("--corpus-weights with --mix-corpora: weights set each corpus's dupe passes, which one mixed "
                     "pool cannot keep apart")


def _needs_switch(parser: flags.Parser, args: argparse.Namespace, switch: str, names: tuple[str, ...],
                  defaults: dict) -> None:
    """prepare's flags of a pass it runs only with --`switch` (dedup, decontaminate): refused without it, else their
    defaults (the parser leaves them None, so that a flag given can be told from one left out)."""
    given = [f"--{k.replace('_', '-')}" for k in (*names, *defaults) if getattr(args, k) not in (None, False, ())]
    if given and not getattr(args, switch):
        parser.error(f"{given[0]} without --{switch}")
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)


def _check(parser: flags.Parser, args: argparse.Namespace) -> None:
    """What one flag's type cannot check: flags that must agree with each other."""
    if hasattr(args, "corpus") and isinstance(args.input, list):
        _corpora(parser, args)
    if hasattr(args, "text_field"):   # extract, prepare: the record fields' flags need a record corpus
        given = [f"--{k.replace('_', '-')}" for k in (*RECORD_FIELDS, "strict")
                 if getattr(args, k) not in (None, False)]
        if given and not any(kind in RECORD_CORPORA for kind, _ in args.corpora):
            parser.error(f"{given[0]} without a {' or '.join(RECORD_CORPORA)} input (it reads their records)")
        for k, v in RECORD_FIELDS.items():
            if getattr(args, k) is None:
                setattr(args, k, v)
    if hasattr(args, "mask_token_prob") and args.mask_token_prob + args.random_token_prob > 1:
        parser.error(f"--mask-token-prob {args.mask_token_prob} + --random-token-prob {args.random_token_prob} "
                     "exceeds 1 (the rest of the chosen tokens are kept)")
    length = getattr(args, "max_seq_length", None)
    if length is not None and (getattr(args, "max_predictions_per_seq", None) or 0) > length:
        parser.error(f"--max-predictions-per-seq {args.max_predictions_per_seq} exceeds --max-seq-length {length}")
    if hasattr(args, "bucket_docs"):
        if args.bucket_docs < 2:
            parser.error(f"--bucket-docs {args.bucket_docs}: a random-next pool needs at least 2 documents (a "
                         "1-document pool would draw 'random' segments from the same document)")
        if args.bucket_docs < 1000:
            flags.warn(f"--bucket-docs {args.bucket_docs}: pools under ~1,000 documents draw random-next "
                       "segments from few documents, unlike google's whole-corpus pool")
    if hasattr(args, "cross_documents"):   # pairs, prepare: the objective's own flags
        if args.objective != "none":
            for flag in ("cross_documents", "split_sentences"):
                if getattr(args, flag):
                    parser.error(f"--{flag.replace('_', '-')} without --objective none (it shapes full-sentence "
                                 "rows)")
        elif args.short_seq_prob is not None:
            parser.error("--short-seq-prob with --objective none: its rows are filled to --max-seq-length")
        if args.objective == "none" and getattr(args, "pack", False):
            parser.error("--pack with --objective none: its rows are filled already (pack is for nsp and sop)")
        if args.short_seq_prob is None:
            args.short_seq_prob = 0.1
    if getattr(args, "max_seq_length", None) is not None and args.max_seq_length < 5 and hasattr(args, "dupe_factor"):
        parser.error(f"--max-seq-length {args.max_seq_length}: [CLS] A [SEP] B [SEP] needs at least 5")
    if hasattr(args, "dedup"):   # prepare: the dedup flags need --dedup
        _needs_switch(parser, args, "dedup", ("no_exact", "no_near", "no_paragraphs"), DEDUP_DEFAULTS)
    if hasattr(args, "bands") and args.num_perm % args.bands:
        parser.error(f"--bands {args.bands} does not divide --num-perm {args.num_perm}: every band needs the same "
                     "number of rows")
    if hasattr(args, "no_exact") and args.no_exact and args.no_near and args.no_paragraphs:
        parser.error("--no-exact, --no-near and --no-paragraphs: every pass is off, nothing to do")
    if hasattr(args, "decontaminate"):   # prepare: the Janitor's flags need --decontaminate
        _needs_switch(parser, args, "decontaminate", ("against_fields",), JANITOR)
    if hasattr(args, "validation_fraction"):   # pairs, prepare
        if args.validation_documents is not None and args.validation_fraction is not None:
            parser.error("--validation-documents and --validation-fraction: give one of them")
        if getattr(args, "validation_masked_lm_prob", None) is not None and args.validation_documents is None \
                and args.validation_fraction is None:
            parser.error("--validation-masked-lm-prob without --validation-documents or --validation-fraction")
    if hasattr(args, "hf_dataset_card"):   # convert: each format's own flags
        if args.hf_dataset_card and args.format != "parquet":
            parser.error(f"--hf-dataset-card with --format {args.format}: the card describes Parquet files")
        if args.mds_shard_mb is not None and args.format != "mds":
            parser.error(f"--mds-shard-mb with --format {args.format}")
        if args.mds_shard_mb is None:
            args.mds_shard_mb = 64.0
    if hasattr(args, "pack"):
        if args.max_sequences_per_pack is not None and not args.pack:
            parser.error("--max-sequences-per-pack without --pack")
        if args.max_sequences_per_pack is None:
            args.max_sequences_per_pack = packing.DEFAULT_SEQUENCES_PER_PACK


# ---------------------------------------------------------------------------------------------- running

def _quiet_logging(verbose: bool, debug: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(message)s")
    # Beam warns at import time about optional GCP client libraries; it is noise for local runs.
    logging.getLogger().addFilter(lambda r: "apitools" not in r.getMessage())
    # A failing bundle is logged by Beam with its traceback (the local runner also relays each worker's log
    # entry, traceback inside) before the failure reaches main(), which prints it as one line: Beam's errors
    # are shown with --debug or -v only.
    level = logging.INFO if verbose else logging.ERROR if debug else logging.CRITICAL
    for name in ("apache_beam", "absl"):
        logging.getLogger(name).setLevel(level)


def one_line(error: BaseException) -> str:
    """The message of an error as one line: a pipeline failure's last line (Beam wraps a worker's error, with
    its traceback, in its own), without the exception's class when the message names it already."""
    text = str(error).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = lines[-1] if lines else type(error).__name__
    if isinstance(error, OSError) and error.filename and not lines:
        line = f"{error.filename}: {error.strerror}"
    # a worker process's error arrives as its traceback's last line: "package.module.SomeError: message"
    return re.sub(r"^(?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*(?:Error|Exception): ", "", line)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command, args = parse(argv)
    debug = args.debug or getattr(args, "verbose", False)
    _quiet_logging(getattr(args, "verbose", False), args.debug)
    try:
        code = handler(command)(args) or 0
        sys.stdout.flush()   # a closed pipe shows here, not in Python's own flush at exit
        return code
    except BrokenPipeError:   # the reader went away (`bertprep inspect DIR | head`): stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # nothing left to flush at exit
        return 128 + signal.SIGPIPE   # 141: what a shell reports for a program that SIGPIPE ended
    except KeyboardInterrupt:   # exit 130, as a shell reports a process that SIGINT ended
        if debug:
            raise
        print(f"bertprep {command}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except SystemExit as e:   # a refusal with its message: one line, named for the command
        if isinstance(e.code, str) and not e.code.startswith("bertprep"):
            raise SystemExit(f"bertprep {command}: {e.code}") from None
        raise
    except Exception as e:   # anything else a user can cause (a missing file, a full disk, a damaged input)
        if debug:
            raise
        raise SystemExit(f"bertprep {command}: {one_line(e)}" + ("" if isinstance(e, (OSError, ValueError))
                         else " (run with --debug for the traceback)")) from None


if __name__ == "__main__":
    sys.exit(main())
