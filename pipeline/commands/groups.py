"""The Beam commands' flag groups: each owns its flags (`add`, in --help's order), the checks that need several of
them (`check`: one line naming the flag, before any job starts) and the typed value it gives the job's plan
(`build`). Every default is the parameter dataclass's own (pipeline/jobs/settings.py, the algorithms' params),
written once; a flag whose absence means something else (prepare's dedup flags without --dedup) defaults to None
and takes the dataclass's value in `build`.
"""
from __future__ import annotations

import argparse
import dataclasses

from corpora import KINDS, RECORD_KINDS, ReadParams
from corpora.kinds import PARAGRAPHS
from pipeline.algorithms import dedup, masking, packing, pool, split
from pipeline.commands import flags
from pipeline.commands.flags import (nonnegative_int, positive_float, positive_int, probability, readable_file,
                                     vocab_file)
from pipeline.formats import storage
from pipeline.jobs import settings
from pipeline.text import contamination, vocab_fit, vocabularies

GOOGLE_DUPE_FACTOR = 10   # create_pretraining_data.py's default


def default(cls, name: str):
    """A dataclass field's default: the one place it is written."""
    return {f.name: f.default for f in dataclasses.fields(cls)}[name]


def given(args: argparse.Namespace, names) -> list[str]:
    """The flags among `names` (attribute names) given on the command line (set, not None, False or ())."""
    return [f"--{k.replace('_', '-')}" for k in names if getattr(args, k) not in (None, False, ())]


def needs_switch(p, args: argparse.Namespace, switch: str, names) -> None:
    """prepare's flags of a pass it runs only with --`switch` (dedup, decontaminate) are refused without it (the
    parser leaves them None, so that a flag given can be told from one left out)."""
    flagged = given(args, names)
    if flagged and not getattr(args, switch):
        p.error(f"{flagged[0]} without --{switch}")


class Group:
    """Flags one or more commands take, their checks together, and the value they give the job's plan."""

    def add(self, p: flags.Parser) -> None:
        raise NotImplementedError

    def check(self, p: flags.Parser, args: argparse.Namespace) -> None:
        """Refuses (p.error: one line, exit 2) what the flags cannot be together; fills what depends on others."""

    def build(self, args: argparse.Namespace):
        return None


# ---------------------------------------------------------------------------------------------- running a job

class Output(Group):
    """--output and how the job runs; `shuffles`: the flags of the shuffle, for the jobs that have one."""

    def __init__(self, shuffles: bool = True):
        self.shuffles = shuffles

    def add(self, p):
        p.add_argument("--output", required=True, help="output directory (local path or gs://...)")
        p.add_argument("--overwrite", action="store_true", help="replace an existing output set in --output")
        p.add_argument("--preset", default="local", help="Beam option preset from beam_options/ (local, local-1, "
                                                         "...) or a file of Beam flags; explicit Beam flags win")
        p.add_argument("--gcs-bucket", default=None,
                       help="dataflow preset: gs://BUCKET[/prefix] for temp_location and staging_location")
        p.add_argument("--retries", type=nonnegative_int, default=default(settings.Running, "retries"),
                       help="local runners: run the whole pipeline again up to N times if it fails (they do not "
                            "retry a failed bundle; Dataflow and the portable runners do, and refuse it)")
        p.add_argument("--wait", action=argparse.BooleanOptionalAction, default=default(settings.Running, "wait"),
                       help="wait for the job to end and print its counts (default: yes, except on Dataflow). The "
                            "job publishes its output itself, manifest.json last, so a Dataflow job needs nothing of "
                            "this process once submitted; --no-wait is refused where the job runs in this process "
                            "(the local runner, LOOPBACK workers)")
        p.add_argument("-v", "--verbose", action="store_true", help="Beam's and bertprep's INFO logging; tracebacks")
        if not self.shuffles:
            return
        p.add_argument("--shuffle", choices=("auto", "files", "groupbykey"),
                       default=default(settings.Running, "shuffle"),
                       help="how records are regrouped (into buckets, output files): 'files' = sorted run files on "
                            "this machine's disk, memory flat whatever the input; 'groupbykey' = the runner's "
                            "GroupByKey (Dataflow's shuffle service, Flink, Spark). auto: files on the local runner, "
                            "groupbykey on every other. groupbykey on the local runner holds all records in memory "
                            "(your choice for inputs that fit) and needs one worker (--preset local-1): Beam's "
                            "multi-worker local runner drops records of its GroupByKey. Same bytes either way; every "
                            "job checks that its shuffles delivered every record before it publishes")
        p.add_argument("--sort-buffer-mb", type=positive_float, default=default(settings.Running, "sort_buffer_mb"),
                       help="files shuffle: MiB of records a worker sorts per run file (default 16)")
        p.add_argument("--runs-dir", default=None,
                       help="files shuffle: local directory for run files (default: OUTPUT/.incomplete/runs for a "
                            "local output, else the system's temporary directory); removed when the job ends")

    def build(self, args) -> settings.Running:
        shuffle = ({"shuffle": args.shuffle, "sort_buffer_mb": args.sort_buffer_mb, "runs_dir": args.runs_dir}
                   if self.shuffles else {})
        return settings.Running(args.output, overwrite=args.overwrite, retries=args.retries, wait=args.wait,
                              tracebacks=args.debug or args.verbose, **shuffle)


