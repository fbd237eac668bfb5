"""The composite Beam transforms every pipeline is built from. Each is a thin wrapper: the work is done by
pure functions in corpora/, pipeline/text/, pipeline/algorithms/ and pipeline/formats/ (cleaning, splitting,
pairing, masking, encoding).

    ExtractWikipedia | ExtractBooks | ExtractFiles   files       -> Document (`extract`: a corpus kind's)
    ReadDocuments                                    doc shards  -> Document
    SpreadDocuments                                  Document    -> Document, dealt over the workers (run files)
    Tokenize                                         Document    -> TokenizedDocument
    KeepLongDocuments                                TokenizedDocument -> those of at least N tokens (counted)
    MakePairs                                        TokenizedDocument -> [PairInstance] (batches), through
                                                     sorted run files, one bucket per pairing worker
    ReadPairs                                        pair files  -> [PairInstance]
    ReadShards                                       shard files -> [(key, google Example bytes, stats)]
    MaskPairs                                        [PairInstance] -> [(sort key, google Example bytes, stats)]

Data is reshuffled only where it is small (file names, read ranges): Beam's local runner holds a reshuffled
collection in memory whole, so documents and instances stream through fused stages, and the big regroupings
(documents over the workers, tokenized documents into buckets, records into shards) go through
pipeline/beam/shuffle.py: sorted run files on the local runner, the runner's GroupByKey on a distributed one.
"""
from __future__ import annotations

import collections
import itertools
import logging
import math
import os
import sys
import tempfile
import time
from typing import Callable, Iterable, Iterator

import apache_beam as beam
import numpy as np

from corpora import books, kinds, text
from corpora.kinds import Kind, ReadParams
from pipeline.algorithms import masking, pairs
from pipeline.algorithms.pool import WordStarts, spill_pool
from pipeline.beam import shuffle, tally
from pipeline.beam.options import is_local_runner
from pipeline.formats import documents, pair_records, schema, tfrecord
from pipeline.formats.documents import Count, Document
from pipeline.text.vocabularies import Vocabulary


class Progress:
    """A progress line on stderr every `interval` seconds from a worker: counts and rates since it started.

    Beam's counters reach the launcher only when a local run ends, so each worker process reports for itself.
    """

    interval = 15.0

    def __init__(self, stage: str):
        self.stage, self.counts, self.start, self.last = stage, {}, None, 0.0

    def add(self, **counts: int) -> None:
        now = time.monotonic()
        if self.start is None:
            self.start = self.last = now
        for name, n in counts.items():
            self.counts[name] = self.counts.get(name, 0) + n
        if now - self.last >= self.interval:
            self.last = now
            seconds = max(now - self.start, 1e-6)
            rates = ", ".join(f"{n:,} {name} ({n / seconds:,.0f}/s)" for name, n in self.counts.items())
            print(f"[{self.stage} worker {os.getpid()}] {rates}", file=sys.stderr, flush=True)


class _Counted(tally.DoFn):
    """Runs a generator of items and `Count` events; counts go to the tally in `namespace`, items on."""

    def __init__(self, namespace: str, fn: Callable[..., Iterable], **kwargs):
        self.namespace, self.fn, self.kwargs = namespace, fn, kwargs

    def process(self, element):
        for item in self.fn(element, **self.kwargs):
            if isinstance(item, Count):
                self.count(self.namespace, item.name, item.n, item.where)
            else:
                yield item


def _read_named(unit: tuple[str, str], reader: Callable[..., Iterable], **kwargs) -> Iterable:
    """A read unit (path, name for the ids) through a corpus reader."""
    path, name = unit
    return reader(path, name=name, **kwargs)


