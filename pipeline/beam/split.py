"""The validation split in a job: documents -> training and validation documents, before any pairing, and the list
of the held-out documents that ships with the validation set (pipeline/algorithms/split.py decides each one).

    documents | SplitValidation(params, limits) -> .training, .validation
    all documents | Thresholds(params)           -> limits: {corpus: largest held-out draw} (a count),
                                                    {corpus: {held-out id: its share}} (a fraction of tokens: a
                                                    share under 1 cuts that document in two, split.divide)
    validation documents | ListHeldOut(directory) -> <directory>/.incomplete/documents.jsonl.gz

Either way the split needs every document's draw first (the N smallest; or each corpus's size and its documents in
the order of their draws): `Thresholds` is a side input, so the split must read its documents from
the far side of a shuffle (the jobs deal them through SpreadDocuments first); its main input is then the shuffle's
slices, and no runner holds the documents in memory while the draws are counted.
"""
from __future__ import annotations

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.algorithms import split
from pipeline.beam import shuffle, tally
from pipeline.beam.shards import INCOMPLETE
from pipeline.beam.transforms import corpus_of
from pipeline.formats import heldout
from pipeline.formats.documents import Document

TRAINING, VALIDATION = "training", "validation"
# What SplitValidation counts of each side, and ListHeldOut of its list (pipeline/jobs/outputs.py reconciles them)
SIDE_DOCUMENTS = {TRAINING: "split/training_documents", VALIDATION: "split/validation_documents"}
TRAINING_DOCUMENTS, HELD_OUT_DOCUMENTS = SIDE_DOCUMENTS[TRAINING], SIDE_DOCUMENTS[VALIDATION]
CUT_DOCUMENTS = "split/cut_documents"   # documents cut in two, a part on each side (counted on both)
LISTED_DOCUMENTS = "split/listed_documents"


def side_counter(corpus: str, side: str, what: str) -> str:
    """A corpus's count on one side: split/<corpus>_<side>_<documents|tokens> (pipeline/jobs/outputs.py reads
    them into the manifests' split.corpora)."""
    return f"split/{corpus}_{side}_{what}"


class _Merged(beam.CombineFn):
    """A combine whose accumulator (split.Smallest, split.Sizes) takes an input with add(*item) and another
    accumulator with merge(other)."""

    def add_input(self, acc, item):
        acc.add(*item)
        return acc

    def merge_accumulators(self, accs):
        accs = iter(accs)
        first = next(accs)
        for acc in accs:
            first.merge(acc)
        return first


class _Draws(_Merged):
    """(corpus, draw) -> per corpus its count and the `keep` smallest draws -> the thresholds of `documents`."""

    def __init__(self, documents: int):
        self.documents = documents

    def create_accumulator(self) -> split.Smallest:
        return split.Smallest(self.documents)

    def extract_output(self, acc: split.Smallest) -> dict[str, float]:
        return split.thresholds(acc, self.documents)


class _Sizes(_Merged):
    """(corpus, draw, id, size, paragraphs) -> per corpus its size and its documents that draw under the reach ->
    the ids each corpus holds out for a token share, and the share of each (split.chosen)."""

    def __init__(self, fraction: float):
        self.fraction = fraction

    def create_accumulator(self) -> split.Sizes:
        return split.Sizes(split.reach(self.fraction))

    def extract_output(self, acc: split.Sizes) -> dict[str, dict[str, float]]:
        return split.chosen(acc, self.fraction)


class Thresholds(beam.PTransform):
    """Every document (all corpora) -> one dict: {corpus: the largest draw it holds out} for a count,
    {corpus: {id: the share of it held out}} for a fraction of tokens."""

    def __init__(self, params: split.SplitParams):
        super().__init__()
        self.params = params

    def expand(self, docs):
        seed = self.params.seed
        if self.params.fraction is not None:
            return (docs
                    | "Draw" >> beam.Map(lambda d: (d.source or corpus_of(d.id), split.draw(seed, d.id), d.id,
                                                    split.size(d.paragraphs), len(d.paragraphs)))
                    | "Walk" >> beam.CombineGlobally(_Sizes(self.params.fraction)))
        return (docs
                | "Draw" >> beam.Map(lambda d: (d.source or corpus_of(d.id), split.draw(seed, d.id)))
                | "Smallest" >> beam.CombineGlobally(_Draws(self.params.documents)))