class AllowIncomplete(Group):
    def __init__(self, what: str):
        self.what = what

    def add(self, p):
        p.add_argument("--allow-incomplete", action="store_true",
                       help=f"read {self.what} anyway (no manifest.json: its stage did not finish or it was copied "
                            "in part)")

    def build(self, args) -> bool:
        return args.allow_incomplete


class Seed(Group):
    def add(self, p):
        p.add_argument("--seed", type=int, default=settings.SEED)

    def build(self, args) -> int:
        return args.seed


class NumShards(Group):
    def __init__(self, help: str):
        self.help = help

    def add(self, p):
        p.add_argument("--num-shards", type=nonnegative_int, default=0, help=self.help)

    def build(self, args) -> int:
        return args.num_shards


# ---------------------------------------------------------------------------------------------- corpora

def names(value: str) -> tuple[str, ...]:
    """"A,B" -> ("A", "B"); an empty name is refused."""
    found = tuple(name.strip() for name in value.split(","))
    if not all(found):
        raise argparse.ArgumentTypeError(f"a comma-separated list of names, got {value!r}")
    return found


RECORD_FIELDS = {"text_field": default(ReadParams, "text_field"), "id_field": default(ReadParams, "id_field")}


class Corpus(Group):
    """extract, prepare: the corpus kinds and files, and how each kind is read -> ((kind, globs), ...), ReadParams."""

    def add(self, p):
        p.add_argument("corpus", nargs="?", choices=KINDS, default=None,
                       help="the kind of every --input; leave it out to name a kind in each --input (KIND:GLOB)")
        p.add_argument("--input", action="append", required=True, metavar="[KIND:]GLOB[,GLOB...]",
                       help="corpus files (books: also directories; jsonl: JSON Lines, plain, .gz or .zst, as C4 "
                            "and Dolma ship them; parquet: as FineWeb and Wikipedia on the Hugging Face Hub ship "
                            "them). Several corpora in one job: leave the kind out and give one --input per kind, "
                            "e.g. --input wikipedia:enwiki-*-multistream.xml.bz2 --input books:books/ (BERT's "
                            "corpus)")
        p.add_argument("--wiki-index", default=None, type=readable_file,
                       help="wikipedia: the multistream index (default: found beside the dump when present)")
        p.add_argument("--keep-disambiguation", action="store_true", help="wikipedia: keep disambiguation pages")
        p.add_argument("--disambiguation-templates", type=names, default=(), metavar="NAME,...",
                       help="wikipedia: more templates that mark a disambiguation page, for wikis whose own the "
                            "built-in table lacks (English names and __DISAMBIG__ always count)")
        p.add_argument("--max-document-bytes", type=positive_int, default=None,
                       help="books: split books larger than this into documents of at most this size")
        p.add_argument("--skip-bad-files", action="store_true",
                       help="count and skip corrupt input files instead of failing the job")
        p.add_argument("--text-field", default=None, metavar="NAME",
                       help=f"jsonl, parquet: the field (column) of a record's text (default "
                            f"{RECORD_FIELDS['text_field']}); each paragraph's sentences are split as books' are")
        p.add_argument("--paragraphs", choices=PARAGRAPHS, default=None,
                       help="jsonl, parquet: where a record's text starts a paragraph: at every line (default: C4, "
                            "Dolma and FineWeb write a paragraph a line) or at blank lines (a hard-wrapped text, as "
                            "books are read); --dedup compares and drops paragraphs"),
        p.add_argument("--id-field", default=None, metavar="NAME",
                       help=f"jsonl, parquet: the field (column) of a record's id (default "
                            f"{RECORD_FIELDS['id_field']}): document ids are KIND:FILE:ID, or KIND:FILE:N where a "
                            "record has none (N: the line number from 1, the row index from 0); an id repeated in a "
                            "file gets #N (counted)")
        p.add_argument("--strict", action="store_true",
                       help="jsonl, parquet: fail on the first malformed record, naming file and line; without it "
                            "each is skipped and counted by reason (jsonl/not_json, jsonl/no_text_field, "
                            "jsonl/text_not_a_string, parquet/null_text, ...)")

    def check(self, p, args):
        """--input KIND:GLOB (or the positional kind for all) -> args.corpora [(kind, globs)] in the order given;
        the record fields' flags need a record corpus."""
        corpora: dict[str, str] = {}
        for spec in args.input:
            kind, sep, globs = spec.partition(":")
            named = bool(sep) and kind in KINDS
            if args.corpus and named and kind != args.corpus:
                p.error(f"--input {spec}: a {kind} input in a {args.corpus} job (leave the positional kind out to "
                        "give several)")
            if not args.corpus and not named:
                p.error(f"--input {spec}: name its kind ({'|'.join(KINDS)}:GLOB), or give the kind of every "
                        "input as the first argument")
            kind, globs = (kind, globs) if named else (args.corpus, spec)
            if kind in corpora and not args.corpus:
                p.error(f"--input {kind}: given twice: join its globs with commas")
            corpora[kind] = f"{corpora[kind]},{globs}" if kind in corpora else globs
        args.corpora = list(corpora.items())
        args.input = ",".join(corpora.values())
        flagged = given(args, (*RECORD_FIELDS, "strict", "paragraphs"))
        if flagged and not any(kind in RECORD_KINDS for kind, _ in args.corpora):
            p.error(f"{flagged[0]} without a {' or '.join(RECORD_KINDS)} input (it reads their records)")

    def build(self, args) -> tuple[tuple[tuple[str, str], ...], ReadParams]:
        fields = {k: getattr(args, k) for k in (*RECORD_FIELDS, "paragraphs") if getattr(args, k) is not None}
        return tuple(args.corpora), ReadParams(
            wiki_index=args.wiki_index, skip_disambiguation=not args.keep_disambiguation,
            disambiguation_templates=tuple(args.disambiguation_templates), max_document_bytes=args.max_document_bytes,
            skip_bad_files=args.skip_bad_files, strict=args.strict, **fields)