class ExtractWikipedia(beam.PTransform):
    """MediaWiki XML dumps -> article Documents. Multistream dumps are read in parallel ranges."""

    def __init__(self, files: list[str], read: ReadParams = ReadParams(), kind: Kind = kinds.WIKIPEDIA,
                 streams_per_read: int = 10):
        from corpora import wikipedia   # mwparserfromhell and the wikitext tables: for a job that reads dumps only
        from corpora.wikipedia import templates

        super().__init__()
        self.kind, self.skip_disambiguation, self.skip_bad_files = kind, read.skip_disambiguation, read.skip_bad_files
        self.disambiguation_templates = frozenset(map(templates.normal_name, read.disambiguation_templates))
        self.dumps = wikipedia.plan_dumps(files, read.wiki_index, streams_per_read)   # read units, planned once

    @property
    def reads(self) -> list:   # the read units (ranges), as for the other corpora
        return [read for dump in self.dumps for read in dump.ranges()]

    def expand(self, pipeline):
        from corpora import wikipedia   # as in __init__

        if not is_local_runner(pipeline.pipeline.options):   # where many workers wait on one
            for line in wikipedia.unsplit_warnings(self.dumps):
                logging.warning("%s", line)
        return (pipeline
                | "PlanReads" >> beam.Create(self.dumps)
                | "CutRanges" >> beam.FlatMap(wikipedia.DumpPlan.ranges)   # here, not in the job graph
                | "SpreadReads" >> beam.Reshuffle()
                | "ReadPages" >> tally.ParDo(_Counted(self.kind.name, wikipedia.read_pages,
                                                     skip_bad_files=self.skip_bad_files))
                # no Reshuffle of pages: the local runner would hold a whole dump's wikitext in memory. Work is
                # spread by the read ranges instead (about 1,000 pages each in a multistream dump).
                | "CleanPages" >> tally.ParDo(_Counted(self.kind.name, wikipedia.page_to_document,
                                                      skip_disambiguation=self.skip_disambiguation,
                                                      disambiguation_templates=self.disambiguation_templates)))


class ExtractBooks(beam.PTransform):
    """Book files, directories or tar archives -> one Document per book (or per bounded chunk of a big one)."""

    def __init__(self, files: list[str], read: ReadParams = ReadParams(), kind: Kind = kinds.BOOKS):
        super().__init__()
        self.kind, self.max_document_bytes, self.skip_bad_files = kind, read.max_document_bytes, read.skip_bad_files
        planned = books.plan(files)
        names = text.relative_names(planned.reads)   # ids unique whatever the layout
        self.reads = [(p, names[p]) for p in planned.reads]   # read units, planned once
        self.unread = planned.unread   # a directory's other entries: counted and named in the job

    def expand(self, pipeline):
        kwargs = {"skip_bad_files": self.skip_bad_files}
        if self.max_document_bytes:
            kwargs["max_document_bytes"] = self.max_document_bytes
        if self.unread:
            _ = (pipeline
                 | "ListUnread" >> beam.Create([tuple(self.unread)])
                 | "CountUnread" >> tally.FlatMap(_count_unread, self.kind.name))
        return (pipeline
                | "ListBooks" >> beam.Create(self.reads)
                | "SpreadFiles" >> beam.Reshuffle()
                | "ReadBooks" >> tally.ParDo(_Counted(self.kind.name, _read_named, reader=books.read_books,
                                                      **kwargs)))


def _count_unread(unread: tuple[str, ...], namespace: str, count) -> Iterator:
    """The entries of a books directory that are not read -> their count, the first few named (nothing out)."""
    count(namespace, books.UNREAD, len(unread), where=unread)
    return iter(())


class ExtractFiles(beam.PTransform):
    """Files of a kind read a unit a file by its entry's reader (corpora/kinds.py) -> Documents: google's format
    (a sentence a line, a blank line between documents: presplit), JSON Lines or Parquet (C4, Dolma, FineWeb: a
    Document a record, its line numbers and row indexes naming documents and its ids kept unique)."""

    def __init__(self, files: list[str], read: ReadParams = ReadParams(), kind: Kind = kinds.TEXT):
        super().__init__()
        self.kind, self.kwargs = kind, {option: getattr(read, option) for option in kind.options}
        names = text.relative_names(sorted(files))   # ids unique whatever the layout
        self.reads = [(f, names[f]) for f in sorted(files)]   # read units: one per file

    def expand(self, pipeline):
        name = self.kind.name
        return (pipeline
                | "ListFiles" >> beam.Create(self.reads)
                | "SpreadFiles" >> beam.Reshuffle()
                | f"Read{name.capitalize()}" >> tally.ParDo(_Counted(name, _read_named, reader=kinds.load(
                    self.kind.reader), **self.kwargs)))


