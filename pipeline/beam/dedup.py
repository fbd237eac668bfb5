"""Deduplication on Beam: documents in, the documents it keeps out, every grouping through the shuffle.

    Fingerprint      Document -> Fingerprint (pipeline/algorithms/dedup.py) and the document's record,
                     counted: documents, empty ones
    Buckets          keyed by exact hash and by each LSH band key | Shuffle | an exact group's members -> pairs
                     with its first; a band bucket's members -> candidate pairs
    Verify           candidates + signatures keyed by one end, then by the other | Shuffle x2 | -> similar pairs
    Clusters         similar pairs            | Shuffle (one group) | union-find -> removals, report lines
    DropDocuments    documents + removals keyed by id        | Shuffle | -> the documents kept
    ParagraphGroups  kept documents' long paragraphs by hash | Shuffle | -> drops beyond the first document
    DropParagraphs   kept documents + drops keyed by id      | Shuffle | -> the documents, repeated paragraphs out;
                     one cut by more than max_paragraph_loss out whole, a report line each
    WriteReport      report lines             | Shuffle (one group) | -> .incomplete/dedup_report.jsonl.gz

The shuffle hands each Slice its records in hash order, so records of one key arrive together: every step walks
one key's records at a time (a band bucket's members, a document and its decisions), never a whole Slice, and
no step holds the corpus. The one exception is Clusters, which holds the similar pairs' documents (a union-find
over the documents that have a duplicate, not over the corpus) in one worker. WriteReport streams its lines in
the shuffle's hash order of their keys (unique: a cluster's first id, a removed document's id).
Every decision is a function of the documents' ids and texts: any worker count keeps the same documents.
"""
from __future__ import annotations

import dataclasses
import math
import json
from typing import Iterator

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.algorithms import dedup
from pipeline.beam import shuffle, tally
from pipeline.formats import dedup_report, tfrecord
from pipeline.formats.documents import Document

REPORT = dedup_report.NAME
SLICE_BYTES = 64 << 20   # records a Slice holds at most: a groupbykey worker sorts one Slice in memory
INCOMPLETE = ".incomplete"


# ---------------------------------------------------------------------------------------------- records

def _record(key: str, tag: bytes, body: bytes) -> shuffle.Record:
    """A record of one of the shuffles below: its key (length-prefixed) leads the payload, so a Slice's walk can
    tell where one key's records end; `tag` says what the body holds. Its one stat is its size (plan_by_size)."""
    k = key.encode("utf-8", "surrogatepass")
    payload = len(k).to_bytes(4, "little") + k + tag + body
    return key, payload, (len(payload),)


def _keyed(sliced: tuple[shuffle.Slice, object], count) -> Iterator[tuple[str, list[bytes]]]:
    """(key, [tag + body, ...]) for each key of a Slice, in hash order: equal keys have equal hashes, so their
    records are adjacent. `count`: the reader's (tally.DoFn.count)."""
    key, bodies = None, []
    for frame in sliced[1].frames(count):
        payload = tfrecord.payload(frame)
        n = int.from_bytes(payload[:4], "little")
        k, body = payload[4:4 + n], payload[4 + n:]
        if k != key and bodies:
            yield key.decode("utf-8", "surrogatepass"), bodies
            bodies = []
        key = k
        bodies.append(body)
    if bodies:
        yield key.decode("utf-8", "surrogatepass"), bodies


def plan_by_size(min_slices: int, max_bytes: int, expected_bytes: float) -> list[shuffle.Slice]:
    """Even Slices, at least `min_slices` (work for every worker) and enough that none holds much more than
    `max_bytes` of the records expected (the documents' text bounds every shuffle's: signatures, keys and
    decisions are smaller)."""
    return shuffle.plan_ranges(max(min_slices, math.ceil(expected_bytes / max_bytes)))


def _shuffled(name: str, seed: int, config: shuffle.ShuffleConfig, slices: list[shuffle.Slice]) -> shuffle.Shuffle:
    return shuffle.Shuffle(name, f"{name}:{seed}", slices, 1, config)


def _member(f: dedup.Fingerprint) -> dict:
    return {"id": f.id, "length": f.length, "title": f.title, "exact": f.exact}


