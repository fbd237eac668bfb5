"""The composite Beam transforms every pipeline is built from. Each is a thin wrapper: the work is done by
pure functions in corpora/ and pipeline/ (cleaning, splitting, pairing, masking, encoding).

    ExtractWikipedia | ExtractBooks | ExtractText    files       -> Document
    ReadDocuments                                    doc shards  -> Document
    Tokenize                                         Document    -> TokenizedDocument
    MakePairs                                        TokenizedDocument -> PairInstance
    ReadPairs                                        pair shards -> PairInstance
    MaskPairs                                        PairInstance -> (sort key, google Example bytes, stats)
"""
from __future__ import annotations

import math
from typing import Callable, Iterable

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from pipeline import masking, pair_records, pairs, schema, sentences, shards, tfrecord, tokenization
from pipeline.documents import Count, Document


class _Counted(beam.DoFn):
    """Runs a generator of items and `Count` events; counts go to Beam counters in `namespace`, items on."""

    def __init__(self, namespace: str, fn: Callable[..., Iterable], **kwargs):
        self.namespace, self.fn, self.kwargs = namespace, fn, kwargs
        self._counters = {}

    def process(self, element):
        for item in self.fn(element, **self.kwargs):
            if isinstance(item, Count):
                counter = self._counters.get(item.name)
                if counter is None:
                    counter = self._counters[item.name] = Metrics.counter(self.namespace, item.name)
                counter.inc(item.n)
            else:
                yield item


class ExtractWikipedia(beam.PTransform):
    """MediaWiki XML dumps -> article Documents. Dumps with a multistream index are read in parallel ranges."""

    def __init__(self, files: list[str], index: str | None = None, skip_disambiguation: bool = True,
                 skip_bad_files: bool = False, streams_per_read: int = 10):
        super().__init__()
        self.files, self.index, self.skip_disambiguation = files, index, skip_disambiguation
        self.skip_bad_files, self.streams_per_read = skip_bad_files, streams_per_read

    def expand(self, pipeline):
        from corpora import wikipedia

        reads = wikipedia.plan_reads(self.files, self.index, self.streams_per_read)
        return (pipeline
                | "PlanReads" >> beam.Create(reads)
                | "SpreadReads" >> beam.Reshuffle()
                | "ReadPages" >> beam.ParDo(_Counted("wikipedia", wikipedia.read_pages,
                                                     skip_bad_files=self.skip_bad_files))
                | "SpreadPages" >> beam.Reshuffle()
                | "CleanPages" >> beam.ParDo(_Counted("wikipedia", wikipedia.page_to_document,
                                                      skip_disambiguation=self.skip_disambiguation)))


class ExtractBooks(beam.PTransform):
    """Book files, directories or tar archives -> one Document per book (or per bounded chunk of a big one)."""

    def __init__(self, files: list[str], max_document_bytes: int | None = None, skip_bad_files: bool = False):
        super().__init__()
        self.files, self.max_document_bytes, self.skip_bad_files = files, max_document_bytes, skip_bad_files

    def expand(self, pipeline):
        from corpora import books

        kwargs = {"skip_bad_files": self.skip_bad_files}
        if self.max_document_bytes:
            kwargs["max_document_bytes"] = self.max_document_bytes
        return (pipeline
                | "ListBooks" >> beam.Create(books.plan_reads(self.files))
                | "SpreadFiles" >> beam.Reshuffle()
                | "ReadBooks" >> beam.ParDo(_Counted("books", books.read_books, **kwargs)))


class ExtractText(beam.PTransform):
    """google's input format (one sentence per line, blank line between documents) -> presplit Documents."""

    def __init__(self, files: list[str]):
        super().__init__()
        self.files = files

    def expand(self, pipeline):
        from corpora import text

        return (pipeline
                | "ListFiles" >> beam.Create(sorted(self.files))
                | "SpreadFiles" >> beam.Reshuffle()
                | "ReadText" >> beam.ParDo(_Counted("text", text.read_text_documents)))