EXTRACT = {"dump": ExtractWikipedia, "books": ExtractBooks, "files": ExtractFiles}   # by a kind's `extract`


def extract(kind: str, files: list[str], read: ReadParams) -> beam.PTransform:
    """The reader of a corpus kind's files: the Extract transform its entry names (corpora/kinds.py)."""
    entry = kinds.KINDS[kind]
    return EXTRACT[entry.extract](files, read, entry)


class ReadDocuments(beam.PTransform):
    """Document shards (gzip JSON Lines written by `extract`) -> Documents, spread over workers."""

    def __init__(self, files: list[str]):
        super().__init__()
        self.files = files

    def expand(self, pipeline):
        return (pipeline
                | "ListShards" >> beam.Create(sorted(self.files))
                | "SpreadShards" >> beam.Reshuffle()
                | "ReadLines" >> beam.FlatMap(documents.read_file))


def _read_documents(sliced: tuple[shuffle.Slice, object], count) -> Iterator[Document]:
    n = 0
    for record in sliced[1].payloads(count):
        n += 1
        yield Document.from_json(record)
    count("spread", "documents", n)


class SpreadDocuments(beam.PTransform):
    """Documents -> the same Documents, dealt over `ranges` work items through the shuffle, so that tokenization
    spreads over every worker even when the input has fewer read units (files, dump ranges) than workers: a
    single google-format file, or the few document shards of a small `extract`. Without it the worker that read a
    file tokenizes all of it (tokenization is fused with reading; a Reshuffle of the documents would make Beam's
    local runner hold them all). The documents, and so the output, are the same either way."""

    def __init__(self, config: shuffle.ShuffleConfig, ranges: int):
        super().__init__()
        self.config, self.ranges = config, ranges

    def expand(self, docs):
        if self.ranges <= 1:   # the reads spread the work already
            return docs
        return (docs
                | "ToRecords" >> beam.Map(lambda d: [(d.id, d.to_json().encode("utf-8"), ())])
                | "Deal" >> shuffle.Shuffle("spread", "spread", shuffle.plan_ranges(self.ranges), 0, self.config)
                | "ReadDocuments" >> tally.FlatMap(_read_documents))


# What Tokenize counts that the manifests read (pipeline/jobs/outputs.py); also tokenize/sentences and /tokens
TOKENIZED = "tokenize/documents"               # the documents with text left, passed on (a manifest's documents)
EMPTY_DOCUMENTS = "tokenize/empty_documents"   # those with none: no instance from them
TOKENS = "tokenize/tokens"                     # the tokens of the documents passed on
UNK_TOKENS = "tokenize/unk_tokens"             # those the vocab could not place ([UNK]); counted when any


def unk_share(values: dict[str, int]) -> tuple[int, int] | None:
    """([UNK] tokens, tokens) a job tokenized, from its counters; None for a job that tokenized nothing."""
    return (values.get(UNK_TOKENS, 0), values[TOKENS]) if values.get(TOKENS) else None