def corpus_weights(text: str) -> dict[str, float]:
    """"books=2,wikipedia=1" -> {"books": 2.0, "wikipedia": 1.0}: kinds of corpora, each a positive weight."""
    weights = {}
    for item in text.split(","):
        kind, _, value = item.partition("=")
        kind = kind.strip()
        if kind not in KINDS or kind in weights:
            raise argparse.ArgumentTypeError(f"{item!r}: KIND=WEIGHT with KIND one of {', '.join(KINDS)}, once each")
        weights[kind] = positive_float(value)
    return weights


class Mix(Group):
    """prepare: how several corpora mix -> (weights, one pool over all)."""

    def add(self, p):
        p.add_argument("--corpus-weights", type=corpus_weights, default=None, metavar="KIND=W,...",
                       help="sampling weights of the corpora: a corpus of weight W is paired in --dupe-factor x W "
                            "dupe passes, a fractional part as one more pass over that share of each document (the "
                            "instances of a whole pass that start in a seeded contiguous share of its tokens): 2.5 "
                            "is two passes over every document and a third over half of each, 0.2 one pass over a "
                            "fifth; e.g. books=2 to see books twice as often. The plan prints each corpus's expected "
                            "share of the tokens, the job's last lines the share it wrote, with a warning and better "
                            "weights when they differ by over 5 points; recorded in the manifest (default: 1 for "
                            "every corpus)")
        p.add_argument("--mix-corpora", action="store_true",
                       help="several corpora: one random-next pool over all of them (by default each corpus pairs "
                            "in its own buckets: a B segment never comes from another corpus)")

    def check(self, p, args):
        weights = args.corpus_weights or {}
        for kind in weights:
            if kind not in dict(args.corpora):
                p.error(f"--corpus-weights {kind}=...: no {kind} input")
        if weights and args.mix_corpora:
            p.error("--corpus-weights with --mix-corpora: weights set each corpus's dupe passes, which one mixed "
                    "pool cannot keep apart")

    def build(self, args) -> tuple[dict[str, float], bool]:
        return dict(args.corpus_weights or {}), args.mix_corpora