# ---------------------------------------------------------------------------------------------- steps

class _Fingerprint(tally.DoFn):
    """A document -> its fingerprint, and on the `documents` output (its id, its body: the document and its
    paragraphs' keys, so that no later step normalizes it again)."""

    def __init__(self, params: dedup.DedupParams):
        self.params = params

    def process(self, doc: Document):
        f = dedup.fingerprint(doc, self.params)
        self.count("dedup", "documents")
        if f.empty:
            self.count("dedup", "empty_documents")   # no words: never clustered, passed on as it is
        else:
            yield f
        yield beam.pvalue.TaggedOutput("documents", (doc.id, json.dumps({"document": doc.to_json(),
                                                                         "keys": f.paragraphs}).encode()))


def _bucket_records(f: dedup.Fingerprint, params: dedup.DedupParams) -> list[shuffle.Record]:
    """A document's record under its exact hash (with what a pair reports of it), and one under each band key."""
    records = [_record(f"x:{f.exact}", b"M", json.dumps(_member(f)).encode())] if params.exact else []
    if params.near:
        body = json.dumps([f.id, f.exact]).encode()
        records += [_record(key, b"B", body) for key in dedup.band_keys(f.signature, params.bands)]
    return records


NEIGHBOURS = 16   # a bucket's member is a candidate with the bucket's first and the NEIGHBOURS before it


def _pairs_and_candidates(sliced, exact_pass: bool, count):
    """Each exact group -> a similar pair (member, first by id) per other member. Each band bucket (documents
    equal on every row of a band) -> on the `candidates` output, each member (in id order) with the bucket's first
    and the NEIGHBOURS members before it: every pair of a bucket of up to 17, and work linear in a bigger one.
    Members with the same text as an earlier one are left out when the exact pass links them already."""
    for key, bodies in _keyed(sliced, count):
        if len(bodies) < 2:
            continue
        if key.startswith("x:"):
            members = sorted((json.loads(b[1:]) for b in bodies), key=lambda m: m["id"])
            for m in members[1:]:
                yield {"a": members[0], "b": m, "similarity": 1.0}
            continue
        members, seen = [], set()
        for doc_id, exact in sorted(json.loads(b[1:]) for b in bodies):
            if exact_pass and exact in seen:
                continue
            seen.add(exact)
            members.append(doc_id)
        pairs = {(members[j], members[i]) for i in range(1, len(members))
                 for j in (0, *range(max(1, i - NEIGHBOURS), i))}
        yield beam.pvalue.TaggedOutput("candidates", [_record(a, b"C", b.encode()) for a, b in sorted(pairs)])


def _signature_records(f: dedup.Fingerprint) -> list[shuffle.Record]:
    if f.empty:
        return []
    return [_record(f.id, b"S", f.signature.astype("<u8").tobytes() + json.dumps(_member(f)).encode())]


def _split_signed(body: bytes, num_perm: int) -> tuple[np.ndarray, dict]:
    """A signed body (tag, num_perm values, the member's JSON) -> (signature, member)."""
    width = 8 * num_perm
    return np.frombuffer(body[1:1 + width], "<u8"), json.loads(body[1 + width:])


def _sign_first(sliced, num_perm: int, count) -> Iterator[list[shuffle.Record]]:
    """Verify, first hop: a document's candidates (keyed by their first end) -> each candidate, keyed by its
    other end, carrying the first end's signature."""
    for _, bodies in _keyed(sliced, count):
        signed = next((b for b in bodies if b[:1] == b"S"), None)
        others = sorted({b[1:].decode() for b in bodies if b[:1] == b"C"})
        if signed is None or not others:
            continue
        yield [_record(other, b"A", signed[1:]) for other in others]


def _similar_pairs(sliced, params: dedup.DedupParams, count) -> Iterator[dict]:
    """Verify, second hop: a document's signature and the signed candidates keyed by it -> the pairs whose
    estimated Jaccard similarity reaches the threshold."""
    for _, bodies in _keyed(sliced, count):
        signed = next((b for b in bodies if b[:1] == b"S"), None)
        if signed is None:
            continue
        signature, member = _split_signed(signed, params.num_perm)
        for body in sorted({b for b in bodies if b[:1] == b"A"}):
            other_signature, other = _split_signed(body, params.num_perm)
            similar = dedup.similarity(signature, other_signature)
            if similar >= params.threshold:
                yield {"a": other, "b": member, "similarity": similar}