class _Tokenize(tally.DoFn):
    def __init__(self, vocabulary: Vocabulary, words: bool = True):
        self.vocabulary, self.words = vocabulary, words

    def setup(self):   # once per worker: the tokenizer is never pickled with the pipeline
        self.progress = Progress("tokenize")
        # Beam runs one worker per core; HF's own thread pool on top would only oversubscribe the cores
        os.environ.setdefault("RAYON_NUM_THREADS", "1")
        self.encode = self.vocabulary.encoder(self.words)
        unk = self.vocabulary.unknown_id()
        # a tokenizer.json's pools mark a word's continuation as ~id (pool.WordStarts): [UNK] either way
        self.unk = None if unk is None else np.array([unk, ~unk], np.int32)

    def process(self, doc: Document):
        tokenized = pairs.TokenizedDocument.from_sentences(doc.id, self.encode(doc))
        if tokenized.num_sentences == 0:
            self.count(*tally.parts(EMPTY_DOCUMENTS))    # nothing left after tokenization: no instance from it
            return
        self.count(*tally.parts(TOKENIZED))
        self.count("tokenize", "sentences", tokenized.num_sentences)
        self.count(*tally.parts(TOKENS), len(tokenized.tokens))
        unk = 0 if self.unk is None else int(np.isin(tokenized.tokens, self.unk).sum())
        if unk:
            self.count(*tally.parts(UNK_TOKENS), unk)
        self.progress.add(documents=1, tokens=len(tokenized.tokens))
        yield tokenized


class Tokenize(beam.PTransform):
    """Documents -> sentences (built-in splitter) -> ids (google's WordPiece, or a tokenizer.json's with word
    starts marked: pool.WordStarts, where `words`: something masks by words), with the tokenizer loaded once per
    worker."""

    def __init__(self, vocabulary: Vocabulary, words: bool = True):
        super().__init__()
        self.vocabulary, self.words = vocabulary, words

    def expand(self, docs):
        return docs | "SplitAndTokenize" >> tally.ParDo(_Tokenize(self.vocabulary, self.words))


# --min-document-tokens' counts, a namespace a side: <kind>_kept_documents, _kept_tokens, _dropped_documents,
# _dropped_tokens, and <kind>_longest, the corpus's longest document (a maximum: tally's DoFn.most)
LENGTHS, HELD_OUT_LENGTHS = "min_document_tokens", "validation_min_document_tokens"
LENGTH_COUNTS = ("kept_documents", "kept_tokens", "dropped_documents", "dropped_tokens", "longest")


def length_namespace(held: bool) -> str:
    """The namespace of a side's --min-document-tokens counts: the training side's, or the validation set's."""
    return HELD_OUT_LENGTHS if held else LENGTHS


class _KeepLong(tally.DoFn):
    def __init__(self, min_tokens: int, namespace: str):
        self.min_tokens, self.namespace = min_tokens, namespace

    def process(self, document: pairs.TokenizedDocument):
        kind, n = corpus_of(document.id), len(document.tokens)
        kept = n >= self.min_tokens
        self.count(self.namespace, f"{kind}_{'kept' if kept else 'dropped'}_documents")
        self.count(self.namespace, f"{kind}_{'kept' if kept else 'dropped'}_tokens", n)
        self.most(self.namespace, f"{kind}_longest", n)   # named by the refusal of a corpus left empty
        if kept:
            yield document


class KeepLongDocuments(beam.PTransform):
    """TokenizedDocuments -> those of at least `min_tokens` tokens, their own (the [CLS] and [SEP] pairing adds are
    the instance's), each corpus's kept and dropped counted in `namespace` (LENGTH_COUNTS): a long-context phase
    trains on documents that fill its rows (NeoBERT's 4,096-token phase on documents of 1,024 tokens or more)."""

    def __init__(self, min_tokens: int, namespace: str = LENGTHS):
        super().__init__()
        self.min_tokens, self.namespace = min_tokens, namespace

    def expand(self, docs):
        return docs | "KeepLong" >> tally.ParDo(_KeepLong(self.min_tokens, self.namespace))


def length_counts(values: dict[str, int], namespace: str = LENGTHS) -> dict[str, dict]:
    """A job's --min-document-tokens counts -> {kind: {kept_documents, kept_tokens, dropped_documents,
    dropped_tokens, longest, kept_token_share}}: documents in = kept + dropped, each corpus's."""
    prefix = namespace + "/"
    kinds = sorted({k[len(prefix):].rsplit("_", 2)[0] for k in values if k.startswith(prefix) and
                    k.endswith(("_kept_documents", "_dropped_documents"))})
    out = {}
    for kind in kinds:
        c = {what: values.get(f"{prefix}{kind}_{what}", 0) for what in LENGTH_COUNTS}
        c["kept_token_share"] = c["kept_tokens"] / max(1, c["kept_tokens"] + c["dropped_tokens"])
        out[kind] = c
    return out