class ReadDocuments(beam.PTransform):
    """Document shards (gzip JSON Lines written by `extract`) -> Documents, spread over workers."""

    def __init__(self, files: list[str]):
        super().__init__()
        self.files = files

    def expand(self, pipeline):
        return (pipeline
                | "ListShards" >> beam.Create(sorted(self.files))
                | "SpreadShards" >> beam.Reshuffle()
                | "ReadLines" >> beam.FlatMap(shards.read_documents_file)
                | "SpreadDocuments" >> beam.Reshuffle())


class _Tokenize(beam.DoFn):
    def __init__(self, vocab_path: str, lowercase: bool):
        self.vocab_path, self.lowercase = vocab_path, lowercase
        self.documents = Metrics.counter("tokenize", "documents")
        self.sentences = Metrics.counter("tokenize", "sentences")
        self.tokens = Metrics.counter("tokenize", "tokens")
        self.empty = Metrics.counter("tokenize", "empty_documents")

    def setup(self):   # once per worker: the tokenizer is never pickled with the pipeline
        self.tokenizer = tokenization.build_tokenizer(tokenization.read_vocab(self.vocab_path), self.lowercase)

    def process(self, doc: Document):
        sents = sentences.document_sentences(doc)
        tokenized = pairs.TokenizedDocument.from_sentences(
            doc.id, tokenization.tokenize_sentences(self.tokenizer, sents) if sents else [])
        if tokenized.num_sentences == 0:
            self.empty.inc()    # nothing left after tokenization: no instance can come from it
            return
        self.documents.inc()
        self.sentences.inc(tokenized.num_sentences)
        self.tokens.inc(len(tokenized.tokens))
        yield tokenized


class Tokenize(beam.PTransform):
    """Documents -> sentences (built-in splitter) -> WordPiece ids, with the tokenizer loaded once per worker."""

    def __init__(self, vocab_path: str, lowercase: bool):
        super().__init__()
        self.vocab_path, self.lowercase = vocab_path, lowercase

    def expand(self, docs):
        return docs | "SplitAndTokenize" >> beam.ParDo(_Tokenize(self.vocab_path, self.lowercase))


class _PairBucket(beam.DoFn):
    def __init__(self, vocab_path: str, params: pairs.PairParams, seed: int):
        self.vocab_path, self.params, self.seed = vocab_path, params, seed
        self.instances = Metrics.counter("pairs", "instances")
        self.random_next = Metrics.counter("pairs", "random_next")
        self.buckets = Metrics.counter("pairs", "buckets")

    def setup(self):
        self.word_starts = tokenization.word_starts(tokenization.read_vocab(self.vocab_path))

    def process(self, element):
        _, docs = element
        self.buckets.inc()
        for instance in pairs.pairs_for_pool(list(docs), self.params, self.word_starts, self.seed):
            self.instances.inc()
            self.random_next.inc(int(instance.is_random_next))
            yield instance


class MakePairs(beam.PTransform):
    """TokenizedDocuments -> NSP PairInstances. Documents are dealt to buckets of about `bucket_docs` by a seeded
    hash of their id; random next segments come from the same bucket (google's pool is the whole corpus)."""

    def __init__(self, vocab_path: str, params: pairs.PairParams, seed: int, bucket_docs: int):
        super().__init__()
        self.vocab_path, self.params, self.seed, self.bucket_docs = vocab_path, params, seed, bucket_docs

    def expand(self, docs):
        seed, bucket_docs = self.seed, self.bucket_docs

        def assign(doc, num_docs):
            return pairs.bucket_of(doc.id, seed, math.ceil(num_docs / bucket_docs)), doc

        num_docs = docs | "CountDocuments" >> beam.combiners.Count.Globally()
        return (docs
                | "AssignBuckets" >> beam.Map(assign, beam.pvalue.AsSingleton(num_docs))
                | "GroupBuckets" >> beam.GroupByKey()
                | "PairDocuments" >> beam.ParDo(_PairBucket(self.vocab_path, self.params, seed))
                | "SpreadPairs" >> beam.Reshuffle())