# ---------------------------------------------------------------------------------------------- pairs and masks

RULE = pool.PairParams()   # google's pairing defaults


class Pairs(Group):
    """pairs, prepare: tokenization and google's pairing -> settings.Pairing."""

    def add(self, p):
        p.add_argument("--vocab", type=vocab_file, help="google-format vocab.txt (or --tokenizer)")
        p.add_argument("--tokenizer", metavar="FILE",
                       help="instead of --vocab: a `tokenizers` tokenizer.json (byte-level BPE as GPT-2's and "
                            "OLMo's, Unigram, WordPiece) with BERT's special tokens: its cls and sep from its "
                            "post-processor, [MASK]/<mask> and [PAD]/<pad> by name (`bertprep vocab --extend` adds "
                            "them); its own normalizer decides casing")
        p.add_argument("--special-tokens", metavar="ROLE=TOKEN,...",
                       help="with --tokenizer: the tokens of BERT's roles where the tokenizer does not say, e.g. "
                            "cls=<s>,sep=</s>,mask=<mask>,pad=<pad>")
        casing = p.add_mutually_exclusive_group()
        casing.add_argument("--cased", dest="casing", action="store_const", const="cased",
                            help="no lowercasing, accents kept. Default: as the vocab says (cased when at least "
                                 f"{100 * vocab_fit.CASED_SHARE:g}%% of its entries have an upper-case letter, as "
                                 "google's cased vocabs; its uncased have none); a flag the vocab contradicts is "
                                 "refused")
        casing.add_argument("--uncased", dest="casing", action="store_const", const="uncased",
                            help="lowercase and strip accents (google's do_lower_case); default: as the vocab says")
        p.add_argument("--max-seq-length", type=positive_int, default=RULE.max_seq_length)
        p.add_argument("--dupe-factor", type=positive_int, default=RULE.dupe_factor,
                       help=f"passes over each document, each with new randomness (google's default is "
                            f"{GOOGLE_DUPE_FACTOR}; BERT's data used 10 with a different mask each pass)")
        p.add_argument("--short-seq-prob", type=probability, default=None,
                       help=f"share of nsp/sop instances with a random shorter target length (default "
                            f"{RULE.short_seq_prob}; not for --objective none, whose rows are filled)")
        p.add_argument("--objective", choices=pool.OBJECTIVES, default=RULE.objective,
                       help="nsp: google's next-sentence pairs (default); sop: ALBERT's sentence order (B always "
                            "follows A in its document, swapped half of the time, label 1 = swapped); none: "
                            "RoBERTa's rows of whole sentences up to --max-seq-length, segment ids 0, no second "
                            "objective. A dupe pass of `none` is the same rows masked anew; --pack puts several "
                            "short rows (documents) into one, each its own instance")
        p.add_argument("--cross-documents", action="store_true",
                       help="with --objective none: a row goes on into the next document of its bucket after a "
                            "[SEP] (RoBERTa's FULL-SENTENCES; without it DOC-SENTENCES: a row ends with its document)")
        p.add_argument("--split-sentences", action="store_true",
                       help="with --objective none: fill every row to the last position, the sentence it cuts going "
                            "on in the next row (HF run_mlm's group_texts); without it only whole sentences, and a "
                            "sentence longer than a row is cut (counted)")
        p.add_argument("--bucket-docs", type=positive_int, default=default(settings.Pairing, "bucket_docs"),
                       help="documents per random-next pool: random B segments come from the same bucket (google's "
                            "pool is the whole corpus; a pool of thousands is statistically the same for NSP). At "
                            "least 2; below 1,000 it is warned about")
        p.add_argument("--min-document-tokens", type=nonnegative_int, metavar="N",
                       default=default(settings.Pairing, "min_document_tokens"),
                       help="pair only documents of at least N tokens as tokenized (the document's own: the [CLS] "
                            "and [SEP] of its instances do not count), so that a long-context phase trains on rows "
                            "its documents fill (NeoBERT's 4,096-token phase: documents of 1,024 or more). A "
                            "validation set's documents are held to it too. Each corpus's documents and tokens kept "
                            "and dropped are counted, in the manifest's min_document_tokens and the job's last "
                            "lines; a corpus left without a document fails the job before it publishes, naming its "
                            "longest (exit 2). Default 0: every document")
        add_pair_parallelism(p, "workers that pair a corpus of few buckets, each spilling a copy of the pool, and "
                                "that tokenize an input of few files (0: the local worker count, or 32 on a "
                                "distributed runner); the output does not depend on it")

    def check(self, p, args):
        # a local vocab or tokenizer is read now (once: the job reads the plan's value); one on an object store by the
        # job, once the launcher has found the store reachable (reading it here would wait out Beam's retries first)
        try:
            args.vocabulary = vocabularies.given(args.vocab, args.tokenizer, args.special_tokens, args.casing)
            if storage.is_local(args.vocabulary.path):
                args.vocabulary.check()
        except vocabularies.VocabularyError as e:
            p.error(str(e))
        if args.bucket_docs < 2:
            p.error(f"--bucket-docs {args.bucket_docs}: a random-next pool needs at least 2 documents (a 1-document "
                    "pool would draw 'random' segments from the same document)")
        if args.bucket_docs < 1000:
            flags.warn(f"--bucket-docs {args.bucket_docs}: pools under ~1,000 documents draw random-next segments "
                       "from few documents, unlike google's whole-corpus pool")
        if args.objective != "none":
            for flag in ("cross_documents", "split_sentences"):
                if getattr(args, flag):
                    p.error(f"--{flag.replace('_', '-')} without --objective none (it shapes full-sentence rows)")
        elif args.short_seq_prob is not None:
            p.error("--short-seq-prob with --objective none: its rows are filled to --max-seq-length")
        if args.max_seq_length < 5:
            p.error(f"--max-seq-length {args.max_seq_length}: [CLS] A [SEP] B [SEP] needs at least 5")

    def build(self, args) -> settings.Pairing:
        shape = {} if args.short_seq_prob is None else {"short_seq_prob": args.short_seq_prob}
        rule = pool.PairParams(max_seq_length=args.max_seq_length, dupe_factor=args.dupe_factor,
                                objective=args.objective, cross_documents=args.cross_documents,
                                split_sentences=args.split_sentences, **shape)
        return settings.Pairing(args.vocabulary, rule, args.bucket_docs, args.pair_parallelism,
                                args.min_document_tokens)