BATCH = 512   # instances per element after pairing: Beam's per-element cost is paid once per batch


class _PairBucket(tally.DoFn):
    def __init__(self, vocabulary: Vocabulary, params: pairs.PairParams, seed: int):
        self.vocabulary, self.params, self.seed = vocabulary, params, seed

    def setup(self):
        self.word_starts = WordStarts(self.vocabulary.word_starts())
        self.progress = Progress("pairs")

    def process(self, sliced: tuple[shuffle.Slice, object]):
        work, group = sliced
        if work.part == 0:
            self.count("pairs", "buckets")
        # the bucket's documents (the whole pool), spilled to a local file so that only their sentence ends stay
        # in memory
        with tempfile.TemporaryFile(prefix="bertprep-pool-") as spill:
            pool = spill_pool(group.payloads(self.count), spill)
            mine = pairs.split_pool(pool, work.parts)[work.part]   # every part pairs its share of the whole pool
            batch, left_out = [], collections.Counter()
            for instance in pairs.pairs_for_pool(pool, self.params, self.word_starts, self.seed, only=mine,
                                                 stats=left_out):
                batch.append(instance)
                if len(batch) == BATCH:
                    yield self._counted(batch)
                    batch = []
            if batch:
                yield self._counted(batch)
            for name, n in sorted(left_out.items()):   # what an objective leaves out or cuts, once a bucket
                self.count("pairs", name, n)

    def _counted(self, batch):
        self.progress.add(instances=len(batch))
        self.count("pairs", "instances", len(batch))
        self.count("pairs", "random_next", sum(i.is_random_next for i in batch))
        return batch


BUCKET_MAX_TOKENS = 1 << 28   # a bucket's tokens wait in its pairing worker's spill file: at most 512 MiB


def plan_buckets(bucket_docs: int, parallelism: int, documents: float, tokens: float) -> list[shuffle.Slice]:
    """Slices (bucket, lo, hi, part, parts): ceil(documents / bucket_docs) buckets (more if a bucket would hold
    over BUCKET_MAX_TOKENS tokens), each an even share of the document-id hash, so about the same number of
    documents each; a bucket is paired in `parts` items when there are fewer buckets than `parallelism` workers.
    `documents` and `tokens` are what the input is expected to hold (a manifest's count, or an estimate from
    its size): the plan is made before the job, so no worker waits on a count of every document."""
    num_buckets = max(1, math.ceil(documents / bucket_docs), math.ceil(tokens / BUCKET_MAX_TOKENS))
    num_buckets = min(num_buckets, 1 << shuffle.HIST_BITS)
    parts = math.ceil(parallelism / num_buckets)
    return [shuffle.Slice(bucket, lo, hi, part, parts)
            for bucket, (lo, hi) in enumerate(shuffle.even_ranges(num_buckets)) for part in range(parts)]