def _pair_records(pair: dict) -> list[shuffle.Record]:
    key = f"{pair['a']['id']}\x00{pair['b']['id']}"
    return [_record(key, b"E", json.dumps(pair).encode())]


class _Clusters(tally.DoFn):
    """The one group of every similar pair -> union-find -> the documents each cluster removes (keyed by id), and
    on the `report` output one line a cluster.

    A removed document is an exact duplicate when a member before it (in keep order) has its normalized text,
    else a near one, of the member of other text it is most similar to: so three copies, two of them the same,
    report the same two as exact whichever the cluster keeps, and a near duplicate's similarity is never the 1.0
    of its exact copy."""

    def process(self, sliced):
        components, members, best = dedup.Components(), {}, {}
        for _, bodies in _keyed(sliced, self.count):
            for body in bodies:
                pair = json.loads(body[1:])
                a, b = pair["a"], pair["b"]
                members[a["id"]], members[b["id"]] = a, b
                components.union(a["id"], b["id"])
                if a["exact"] != b["exact"]:   # each text's most similar member of other text, ties to the least id
                    for x, y in ((a, b), (b, a)):
                        found = best.get(x["exact"], (0.0, ""))
                        if (pair["similarity"], found[1]) > (found[0], y["id"]) or not found[1]:
                            best[x["exact"]] = (pair["similarity"], y["id"])
        lines, removals = [], []
        for group in components.groups():
            cluster = sorted((members[i] for i in group), key=lambda m: dedup.keep_order(m["length"], m["id"]))
            kept, removed, first = cluster[0], [], {cluster[0]["exact"]: cluster[0]["id"]}
            self.count("dedup", "clusters")
            for m in cluster[1:]:
                if m["exact"] in first:
                    reason, similarity, of = "exact", 1.0, first[m["exact"]]
                else:
                    first[m["exact"]] = m["id"]
                    similarity, of = best[m["exact"]]
                    reason = "near"
                removed.append({**m, "reason": reason, "similarity": round(similarity, 4), "of": of})
                removals.append(_record(m["id"], b"R", reason.encode()))
            lines.append(_record(f"c:{group[0]}", b"L", dedup_report.encode(kept, removed)))
        yield removals
        yield beam.pvalue.TaggedOutput("report", lines)


class _WriteReport(tally.DoFn):
    """The one group of report lines -> .incomplete/dedup_report.jsonl.gz, streamed, each removal counted by its
    reason (report_removed_exact, ...: `lost` checks them against the steps that removed the documents)."""

    def __init__(self, directory: str):
        self.directory = directory

    def process(self, sliced):
        path = FileSystems.join(self.directory, INCOMPLETE, dedup_report.NAME)
        with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            dedup_report.write(f, self._lines(sliced))   # a retried bundle writes the same bytes
        yield path

    def _lines(self, sliced) -> Iterator[bytes]:
        for _, bodies in _keyed(sliced, self.count):
            for body in bodies:
                for key, n in dedup_report.line_totals(json.loads(body[1:])).items():
                    self.count("dedup", f"report_{key}", n)
                yield body[1:]


def _document_records(pair: tuple[str, bytes]) -> list[shuffle.Record]:
    return [_record(pair[0], b"D", pair[1])]


class _DropDocuments(tally.DoFn):
    """A document and the removals keyed by its id -> the document, unless a cluster removes it."""

    def process(self, sliced):
        for _, bodies in _keyed(sliced, self.count):
            reasons = sorted({b[1:].decode() for b in bodies if b[:1] == b"R"})
            for body in bodies:
                if body[:1] != b"D":
                    continue
                if reasons:
                    self.count("dedup", "removed_exact" if "exact" in reasons else "removed_near")
                    continue
                self.count("dedup", "documents_after_clusters")
                yield body   # the document's record, as DropParagraphs reads it