def add_pair_parallelism(p: flags.Parser, help: str) -> None:
    p.add_argument("--pair-parallelism", type=nonnegative_int, default=default(settings.Pairing, "parallelism"),
                   help=help)


MASK = masking.MaskRecipe()   # google's masking defaults


def mask_recipe(args: argparse.Namespace) -> masking.MaskRecipe:
    """The masking flags a command has -> its recipe: `mask`, `prepare` and `train` have them all (the rate, the cap,
    the unit, the replacement split). The one builder of both, so that a flag means the same to the jobs and the
    trainer (model/plan.py's TrainPlan.from_flat reads a checkpoint's flat plan through the same
    MaskRecipe.from_json)."""
    return masking.MaskRecipe.from_json(vars(args))


class Mask(Group):
    """mask, prepare: google's masking rule -> settings.Masking (the validation set's share apart)."""

    def add(self, p):
        p.add_argument("--masked-lm-prob", type=probability, default=MASK.masked_lm_prob)
        p.add_argument("--max-predictions-per-seq", type=positive_int, default=MASK.max_predictions_per_seq,
                       help="predictions an instance holds at most (at most --max-seq-length). Default: max(20, "
                            "round(--max-seq-length x --masked-lm-prob)), the smallest that never caps google's "
                            "count rule (round(n x p) of an instance of n tokens) and never below google's 20: 20 at "
                            "L=128, 77 at L=512 (p=0.15). A smaller value masks less than --masked-lm-prob of long "
                            "instances and is warned about")
        p.add_argument("--mask-token-prob", type=probability, default=MASK.mask_token_prob,
                       help="chosen tokens replaced by [MASK]")
        p.add_argument("--random-token-prob", type=probability, default=MASK.random_token_prob,
                       help="chosen tokens replaced by a random id (drawn from the non-special tokens; google draws "
                            "from the whole vocab, [CLS]/[SEP]/[PAD] included)")
        p.add_argument("--whole-word-mask", action="store_true",
                       help="mask whole words, one 80/10/10 draw per word (google draws per piece)")
        p.add_argument("--ngram-max", type=positive_int, default=MASK.ngram_max,
                       help="mask spans of 1..n whole words (weights 1/n)")

    def check(self, p, args):
        refusal = mask_recipe(args).split_refusal()
        if refusal:
            p.error(refusal)
        check_lengths(p, args)

    def build(self, args) -> settings.Masking:
        return settings.Masking(mask_recipe(args), getattr(args, "validation_masked_lm_prob", None))