class MakePairs(beam.PTransform):
    """TokenizedDocuments -> batches (lists) of NSP PairInstances. Random next segments come from the document's
    bucket (google's pool is the whole corpus, which a distributed job cannot hold in one place): buckets are
    ranges of a seeded hash of the document id, cut to hold about `bucket_docs` documents each.

    Documents reach their bucket through the shuffle (pipeline/beam/shuffle.py: run files on the local runner, whose
    GroupByKey would hold every document in memory; the runner's GroupByKey elsewhere). The worker pairing a
    bucket spills its documents' tokens to a local file, so memory is the bucket's sentence ends (8 bytes a
    sentence) and one document's tokens, whatever the input.

    When there are fewer buckets than `parallelism`, a bucket is paired in `parts` work items (each holds the
    whole pool and pairs a token-balanced share of its documents), so a corpus of one bucket still pairs and
    masks on every worker; the instances are the same for any number of parts. The number of buckets comes from
    the documents and tokens the input is expected to hold (plan_buckets), so a bucket holds about `bucket_docs`
    documents as far as that expectation is right (the manifest's counters say how many it held).
    """

    def __init__(self, config: shuffle.ShuffleConfig, vocabulary: Vocabulary, params: pairs.PairParams,
                 seed: int, bucket_docs: int, documents: float, tokens: float, parallelism: int = 1):
        super().__init__()
        self.config, self.vocabulary, self.params, self.seed = config, vocabulary, params, seed
        self.bucket_docs, self.parallelism = bucket_docs, max(1, parallelism)
        self.documents, self.tokens = documents, tokens   # expected in the input (plan_buckets)

    def expand(self, docs):
        plan = plan_buckets(self.bucket_docs, self.parallelism, self.documents, self.tokens)
        return (docs
                | "ToRecords" >> beam.Map(lambda d: [(d.id, d.to_bytes(), (len(d.tokens),))])
                | "ByBucket" >> shuffle.Shuffle("buckets", pairs.bucket_key(self.seed), plan, 1, self.config)
                | "PairDocuments" >> tally.ParDo(_PairBucket(self.vocabulary, self.params, self.seed)))


PAIR_STATS = ("instances", "tokens", "random_next")
CORPUS = "corpus"   # the namespace of a multi-corpus job's per-corpus counts: corpus/<kind>_documents, ...
HELD_OUT_CORPUS = "validation_corpus"   # the same of its validation set


def corpus_of(key: str) -> str:
    """The corpus of a document id or an instance key (`<document id>|<dupe>|<k>`): every reader's ids start
    `<kind>:` (wikipedia:12, books:alice.txt#0, text:a.txt:3)."""
    return key.split(":", 1)[0]


def count_documents(document: Document, count, namespace: str = CORPUS) -> Iterator[Document]:
    """Passes a document on, counted under its corpus (corpus/<kind>_documents)."""
    count(namespace, f"{document.source or corpus_of(document.id)}_documents")
    yield document


def count_instances(batch: list[pair_records.PairInstance], count,
                    namespace: str = CORPUS) -> Iterator[list[pair_records.PairInstance]]:
    """Passes a batch of instances on, counted under the corpus of the document each starts in
    (corpus/<kind>_instances, corpus/<kind>_tokens)."""
    found: dict[str, list[int]] = {}
    for pair in batch:
        seen = found.setdefault(corpus_of(pair.key), [0, 0])
        seen[0] += 1
        seen[1] += len(pair.token_ids)
    for kind, (instances, tokens) in found.items():
        count(namespace, f"{kind}_instances", instances)
        count(namespace, f"{kind}_tokens", tokens)
    yield batch


def corpus_counts(values: dict[str, int], namespace: str = CORPUS) -> dict[str, dict]:
    """A job's per-corpus counts -> {kind: {documents, instances, tokens, token_share}}; token_share is the corpus's
    share of the training tokens, after its dupe passes (--corpus-weights) and dedup."""
    c = lambda kind, what: values.get(f"{namespace}/{kind}_{what}", 0)   # noqa: E731
    kinds = sorted({k.split("/", 1)[1].rsplit("_", 1)[0] for k in values if k.startswith(namespace + "/")})
    total = sum(c(kind, "tokens") for kind in kinds)
    return {kind: {"documents": c(kind, "documents"), "instances": c(kind, "instances"), "tokens": c(kind, "tokens"),
                   "token_share": c(kind, "tokens") / max(1, total)} for kind in kinds}


def encode_pairs(batch: list[pair_records.PairInstance]) -> list[shuffle.Record]:
    """Pairs as shard records; stats: (instances, tokens, random_next)."""
    return [(p.key, pair_records.encode(p), (1, len(p.token_ids), int(p.is_random_next))) for p in batch]


def _read_pair_file(path: str):
    batch = []
    for record in tfrecord.read_file(path):
        batch.append(pair_records.decode(record))
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


