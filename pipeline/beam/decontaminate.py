"""Decontamination in a job: documents -> the documents eval sets leave (pipeline/algorithms/decontaminate.py), and
the report of every document they touched.

    eval files | ReadExamples (one worker)                   -> one Contaminants, a side input of every worker
    documents  | Clean(side input)                           -> kept documents; .report lines
    report lines | OneGroup | WriteReport                    -> <directory>/.incomplete/decontamination_report.jsonl.gz

The eval n-grams reach the workers as a side input (24-28 bytes an n-gram, 24-28 MB a million): eval sets are small
beside a corpus, and every worker needs all of them. The documents are never held: each is cleaned as it comes.
"""
from __future__ import annotations

import dataclasses

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.algorithms import decontaminate
from pipeline.beam import shuffle, tally
from pipeline.beam.shards import INCOMPLETE
from pipeline.formats import decontamination_report, evalsets, storage
from pipeline.formats.documents import Document
from pipeline.text import contamination

REPORT = decontamination_report.NAME


@dataclasses.dataclass(frozen=True)
class DecontaminateParams:
    """The eval files (paths; `names`: how the report names them), the JSON Lines fields to read, Janitor's knobs."""
    against: tuple[str, ...]
    names: tuple[str, ...]
    fields: tuple[str, ...] = ()
    janitor: contamination.Params = contamination.Params()


def _contaminants(_, params: DecontaminateParams, count):
    """Every eval file -> one Contaminants (read in one worker: eval sets are small beside a corpus); counts the
    examples, those shorter than an n-gram (they register nothing, as in Janitor) and the n-grams."""
    files = []
    for path, name in zip(params.against, params.names):
        examples = evalsets.examples(path, storage.read_bytes(path), params.fields)
        ngrams = contamination.example_ngrams([text for _, text in examples], params.janitor.ngram)
        count("decontaminate", "examples", len(examples))
        count("decontaminate", "short_examples", sum(not len(exact) for _, exact in ngrams))
        count("decontaminate", "example_ngrams", sum(len(exact) for _, exact in ngrams))
        files.append((name, [(where, fast, exact) for (where, _), (fast, exact) in zip(examples, ngrams)]))
    yield decontaminate.build(files, params.janitor)


class Contaminants(beam.PTransform):
    """The eval files -> one Contaminants (every n-gram of every example)."""

    def __init__(self, params: DecontaminateParams):
        super().__init__()
        self.params = params

    def expand(self, pipeline):
        return (pipeline
                | "Start" >> beam.Create([None])
                | "ReadExamples" >> tally.FlatMap(_contaminants, self.params))


DROPPED = "decontaminate/dropped"   # documents dropped whole (_Clean counts each by its report entry's action)


class _Clean(tally.DoFn):
    def process(self, doc: Document, found: decontaminate.Contaminants):
        self.count("decontaminate", "documents")
        kept, entry = decontaminate.clean(doc, found)
        if entry is None:
            self.count("decontaminate", "untouched")
        else:
            self.count("decontaminate", entry["action"])   # cut | dropped
            self.count("decontaminate", "matches", entry["matches"])
            self.count("decontaminate", "characters_removed", entry["characters_removed"])
            yield beam.pvalue.TaggedOutput("report", [(doc.id, decontamination_report.encode(entry), ())])
        if kept is not None:
            yield kept


class _WriteReport(tally.DoFn):
    def __init__(self, directory: str):
        self.directory = directory

    def process(self, sliced):
        lines = sorted(sliced[1].payloads(self.count))   # by id: each line starts {"id": ...
        path = FileSystems.join(self.directory, INCOMPLETE, REPORT)
        with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            decontamination_report.write(f, lines)   # a retried bundle writes the same bytes
        self.count("decontaminate", "report_lines", len(lines))
        yield path


class Decontaminate(beam.PTransform):
    """Documents -> the documents decontamination leaves (untouched, or cut to their fragments); writes
    `directory`/.incomplete/decontamination_report.jsonl.gz."""

    def __init__(self, params: DecontaminateParams, directory: str, config: shuffle.ShuffleConfig, seed: int):
        super().__init__()
        self.params, self.directory, self.config, self.seed = params, directory, config, seed

    def expand(self, docs):
        found = docs.pipeline | "Contaminants" >> Contaminants(self.params)
        cleaned = docs | "Clean" >> tally.ParDo(_Clean(), beam.pvalue.AsSingleton(found), outputs=("report",))
        (cleaned.report
         | "OneGroup" >> shuffle.Shuffle("decontamination_report", self.seed, shuffle.plan_ranges(1), 0, self.config)
         | "WriteReport" >> tally.ParDo(_WriteReport(self.directory)))
        return cleaned.main


def lost(values: dict[str, int]) -> list[str]:
    """The decontamination counts that must reconcile before anything is published: documents in = untouched + cut
    + dropped, and the report has a line for each one cut or dropped."""
    c = lambda name: values.get(f"decontaminate/{name}", 0)   # noqa: E731
    wrong = []
    if c("documents") != c("untouched") + c("cut") + c("dropped"):
        wrong.append(f"decontaminate: {c('documents'):,} documents in, {c('untouched'):,} untouched, {c('cut'):,} "
                     f"cut and {c('dropped'):,} dropped")
    if c("report_lines") != c("cut") + c("dropped"):
        wrong.append(f"decontaminate: the report has {c('report_lines'):,} lines for {c('cut') + c('dropped'):,} "
                     "documents cut or dropped")
    return wrong


def summary(params: DecontaminateParams, values: dict[str, int], against: list[dict]) -> dict:
    """The manifest's `decontamination` entry: the method, the eval files, what it did to the documents."""
    c = lambda name: values.get(f"decontaminate/{name}", 0)   # noqa: E731
    return {"method": "lm-evaluation-harness Janitor", "parameters": dataclasses.asdict(params.janitor),
            "fields": list(params.fields), "against": against, "examples": c("examples"),
            "short_examples": c("short_examples"), "ngrams": c("example_ngrams"), "documents_in": c("documents"),
            "untouched": c("untouched"), "cut": c("cut"), "dropped": c("dropped"), "matches": c("matches"),
            "characters_removed": c("characters_removed"), "report": REPORT}


def result_line(title: str, params: DecontaminateParams, m: dict, directory: str) -> str:
    """The job's line on what decontamination did, from the manifest `m` it published in `directory`: documents
    dropped and cut, characters removed; where a document went whole for its matches, the --max-matches that cuts
    it instead (read from the report beside it, which names each document's reason)."""
    values, report = m["counts"]["counters"], storage.join(directory, REPORT)
    c = lambda name: values.get(f"decontaminate/{name}", 0)   # noqa: E731
    dropped, cut = c("dropped"), c("cut")
    line = (f"{title}: decontamination dropped {dropped:,} and cut {cut:,} of {c('documents'):,} documents, "
            f"removing {c('characters_removed'):,} characters")
    if not dropped + cut:
        return line
    would_cut = [e["cut_with_max_matches"] for e in decontamination_report.read(report)
                 if e["action"] == "dropped" and e.get("cut_with_max_matches")]
    if would_cut:
        n = len(would_cut)
        line += (f"; {n:,} dropped for more than {params.janitor.max_matches} matches: --max-matches "
                 f"{max(would_cut)} cuts {'it' if n == 1 else 'them'} instead")
    return f"{line} (each document and why: {report})"