def check_lengths(p: flags.Parser, args) -> None:
    """--max-predictions-per-seq at most --max-seq-length, where the command has both."""
    length = getattr(args, "max_seq_length", None)
    if length is not None and (args.max_predictions_per_seq or 0) > length:
        p.error(f"--max-predictions-per-seq {args.max_predictions_per_seq} exceeds --max-seq-length {length}")


class ValidationMasking(Group):
    """--validation-masked-lm-prob; `source`: where the validation set comes from, for --help. Read by Mask.build."""

    def __init__(self, source: str, needs_split: bool):
        self.source, self.needs_split = source, needs_split

    def add(self, p):
        p.add_argument("--validation-masked-lm-prob", type=probability, default=None,
                       help=f"mask the validation set at this share instead of --masked-lm-prob ({self.source}; "
                            "ModernBERT trains at 0.3 and evaluates at 0.15)")

    def check(self, p, args):
        if self.needs_split and args.validation_masked_lm_prob is not None and args.validation_documents is None \
                and args.validation_fraction is None:
            p.error("--validation-masked-lm-prob without --validation-documents or --validation-fraction")


DEFAULT_K = (f"{packing.DEFAULT_SEQUENCES_PER_PACK}; for --objective none one per {packing.NONE_POSITIONS_PER_SLOT} "
             f"positions of --max-seq-length, at least {packing.DEFAULT_SEQUENCES_PER_PACK}: 16 at 1,024, 128 at 8,192")


def sequences_per_pack(text: str) -> int:
    return flags.ranged_int(text, 1, packing.MAX_SEQUENCES_PER_PACK)


class Pack(Group):
    """mask, prepare: --pack -> instances a row holds at most, or None without it."""

    def add(self, p):
        p.add_argument("--pack", action="store_true",
                       help="write packed shards: up to --max-sequences-per-pack instances a row, no padding "
                            "between them (the trainer keeps attention inside each); the same instances as without "
                            "it")
        p.add_argument("--max-sequences-per-pack", type=sequences_per_pack, default=None,
                       help=f"with --pack: instances a row may hold, 1..{packing.MAX_SEQUENCES_PER_PACK} (default "
                            f"{DEFAULT_K})")

    def check(self, p, args):
        if args.max_sequences_per_pack is not None and not args.pack:
            p.error("--max-sequences-per-pack without --pack")

    def build(self, args) -> int | None:
        return (args.max_sequences_per_pack or 0) if args.pack else None   # 0: the objective's default at L


class GoogleShards(Group):
    """pack, convert: what shards made by google's tool (no manifest) were made with -> settings.MadeWith;
    `vocab_use`: what the command does with the vocab."""

    def __init__(self, vocab_use: str):
        self.vocab_use = vocab_use

    def add(self, p):
        p.add_argument("--max-seq-length", type=positive_int, default=None,
                       help="shards without a manifest (google's): their max_seq_length")
        p.add_argument("--max-predictions-per-seq", type=positive_int, default=None,
                       help="shards without a manifest: their max_predictions_per_seq")
        p.add_argument("--vocab", default=None, type=vocab_file,
                       help=f"shards without a manifest: their vocab.txt ({self.vocab_use}); with a manifest, "
                            "optional: refuse unless the shards were made with it")

    def check(self, p, args):
        check_lengths(p, args)

    def build(self, args) -> settings.MadeWith:
        return settings.MadeWith(args.max_seq_length, args.max_predictions_per_seq, args.vocab)


# ---------------------------------------------------------------------------------------------- documents

DEDUP = dedup.DedupParams()   # the defaults bench/bench_dedup.py chose
DEDUP_FLAGS = {"near_threshold": "threshold", "num_perm": "num_perm", "bands": "bands",
               "shingle_words": "shingle_words", "min_paragraph_chars": "min_paragraph_chars",
               "max_paragraph_copies": "max_paragraph_copies",
               "max_paragraph_loss": "max_paragraph_loss"}   # flag -> DedupParams field