class _Split(tally.DoFn):
    def __init__(self, params: split.SplitParams):
        self.params = params

    def process(self, doc: Document, limits):
        corpus = doc.source or corpus_of(doc.id)
        share = split.held_out(self.params, corpus, doc.id, limits)
        if 0 < share < 1:   # a part on each side
            self.count(*tally.parts(CUT_DOCUMENTS))
            training, held = split.divide(doc, share, self.params.seed)
            yield from self.side(TRAINING, corpus, training)
            yield from self.side(VALIDATION, corpus, held)
        else:
            yield from self.side(VALIDATION if share else TRAINING, corpus, doc)

    def side(self, side: str, corpus: str, doc: Document):
        self.count(*tally.parts(SIDE_DOCUMENTS[side]))
        self.count(*tally.parts(side_counter(corpus, side, "documents")))
        yield beam.pvalue.TaggedOutput(side, doc)


def count_side_tokens(document, count, side: str):
    """Passes a tokenized document on, its tokens counted under its corpus and side (side_counter)."""
    count(*tally.parts(side_counter(corpus_of(document.id), side, "tokens")), len(document.tokens))
    yield document


class SplitValidation(beam.PTransform):
    """Documents -> tagged outputs .training and .validation (counted: SIDE_DOCUMENTS, and per corpus
    side_counter). `limits`: the Thresholds (a PCollection of one dict)."""

    def __init__(self, params: split.SplitParams, limits):
        super().__init__()
        self.params, self.limits = params, limits

    def expand(self, docs):
        return docs | "Split" >> tally.ParDo(_Split(self.params), beam.pvalue.AsSingleton(self.limits),
                                             outputs=(TRAINING, VALIDATION))


class _WriteList(tally.DoFn):
    def __init__(self, directory: str):
        self.directory = directory

    def process(self, sliced):
        lines = sorted(sliced[1].payloads(self.count))   # by id: each line starts {"id": ...
        path = FileSystems.join(self.directory, INCOMPLETE, heldout.NAME)
        with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            heldout.write(f, lines)   # a retried bundle writes the same bytes
        self.count(*tally.parts(LISTED_DOCUMENTS), len(lines))
        yield path


class ListHeldOut(beam.PTransform):
    """The validation documents -> `directory`/.incomplete/documents.jsonl.gz: id, title and the sha256 of each one's
    text, one line each, by id (MLPerf publishes such a checksum per held-out article): one group, one worker."""

    def __init__(self, directory: str, config: shuffle.ShuffleConfig, seed: int):
        super().__init__()
        self.directory, self.config, self.seed = directory, config, seed

    def expand(self, docs):
        return (docs
                | "ToRecords" >> beam.Map(lambda d: [(d.id, heldout.encode(d), ())])
                | "OneGroup" >> shuffle.Shuffle("held_out", self.seed, shuffle.plan_ranges(1), 0, self.config)
                | "Write" >> tally.ParDo(_WriteList(self.directory)))


def _copy_list(_, sources: list[str], directory: str, count) -> str:
    path = FileSystems.join(directory, INCOMPLETE, heldout.NAME)
    count("split", "held_out_lists_copied", 1)   # a tally: the job's Publish waits for it (pipeline/beam/tally.py)
    with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        for source in sources:   # gzip members one after another are one gzip file
            with FileSystems.open(source, compression_type=CompressionTypes.UNCOMPRESSED) as g:
                f.write(g.read())
    return path


class CopyHeldOutList(beam.PTransform):
    """The held-out list of a split an input carries -> `directory`/.incomplete/documents.jsonl.gz, published with
    the validation set a job makes of it (`mask`, `pack`, `convert`): the documents stay named with the data. Its
    step counts, so the job's Publish, which waits for every count, runs only once the list is in place."""

    def __init__(self, sources: list[str], directory: str):
        super().__init__()
        self.sources, self.directory = sorted(sources), directory

    def expand(self, pipeline):
        return (pipeline
                | "One" >> beam.Create([None])
                | "Copy" >> tally.Map(_copy_list, self.sources, self.directory))