def encode_pair(pair: pair_records.PairInstance) -> shards.Record:
    """A pair as a shard record; stats: (instances, tokens, random_next)."""
    return pair.key, pair_records.encode(pair), (1, len(pair.token_ids), int(pair.is_random_next))


PAIR_STATS = ("instances", "tokens", "random_next")


class ReadPairs(beam.PTransform):
    """Pair shards (TFRecord files written by `pairs`) -> PairInstances, CRC-checked."""

    def __init__(self, files: list[str]):
        super().__init__()
        self.files = files

    def expand(self, pipeline):
        return (pipeline
                | "ListPairFiles" >> beam.Create(sorted(self.files))
                | "SpreadFiles" >> beam.Reshuffle()
                | "ReadRecords" >> beam.FlatMap(tfrecord.read_file)
                | "DecodePairs" >> beam.Map(pair_records.decode)
                | "SpreadPairs" >> beam.Reshuffle())


class _MaskBatch(beam.DoFn):
    def __init__(self, params: masking.MaskParams, vocab: masking.VocabIds, seed: int, max_seq_length: int):
        self.params, self.vocab, self.seed, self.max_seq_length = params, vocab, seed, max_seq_length
        self.instances = Metrics.counter("mask", "instances")
        self.masked = Metrics.counter("mask", "masked_tokens")

    def process(self, batch: list[pair_records.PairInstance]):
        L, P = self.max_seq_length, self.params.max_predictions_per_seq
        n = len(batch)
        out = schema.Batch(
            input_ids=np.zeros((n, L), np.int64), input_mask=np.zeros((n, L), np.int64),
            segment_ids=np.zeros((n, L), np.int64), masked_lm_positions=np.zeros((n, P), np.int64),
            masked_lm_ids=np.zeros((n, P), np.int64), masked_lm_weights=np.zeros((n, P), np.float32),
            next_sentence_labels=np.zeros(n, np.int64))
        masked_counts = np.zeros(n, np.int64)
        for i, pair in enumerate(batch):
            if len(pair.token_ids) > L:
                raise ValueError(f"pair {pair.key} has {len(pair.token_ids)} tokens > max_seq_length {L}")
            m = masking.mask_instance(pair, self.params, self.vocab, pairs.document_rng(self.seed, pair.key))
            length, k = len(m.input_ids), len(m.positions)
            out.input_ids[i, :length] = m.input_ids
            out.input_mask[i, :length] = 1
            out.segment_ids[i, :length] = pair.segment_ids
            out.masked_lm_positions[i, :k] = m.positions
            out.masked_lm_ids[i, :k] = m.labels
            out.masked_lm_weights[i, :k] = 1.0
            out.next_sentence_labels[i] = int(pair.is_random_next)
            masked_counts[i] = k
        self.instances.inc(n)
        self.masked.inc(int(masked_counts.sum()))
        lengths = out.input_mask.sum(axis=1)
        for pair, record, length, k in zip(batch, schema.encode_batch(out), lengths, masked_counts):
            yield pair.key, record, (1, int(length), int(k), int(pair.is_random_next))


MASK_STATS = ("instances", "tokens", "masked_tokens", "random_next")


class MaskPairs(beam.PTransform):
    """PairInstances -> (key, google-schema Example bytes, stats); masking seeded per instance key."""

    def __init__(self, params: masking.MaskParams, vocab: masking.VocabIds, seed: int, max_seq_length: int):
        super().__init__()
        self.params, self.vocab, self.seed, self.max_seq_length = params, vocab, seed, max_seq_length

    def expand(self, pairs_pc):
        return (pairs_pc
                | "Batch" >> beam.BatchElements(min_batch_size=64, max_batch_size=512)
                | "MaskAndEncode" >> beam.ParDo(_MaskBatch(self.params, self.vocab, self.seed,
                                                           self.max_seq_length)))