def jaccard_threshold(text: str) -> float:
    return flags._number(float, text, lambda v: 0 < v <= 1, "a Jaccard similarity is in (0, 1]")


def paragraph_loss(text: str) -> float:
    return flags._number(float, text, lambda v: 0 < v <= 1, "a share of a document's bytes is in (0, 1]; 1 never "
                                                            "drops a document for its repeated paragraphs")


class Dedup(Group):
    """The dedup passes: `bertprep dedup`'s own flags, or with `switch` prepare's, which take them after --dedup
    -> DedupParams (None: prepare without --dedup)."""

    def __init__(self, switch: bool):
        self.switch = switch

    def add(self, p):
        if self.switch:
            p.add_argument("--dedup", action="store_true",
                           help="deduplicate the documents before pairing: exact and near-duplicate documents and "
                                "repeated paragraphs out (as `bertprep dedup`; its flags below need --dedup)")
        d = (lambda name: None) if self.switch else (lambda name: getattr(DEDUP, DEDUP_FLAGS[name]))
        p.add_argument("--no-exact", action="store_true", help="skip the exact pass (same normalized text)")
        p.add_argument("--no-near", action="store_true", help="skip the near-duplicate pass (MinHash LSH)")
        p.add_argument("--no-paragraphs", action="store_true", help="skip the repeated-paragraph pass")
        p.add_argument("--near-threshold", type=jaccard_threshold, default=d("near_threshold"),
                       help="estimated Jaccard similarity of word 5-grams that makes two documents near duplicates "
                            f"(default {DEDUP.threshold})")
        p.add_argument("--num-perm", type=positive_int, default=d("num_perm"),
                       help=f"MinHash signature values per document (default {DEDUP.num_perm})")
        p.add_argument("--bands", type=positive_int, default=d("bands"),
                       help=f"LSH bands; must divide --num-perm (default {DEDUP.bands}: 8 rows a band; "
                            "bench/bench_dedup.py prints the curve the defaults were chosen by)")
        p.add_argument("--shingle-words", type=positive_int, default=d("shingle_words"),
                       help=f"words a shingle (default {DEDUP.shingle_words})")
        p.add_argument("--min-paragraph-chars", type=positive_int, default=d("min_paragraph_chars"),
                       help="paragraphs shorter than this (normalized) are never dropped as repeats (default "
                            f"{DEDUP.min_paragraph_chars})")
        p.add_argument("--max-paragraph-copies", type=positive_int, default=d("max_paragraph_copies"),
                       help="a paragraph in more documents than this is kept in the first (by id) only (default "
                            f"{DEDUP.max_paragraph_copies})")
        p.add_argument("--max-paragraph-loss", type=paragraph_loss, default=d("max_paragraph_loss"), metavar="F",
                       help="a document whose repeated paragraphs held more than this share of its bytes is dropped "
                            "whole, counted and reported, not left as fragments (default "
                            f"{DEDUP.max_paragraph_loss}; 1: never)")

    def check(self, p, args):
        if self.switch:
            needs_switch(p, args, "dedup", ("no_exact", "no_near", "no_paragraphs", *DEDUP_FLAGS))
        num_perm = args.num_perm or DEDUP.num_perm
        bands = args.bands or DEDUP.bands
        if num_perm % bands:
            p.error(f"--bands {bands} does not divide --num-perm {num_perm}: every band needs the same number of "
                    "rows")
        if args.no_exact and args.no_near and args.no_paragraphs:
            p.error("--no-exact, --no-near and --no-paragraphs: every pass is off, nothing to do")

    def build(self, args) -> dedup.DedupParams | None:
        if self.switch and not args.dedup:
            return None
        values = {field: getattr(args, flag) for flag, field in DEDUP_FLAGS.items() if getattr(args, flag) is not None}
        return dataclasses.replace(DEDUP, exact=not args.no_exact, near=not args.no_near,
                                   paragraphs=not args.no_paragraphs, seed=args.seed, **values)


def fraction(text: str) -> float:
    return flags._number(float, text, lambda v: 0 < v < 0.5,
                         "a fraction of the tokens is in (0, 0.5): the validation side is the smaller one")


