"""Shares close to the plan on any seed (issue 45), recomputed from the written shards, not from the job's counters:
each instance's tokens (masked positions restored) are looked up in each corpus's documents as the jobs tokenize
them, and the instance counts for the corpus that holds its longer segment.

- `--corpus-weights books=0.1`: the bundled sample's three books (one of them half their text) got their planned
  share on some seeds and none on others while a partial pass drew whole documents; now within 5 points of the
  plan printed before the job, on every seed, and the job's last lines say the share it wrote.
- `--validation-fraction 0.1`: each corpus holds out 0.05-0.15 of its tokens, books too (one of them is cut).
- `--validation-documents 1` on the three books holds out half their tokens: a `warning:` line says so.
"""
import json
import re

import pytest

from bench.bench_shares import Attribution, corpus_tokens, written_tokens
from pipeline.algorithms import split
from pipeline.commands import cli
from pipeline.jobs import outputs
from tests.conftest import SAMPLES, UNCASED_VOCAB

ONE = ["--preset", "local-1"]
BOOKS = ["--input", f"books:{SAMPLES / 'books'}"]
BOTH = ["--input", f"wikipedia:{SAMPLES / 'enwiki-sample.xml.bz2'}", *BOOKS]
COMMON = ["--vocab", str(UNCASED_VOCAB), "--dupe-factor", "1", *ONE]


# ---------------------------------------------------------------------------------------------- the job's last lines

def test_the_shares_written_are_said_beside_the_plan_and_warned_of_when_off():
    """mix_lines: each corpus's share beside its plan; a corpus with none warned of always; one more than 5 points
    off only when weights made the plan, with the weights that give the plan at the tokens a pass gave."""
    m = {"counts": {"corpora": {"wikipedia": {"token_share": 0.96}, "books": {"token_share": 0.04}}}}
    planned, dupes = {"wikipedia": 0.9, "books": 0.1}, {"wikipedia": 2, "books": 0.2}
    lines, warnings = outputs.mix_lines("prepare", planned, {"books": 0.1}, dupes, m)
    assert lines == ["prepare: share of the training tokens written: wikipedia 0.960 (planned 0.900), books 0.040 "
                     "(planned 0.100)"]
    assert warnings == ["wikipedia got 0.960 of the training tokens, planned 0.900, books got 0.040 of the training "
                        "tokens, planned 0.100 (the plan estimates each corpus's tokens from its bytes): "
                        "--corpus-weights wikipedia=1,books=0.267 would come closer"]
    # the weights it names: books' tokens a pass were (0.04 / 0.1) / (0.96 / 1) of Wikipedia's, so 0.267 gives 0.1
    t = (0.04 / 0.1) / (0.96 / 1)
    assert 0.267 * t / (0.267 * t + 1) == pytest.approx(0.1, abs=0.001)
    assert outputs.mix_lines("prepare", {"wikipedia": 0.9, "books": 0.1}, {}, dupes, m)[1] == []   # no weights
    close = {"counts": {"corpora": {"wikipedia": {"token_share": 0.855}, "books": {"token_share": 0.145}}}}
    assert outputs.mix_lines("prepare", planned, {"books": 0.1}, dupes, close)[1] == []   # 4 points
    none = {"counts": {"corpora": {"wikipedia": {"token_share": 1.0}}}}
    assert outputs.mix_lines("prepare", planned, {}, dupes, none)[1] == [
        "books got none of the training tokens (planned 0.100, 0.2 passes): its documents gave no instance; a "
        "larger --corpus-weights books=W gives it more passes"]