def _paragraph_records(body: bytes):
    """A kept document's record -> itself keyed by its id for DropParagraphs, and on the `paragraphs` output one
    record per distinct long paragraph for ParagraphGroups."""
    d = json.loads(body[1:])
    doc_id = json.loads(d["document"])["id"]
    yield [_record(doc_id, b"D", body[1:])]
    yield beam.pvalue.TaggedOutput("paragraphs", [_record(k, b"P", doc_id.encode())
                                                  for k in sorted({k for k in d["keys"] if k})])


def _paragraph_drops(sliced, max_copies: int, count) -> Iterator[list[shuffle.Record]]:
    """Each long paragraph's documents -> a drop (the paragraph's key, the document keeping it) for every document
    after the first (by id), when it is in more than `max_copies` documents."""
    for key, bodies in _keyed(sliced, count):
        ids = sorted({b[1:].decode() for b in bodies if b[:1] == b"P"})
        if len(ids) > max_copies:
            count("dedup", "repeated_paragraphs")
            yield [_record(doc_id, b"X", f"{key}\x00{ids[0]}".encode()) for doc_id in ids[1:]]


class _DropParagraphs(tally.DoFn):
    """A kept document and its paragraph drops -> the document without those paragraphs (all their occurrences);
    a document left with none, or cut by more than `max_loss` of its bytes (dedup.paragraph_cut), is removed,
    counted, with a line on the `report` output."""

    def __init__(self, max_loss: float):
        self.max_loss = max_loss

    def process(self, sliced):
        for _, bodies in _keyed(sliced, self.count):
            drops = dict(b[1:].decode().split("\x00", 1) for b in bodies if b[:1] == b"X")
            for body in bodies:
                if body[:1] != b"D":
                    continue
                d = json.loads(body[1:])
                doc = Document.from_json(d["document"])
                keep, lost, keepers = dedup.paragraph_cut(doc.paragraphs, d["keys"], drops)
                dropped = len(doc.paragraphs) - len(keep)
                self.count("dedup", "paragraphs_dropped", dropped)
                if keep and lost <= self.max_loss:
                    self.count("dedup", "kept")
                    yield Document(doc.id, doc.source, doc.title, keep, doc.presplit)
                    continue
                reason = "paragraphs" if keep else "emptied"
                self.count("dedup", dedup_report.COUNTS[reason])
                line = dedup_report.encode_cut(doc.id, doc.title, reason, lost, dropped, keepers)
                yield beam.pvalue.TaggedOutput("report", [_record(f"d:{doc.id}", b"L", line)])


class _PassOn(tally.DoFn):
    """The last step when the paragraph pass is off: the documents kept, counted."""

    def process(self, body: bytes):
        self.count("dedup", "kept")
        yield Document.from_json(json.loads(body[1:])["document"])


# ---------------------------------------------------------------------------------------------- the composite