class ReadPairs(beam.PTransform):
    """Pair files (TFRecord, written by `pairs`) -> batches of PairInstances, CRC-checked; one reader per file."""

    def __init__(self, files: list[str]):
        super().__init__()
        self.files = files

    def expand(self, pipeline):
        return (pipeline
                | "ListPairFiles" >> beam.Create(sorted(self.files))
                | "SpreadFiles" >> beam.Reshuffle()
                | "ReadRecords" >> beam.FlatMap(_read_pair_file))


MASK_STATS = ("instances", "tokens", "masked_tokens", "random_next")


class _MaskBatch(tally.DoFn):
    def __init__(self, params: masking.MaskRecipe, vocab: masking.VocabIds, seed: int, max_seq_length: int):
        self.params, self.vocab, self.seed, self.max_seq_length = params, vocab, seed, max_seq_length

    def setup(self):
        self.progress = Progress("mask")

    def process(self, batch: list[pair_records.PairInstance]):
        masked = masking.mask_batch(batch, self.params, self.vocab, self.seed, self.max_seq_length)
        lengths = masked.input_mask.sum(axis=1).tolist()
        counts = masked.masked_lm_weights.sum(axis=1).astype(np.int64).tolist()
        self.count("mask", "instances", len(batch))
        self.count("mask", "masked_tokens", sum(counts))
        self.progress.add(instances=len(batch))
        yield [(pair.key, record, (1, length, k, int(pair.is_random_next)))
               for pair, record, length, k in zip(batch, schema.encode_batch(masked), lengths, counts)]


class MaskPairs(beam.PTransform):
    """Batches of PairInstances -> batches of (key, google-schema Example bytes, stats); seeded per key."""

    def __init__(self, params: masking.MaskRecipe, vocab: masking.VocabIds, seed: int, max_seq_length: int):
        super().__init__()
        self.params, self.vocab, self.seed, self.max_seq_length = params, vocab, seed, max_seq_length

    def expand(self, pair_batches):
        return pair_batches | "MaskAndEncode" >> tally.ParDo(
            _MaskBatch(self.params, self.vocab, self.seed, self.max_seq_length))


def _read_shard_file(unit: tuple[str, str], shape: schema.Shape):
    """One file of google-layout shards -> batches of (key, record, MASK_STATS), keyed by the file's name (unique
    among the inputs) and the record's index: a stable key that places and orders it in the pack shuffle. A
    record that is not google's layout, a packed row among them, fails the job naming the file and record."""
    path, name = unit
    records = tfrecord.read_file(path)
    index = 0
    while batch := list(itertools.islice(records, BATCH)):
        arrays = schema.decode_plain(batch, shape)
        if arrays is None:   # not the plain encoding: each record alone, which also words what is wrong
            decoded = []
            for i, record in enumerate(batch):
                try:
                    decoded.append(schema.decode(record, shape))
                except ValueError as e:
                    raise ValueError(f"{path}: record {index + i}: {e}") from None
            arrays = {f: np.stack([d[f] for d in decoded]) for f in schema.FEATURES}
        lengths = arrays["input_mask"].sum(axis=1).tolist()
        masked = (arrays["masked_lm_weights"] > 0).sum(axis=1).tolist()
        labels = np.asarray(arrays["next_sentence_labels"]).reshape(-1).tolist()
        yield [(f"{name}#{index + i}", record, (1, n, k, y))
               for i, (record, n, k, y) in enumerate(zip(batch, lengths, masked, labels))]
        index += len(batch)


class ReadShards(beam.PTransform):
    """google-layout shard files (ours or google's), as (path, unique name) -> batches of (key, record, stats),
    CRC-checked and parsed; one reader per file."""

    def __init__(self, files: list[tuple[str, str]], shape: schema.Shape):
        super().__init__()
        self.files, self.shape = sorted(files), shape

    def expand(self, pipeline):
        return (pipeline
                | "ListShardFiles" >> beam.Create(self.files)
                | "SpreadFiles" >> beam.Reshuffle()
                | "ReadRecords" >> beam.FlatMap(_read_shard_file, self.shape))