def test_a_split_share_off_its_plan_or_over_a_fifth_of_a_corpus_is_warned_of():
    """split_lines: a fraction's share more than 5 points off, or none held out; a count over 0.2 of a corpus."""
    def manifest(**shares):
        return {"split": {"corpora": {kind: {"training_documents": 2, "validation_documents": int(share > 0),
                                             "validation_token_share": share} for kind, share in shares.items()}}}

    fraction, count = split.SplitParams(1, fraction=0.1), split.SplitParams(1, documents=1)
    lines, warnings = outputs.split_lines("prepare", fraction, manifest(books=0.0, text=0.16, wikipedia=0.14))
    assert lines == ["prepare: validation split of the tokens: books 1.000 training / 0.000 validation (planned "
                     "0.1), text 0.840 training / 0.160 validation (planned 0.1), wikipedia 0.860 training / 0.140 "
                     "validation (planned 0.1)"]
    assert [w.split(":")[0] for w in warnings] == ["books holds out 0.000 of its tokens, not 0.1",
                                                   "text holds out 0.160 of its tokens, not 0.1"]
    assert all("--max-document-bytes" in w and "--validation-documents N" in w for w in warnings)
    lines, warnings = outputs.split_lines("prepare", count, manifest(books=0.21, wikipedia=0.2))
    assert "(planned" not in lines[0]
    assert warnings == ["books holds out 0.210 of its tokens, over 0.2: --validation-documents 1 holds out whole "
                        "documents, 1 of its 3 here; --validation-fraction F holds out F of each corpus's tokens, "
                        "or --max-document-bytes cuts books into smaller documents"]


def test_the_corpora_instances_must_add_up_to_those_written():
    """The shares are of the corpus/* counts: a job publishes nothing unless they count every instance written."""
    values = {"corpus/books_instances": 3, "corpus/wikipedia_instances": 5, "shuffle/shard_out": 8,
              "validation_corpus/books_instances": 2, "shuffle/validation_shard_out": 2}
    assert outputs.corpora_lost(values) == []
    assert outputs.corpora_lost({**values, "shuffle/shard_out": 9, "shuffle/validation_shard_out": 1}) == [
        "corpus: the corpora's instances add up to 8, of 9 written",
        "validation_corpus: the corpora's instances add up to 2, of 1 written"]


def test_a_corpus_the_length_threshold_leaves_without_a_document_is_refused_before_anything_else():
    """--min-document-tokens: each side's corpora kept and dropped (documents in = kept + dropped) in the last lines;
    a corpus of either side left without a document refused in one line naming its longest document, before the
    check of an empty output (which would blame the pairing), and told apart from any other failure of a job."""
    from pipeline.beam import publish
    from pipeline.jobs import errors

    values = {"min_document_tokens/books_kept_documents": 2, "min_document_tokens/books_kept_tokens": 3000,
              "min_document_tokens/books_dropped_documents": 1, "min_document_tokens/books_dropped_tokens": 1000,
              "min_document_tokens/books_longest": 2000, "min_document_tokens/text_dropped_documents": 4,
              "min_document_tokens/text_dropped_tokens": 900, "min_document_tokens/text_longest": 1_023,
              "validation_min_document_tokens/text_dropped_documents": 1,
              "validation_min_document_tokens/text_dropped_tokens": 12,
              "validation_min_document_tokens/text_longest": 12}
    assert outputs.length_lines("pairs", 1024, values) == [
        "pairs: documents of at least 1,024 tokens kept: books 2 of 3 (0.750 of its tokens), text 0 of 4 (0.000 of "
        "its tokens)",
        "pairs: documents of at least 1,024 tokens kept of the validation set: text 0 of 1 (0.000 of its tokens)"]
    assert outputs.corpora_emptied(values, 1024) == ("--min-document-tokens 1024 leaves text without a document (its "
                                                     "longest document has 1,023 tokens): nothing was published")
    assert outputs.corpora_emptied(values, 1024, held=True) == (
        "--min-document-tokens 1024 leaves the validation set's text without a document (its longest held-out "
        "document has 12 tokens): nothing was published")
    assert outputs.corpora_emptied({k: v for k, v in values.items() if "/text_" not in k}, 1024) is None
    assert outputs.emptied(0) == ()   # no flag, no refusal
    job = publish.Publication(publish.Output("/nowhere", "pairs", 1, ".tfrecord", 0), publish.files_and_counts,
                              refusals=outputs.emptied(1024), why_empty=outputs.why_empty)
    with pytest.raises(publish.Refusal, match="leaves text without a document"):   # not "nothing to write"
        publish.checked(job, [{"shard": 0, "records": 0}], values)
    # the command line tells a Refusal from any other failure: as raised, or as a worker's traceback's last line
    worker = RuntimeError("Traceback (most recent call last):\n  ...\npipeline.beam.publish.Refusal: --min-document"
                          "-tokens 9 leaves text without a document [while running 'Publish/Publish']")
    assert errors.refusal(worker) == "--min-document-tokens 9 leaves text without a document"
    assert errors.refusal(publish.Refusal("words [while running 'Publish/Publish']")) == "words"
    assert errors.refusal(RuntimeError("pipeline.beam.publish.RecordsLostError: lost")) is None