class Dedup(beam.PTransform):
    """Documents -> the documents deduplication keeps; writes `directory`/.incomplete/dedup_report.jsonl.gz.

    `slices`: the least number of work items each shuffle is cut into (more for `expected_bytes` of text)."""

    def __init__(self, params: dedup.DedupParams, directory: str, config: shuffle.ShuffleConfig, slices: int,
                 expected_bytes: float = 0):
        super().__init__()
        params.check()
        self.params, self.directory, self.config = params, directory, config
        self.plan = plan_by_size(max(1, slices), SLICE_BYTES, expected_bytes)

    def _shuffle(self, name: str, one: bool = False) -> shuffle.Shuffle:
        return _shuffled(f"dedup-{name}", self.params.seed, self.config,
                         shuffle.plan_ranges(1) if one else self.plan)

    def expand(self, docs):
        p = self.params
        fingerprints = docs | "Fingerprint" >> tally.ParDo(_Fingerprint(p), outputs=("documents",),
                                                                          main="fingerprints")
        kept = fingerprints.documents | "Bodies" >> beam.Map(lambda pair: b"D" + pair[1])
        report = []   # the report lines of each pass that removes documents
        if p.exact or p.near:
            found = (fingerprints.fingerprints
                     | "BucketRecords" >> beam.Map(_bucket_records, p)
                     | "Buckets" >> self._shuffle("buckets")
                     | "PairsAndCandidates" >> tally.FlatMap(_pairs_and_candidates, p.exact,
                                                            outputs=("candidates",), main="pairs"))
            pairs = [found.pairs]
            if p.near:
                signed = ((found.candidates, fingerprints.fingerprints | "Signatures" >> beam.Map(_signature_records))
                          | "VerifyFirst" >> self._shuffle("verify-first")
                          | "SignFirst" >> tally.FlatMap(_sign_first, p.num_perm))
                pairs.append((signed, fingerprints.fingerprints | "SignaturesAgain" >> beam.Map(_signature_records))
                             | "VerifySecond" >> self._shuffle("verify-second")
                             | "SimilarPairs" >> tally.FlatMap(_similar_pairs, p))
            clusters = (tuple(pairs)
                        | "AllPairs" >> beam.Flatten()
                        | "PairRecords" >> beam.Map(_pair_records)
                        | "OneGroup" >> self._shuffle("pairs", one=True)
                        | "Clusters" >> tally.ParDo(_Clusters(), outputs=("report",), main="removals"))
            report.append(clusters.report)
            kept = ((fingerprints.documents | "DocumentRecords" >> beam.Map(_document_records), clusters.removals)
                    | "ByDocument" >> self._shuffle("documents")
                    | "DropDocuments" >> tally.ParDo(_DropDocuments()))
        if p.paragraphs:
            records = kept | "ParagraphRecords" >> beam.FlatMap(_paragraph_records).with_outputs(
                "paragraphs", main="documents")
            drops = (records.paragraphs
                     | "ParagraphGroups" >> self._shuffle("paragraphs")
                     | "RepeatedParagraphs" >> tally.FlatMap(_paragraph_drops, p.max_paragraph_copies))
            cut = ((records.documents, drops)
                   | "ByKeptDocument" >> self._shuffle("kept")
                   | "DropParagraphs" >> tally.ParDo(_DropParagraphs(p.max_paragraph_loss), outputs=("report",)))
            report.append(cut.report)
            out = cut.main
        else:
            out = kept | "Kept" >> tally.ParDo(_PassOn())
        (tuple(report)
         | "ReportLines" >> beam.Flatten()
         | "ReportGroup" >> self._shuffle("report", one=True)
         | "WriteReport" >> tally.ParDo(_WriteReport(self.directory)))
        return out


def lost(values: dict[str, int], params: dedup.DedupParams) -> list[str]:
    """The dedup counts that must reconcile before anything is published: documents in = kept + removed, and the
    report accounts for every cluster and every document removed."""
    c = lambda name: values.get(f"dedup/{name}", 0)   # noqa: E731
    wrong = []
    if c("documents") != c("kept") + removed(values):
        wrong.append(f"dedup: {c('documents'):,} documents in, {c('kept'):,} kept and {removed(values):,} removed")
    for name in ("clusters", *dedup_report.COUNTS.values()):
        if c(f"report_{name}") != c(name):
            wrong.append(f"dedup: the report counts {c(f'report_{name}'):,} {name.replace('_', ' ')}, the job "
                         f"{c(name):,}")
    return wrong


def removed(values: dict[str, int]) -> int:
    """The documents dedup removed: exact and near duplicates, and those its paragraph pass left empty or cut to
    fragments."""
    return sum(values.get(f"dedup/{k}", 0) for k in dedup_report.COUNTS.values())


def summary(params: dedup.DedupParams, values: dict[str, int], report: str | None) -> dict:
    """The manifest's `dedup` entry: the parameters, what each pass kept and removed, and its report's name (None
    when there is none)."""
    c = lambda name: values.get(f"dedup/{name}", 0)   # noqa: E731
    return {"parameters": dataclasses.asdict(params), "documents_in": c("documents"), "kept": c("kept"),
            "removed_exact": c("removed_exact"), "removed_near": c("removed_near"),
            "removed_emptied": c("removed_emptied"), "removed_fragments": c("removed_fragments"),
            "clusters": c("clusters"),
            "empty_documents": c("empty_documents"), "repeated_paragraphs": c("repeated_paragraphs"),
            "paragraphs_dropped": c("paragraphs_dropped"), "report": report}