class Split(Group):
    """pairs, prepare: the validation split, by document (pipeline/algorithms/split.py) -> SplitParams or None."""

    def add(self, p):
        p.add_argument("--validation-documents", type=positive_int, default=None, metavar="N",
                       help="hold out N documents (a seeded draw by id, after --dedup; per corpus in proportion to "
                            "its documents) as a validation set in OUTPUT/validation/, never seen by training: "
                            "neither their instances nor their text as a random next segment. Exactly N whole "
                            "documents: the draws of every document are counted first (the documents pass one more "
                            "shuffle); where they are over 0.2 of a corpus's tokens (one of a few books) the job "
                            "warns and names --validation-fraction")
        p.add_argument("--validation-fraction", type=fraction, default=None, metavar="F",
                       help="hold out F of each corpus's tokens (under 0.5): whole documents in the order of a "
                            "seeded draw by id while they fit under F of the corpus's text (characters as the token "
                            "proxy), the rest cut from the next one between paragraphs (its head or tail held out "
                            "as a document of its own, the rest trained on: no text on both sides), so a corpus of "
                            "a few books holds out F too. The job prints each corpus's share on each side beside F, "
                            "and warns when one is over 5 points off (the other way to make OUTPUT/validation/)")

    def check(self, p, args):
        if args.validation_documents is not None and args.validation_fraction is not None:
            p.error("--validation-documents and --validation-fraction: give one of them")

    def build(self, args) -> split.SplitParams | None:
        if args.validation_documents is None and args.validation_fraction is None:
            return None
        return split.SplitParams(args.seed, args.validation_documents, args.validation_fraction)


JANITOR = contamination.Params()   # lm-eval's Janitor's defaults
JANITOR_FLAGS = ("ngram", "window", "min_fragment", "max_matches")


class Decontaminate(Group):
    """The decontamination flags: `bertprep decontaminate`'s own, or with `switch` prepare's (after --dedup, before
    a validation split), which need --decontaminate -> settings.Decontamination, every eval file read and checked
    (None: prepare without --decontaminate)."""

    def __init__(self, switch: bool):
        self.switch = switch

    def add(self, p):
        if self.switch:
            p.add_argument("--decontaminate", default=None, metavar="FILE[,FILE...]",
                           help="drop the n-grams of these eval sets from the documents before pairing (after "
                                "--dedup, before a validation split), as `bertprep decontaminate --against` does")
        else:
            p.add_argument("--against", required=True, metavar="FILE[,FILE...]",
                           help="eval sets: SQuAD .json (v1.1 or v2.0: every context, question and answer), .jsonl "
                                "(every string, or --against-fields) or .txt (one example a line); .gz too")
        d = (lambda name: None) if self.switch else (lambda name: getattr(JANITOR, name))
        p.add_argument("--against-fields", type=names, default=(), metavar="NAME,...",
                       help=".jsonl eval sets: read only these top-level fields (default: every string)")
        p.add_argument("--ngram", type=positive_int, default=d("ngram"),
                       help=f"words an n-gram (lm-eval's Janitor: {JANITOR.ngram})")
        p.add_argument("--window", type=nonnegative_int, default=d("window"),
                       help=f"characters cut either side of a match (default {JANITOR.window})")
        p.add_argument("--min-fragment", type=nonnegative_int, default=d("min_fragment"),
                       help="pieces of a cut document this long or shorter are dropped (default "
                            f"{JANITOR.min_fragment})")
        p.add_argument("--max-matches", type=nonnegative_int, default=d("max_matches"),
                       help="a document with more matching n-grams than this (overlapping ones each count) is "
                            f"dropped whole (default {JANITOR.max_matches})")

    def check(self, p, args):
        if self.switch:
            needs_switch(p, args, "decontaminate", ("against_fields", *JANITOR_FLAGS))

    def build(self, args) -> settings.Decontamination | None:
        spec = args.decontaminate if self.switch else args.against
        if not spec:
            return None
        # Beam's modules, imported when a job is planned, not when any command's flags are parsed
        from pipeline.beam import decontaminate as decontamination
        from pipeline.jobs import sources

        paths, names_, against = sources.eval_sets(spec, tuple(args.against_fields),
                                                   "decontaminate" if self.switch else "against")
        janitor = dataclasses.replace(JANITOR, **{k: getattr(args, k) for k in JANITOR_FLAGS
                                                  if getattr(args, k) is not None})
        params = decontamination.DecontaminateParams(tuple(paths), tuple(names_), tuple(args.against_fields), janitor)
        return settings.Decontamination(params, tuple(against))