# ---------------------------------------------------------------------------------------------- from the shards

@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """Each corpus's documents as the jobs tokenize them, to find an instance's text in (bench/bench_shares.py)."""
    out = tmp_path_factory.mktemp("shares") / "docs"
    assert cli.main(["extract", *BOTH, "--output", str(out), *ONE]) == 0
    return Attribution(corpus_tokens(out, UNCASED_VOCAB))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [12345, 1, 2])
def test_a_fractional_weight_and_a_validation_fraction_meet_their_shares(seed, corpora, tmp_path, capsys):
    out = tmp_path / "o"
    assert cli.main(["prepare", *BOTH, *COMMON, "--corpus-weights", "books=0.1", "--validation-fraction", "0.1",
                     "--seed", str(seed), "--output", str(out)]) == 0
    printed = capsys.readouterr()
    planned = float(re.search(r"expected share of the training tokens: wikipedia \S+ \(1 passes\), "
                              r"books (\S+) \(0\.1 passes\)", printed.err)[1])   # the plan's lines
    training, held = written_tokens(out, corpora), written_tokens(out / "validation", corpora)
    for side in (training, held):
        assert side.pop("?", 0) < 0.01 * sum(side.values())
    books = training["books"] / sum(training.values())
    assert books > 0 and abs(books - planned) <= 0.05, (books, planned)
    # the job's own line says what the shards hold
    said = re.search(r"share of the training tokens written: wikipedia (\S+) \(planned \S+\), books (\S+) "
                     rf"\(planned {planned:.3f}\)", printed.out)
    assert said and abs(float(said[2]) - books) < 0.005, printed.out
    # held out: a share of each corpus's tokens, its training side's seen at its passes (1, and 0.1 for books)
    passes = {"wikipedia": 1, "books": 0.1}
    for kind in ("wikipedia", "books"):
        share = held.get(kind, 0) / (held.get(kind, 0) + training[kind] / passes[kind])
        assert 0.05 <= share <= 0.15, (kind, share)
    assert "warning" not in printed.err
    m = json.loads((out / "manifest.json").read_text())
    assert [(c["kind"], c["weight"], c["dupe_factor"]) for c in m["parameters"]["corpora"]] == [
        ("wikipedia", 1.0, 1), ("books", 0.1, 0.1)]


@pytest.mark.slow
def test_validation_documents_over_a_fifth_of_a_corpus_is_warned_of(corpora, tmp_path, capsys):
    """One of three books is half their tokens: a count of whole documents says so, with the flags that do better."""
    out = tmp_path / "o"
    assert cli.main(["prepare", *BOOKS, *COMMON, "--validation-documents", "1", "--output", str(out)]) == 0
    err = capsys.readouterr().err
    held = written_tokens(out / "validation", corpora)["books"]
    share = held / (held + written_tokens(out, corpora)["books"])
    assert share > 0.2
    said = [line for line in err.splitlines() if "--validation-documents 1 holds out" in line]
    assert len(said) == 1 and said[0].startswith("warning: books holds out 0.") and "over 0.2" in said[0]
    assert "--validation-fraction F" in said[0] and "--max-document-bytes" in said[0]
    assert abs(float(re.search(r"holds out (\S+) of its tokens", said[0])[1]) - share) < 0.1
