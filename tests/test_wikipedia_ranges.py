"""corpora/wikipedia/dump.py's planning at scale: a multistream dump without its index splits by scanning for its bz2
streams (the same cuts as the index gives), the index is streamed, a bad index fails when planning in one line, and
on an object store each range downloads only its own bytes."""
import dataclasses
import logging
import math
import os
import random
import shutil
import tracemalloc

import pytest

from corpora import wikipedia
from corpora.wikipedia import BadDumpError, Page, page_to_document, plan_dumps, plan_reads, read_pages
from corpora.wikipedia import dump as wikidump
from corpora.wikipedia.builder import make_multistream
from pipeline.formats.documents import Document
from tests import simstore
from tests.conftest import REPO, same_tree

SAMPLE = REPO / "corpora/samples/enwiki-sample.xml.bz2"        # 86 pages, one bz2 stream
FIXTURE = REPO / "tests/data/wikipedia/constructs.xml"          # 23 pages, plain XML


def repack(tmp_path, pages_per_stream: int, source=SAMPLE, name: str = "x") -> tuple[str, str]:
    """(dump, index) of `source` re-packed as a multistream dump, its index under a name no one looks for."""
    dump, index = tmp_path / f"{name}-multistream.xml.bz2", tmp_path / f"{name}-elsewhere-index.txt.bz2"
    make_multistream(source, str(dump), str(index), pages_per_stream=pages_per_stream)
    return str(dump), str(index)


def documents(reads) -> list[Document]:
    """The documents of some ranges, ids without the dump's name (`wikipedia:<page id>`): these tests read one export
    from files of other names."""
    return [dataclasses.replace(d, id="wikipedia:" + d.id.rsplit(":", 1)[1]) for r in reads for p in read_pages(r)
            if isinstance(p, Page) for d in page_to_document(p) if isinstance(d, Document)]


def test_ids_carry_the_dump_name_so_two_dumps_never_collide(tmp_path):
    """The same pages in two dumps (two snapshots of one wiki, or two wikis whose page ids overlap) are two sets of
    documents: each id names its dump, relative to the dumps' common directory, without .xml/.bz2."""
    (tmp_path / "2024").mkdir()
    (tmp_path / "2025").mkdir()
    first, second = str(tmp_path / "2024" / "enwiki.xml.bz2"), str(tmp_path / "2025" / "enwiki.xml.bz2")
    for path in (first, second):
        shutil.copy(SAMPLE, path)
    ids = [d.id for r in plan_reads([first, second]) for p in read_pages(r) if isinstance(p, Page)
           for d in page_to_document(p) if isinstance(d, Document)]
    assert len(ids) == 40 and len(set(ids)) == 40
    assert ids[0] == "wikipedia:2024/enwiki:12" and ids[20] == "wikipedia:2025/enwiki:12"
    # one dump alone: its name (the same on any machine and runner, wherever the file lies)
    assert next(d for p in read_pages(plan_reads([first])[0]) if isinstance(p, Page)
                for d in page_to_document(p) if isinstance(d, Document)).id == "wikipedia:enwiki:12"


# --- without an index, a multistream dump splits as with it ---------------------------------------------------

@pytest.mark.parametrize("pages_per_stream,streams_per_read,read_bytes", [
    (1, 1, 1 << 20), (2, 3, 3000), (5, 10, 1500), (3, 100, 1 << 20)])
def test_scanned_ranges_equal_the_indexed_ones(tmp_path, monkeypatch, pages_per_stream, streams_per_read,
                                               read_bytes):
    monkeypatch.setattr(wikidump, "_READ_BYTES", read_bytes)   # small reads: stream headers across read ends
    dump, index = repack(tmp_path, pages_per_stream)
    scanned, indexed = plan_reads([dump], streams_per_read=streams_per_read), \
        plan_reads([dump], index_path=index, streams_per_read=streams_per_read)
    assert scanned == indexed   # the same cuts, each range after the first with the same head
    streams = math.ceil(86 / pages_per_stream)
    assert len(scanned) == math.ceil(streams / streams_per_read)
    assert all(b"</siteinfo>" in r.head for r in scanned[1:]) and scanned[0].head == b""
    assert plan_dumps([dump])[0].split


def test_a_multistream_dump_splits_into_a_range_per_100_mb_at_least(tmp_path):
    """The issue's number, on the default of 10 streams per range: here 44 streams of ~10 kB -> 5 ranges."""
    dump, _ = repack(tmp_path, 2)
    reads = plan_reads([dump])
    assert len(reads) == 5 >= os.path.getsize(dump) / 100e6


def test_extracting_with_and_without_the_index_gives_the_same_documents(tmp_path):
    dump, index = repack(tmp_path, 2)
    whole = documents(plan_reads([str(SAMPLE)]))
    assert len(whole) == 20   # the sample's 20 articles
    assert documents(plan_reads([dump], streams_per_read=3)) == whole
    assert documents(plan_reads([dump], index_path=index, streams_per_read=3)) == whole


def test_a_false_stream_start_is_skipped(tmp_path):
    """Stream headers that do not decode (here appended junk, as a chance match inside compressed data would be)
    are not counted: the scan still gives the index's cuts."""
    dump, index = repack(tmp_path, 1)
    with open(dump, "ab") as f:
        f.write(b"BZh91AY&SY" + random.Random(0).randbytes(3000))
    assert plan_reads([dump], streams_per_read=4) == plan_reads([dump], index_path=index, streams_per_read=4)
    rng = random.Random(1)
    assert all(wikidump._probe(b"BZh" + rng.choice([b"1", b"9"]) + b"1AY&SY" + rng.randbytes(1014)) is None
               for _ in range(500))


def test_plain_files_are_one_range_and_warn_with_their_size(tmp_path):
    dump, _ = repack(tmp_path, 10)
    dumps = plan_dumps([str(SAMPLE), str(FIXTURE), dump], streams_per_read=1)
    assert [(len(d.ranges()), d.split) for d in dumps] == [(1, False), (1, False), (9, True)]
    warnings = wikipedia.unsplit_warnings(dumps)
    assert len(warnings) == 2 and warnings[0].startswith(f"{SAMPLE}: 0.4 MB read by one worker, unsplit")


def test_only_a_distributed_runner_warns(tmp_path, caplog):
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipeline.beam.transforms import ExtractWikipedia

    for flags, lines in ((["--runner=DirectRunner"], 0), (["--runner=PortableRunner", "--job_endpoint=x:1"], 1)):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            p = beam.Pipeline(options=PipelineOptions(flags))
            _ = p | ExtractWikipedia([str(SAMPLE)])   # built, never run
        assert [r.getMessage() for r in caplog.records if "unsplit" in r.getMessage()] == \
            [f"{SAMPLE}: 0.4 MB read by one worker, unsplit: it is not a multistream dump (*-multistream.xml.bz2, "
             "whose bz2 streams of 100 pages are read in parallel)"] * lines


# --- the index: streamed, and checked when planning ---------------------------------------------------------

def test_the_index_is_streamed_holding_only_the_cuts(tmp_path):
    index = tmp_path / "big-index.txt"
    offsets = range(1000, 1000 + 100 * 300_000, 100)   # 300,000 streams, 2 lines each: 9 MB of index
    index.write_bytes(b"".join(b"%d:%d:Title %d\n%d:%d:Other\n" % (o, o, o, o, o + 1) for o in offsets))
    tracemalloc.start()
    try:
        cuts, first, last = wikidump._every_nth(wikidump._index_offsets(str(index)), 1000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (cuts, first, last) == (list(offsets)[1000::1000], offsets[0], offsets[-1])
    assert peak < 8_000_000, peak   # 5 MB; a set of every offset, then their sorted list, peaked at 34 MB


def test_an_index_whose_offsets_go_back_is_refused(tmp_path):
    dump, _ = repack(tmp_path, 10)
    index = tmp_path / "shuffled-index.txt"
    index.write_text("900:1:A\n500:2:B\n")
    with pytest.raises(BadDumpError, match=r"shuffled-index\.txt: offset 500 after 900"):
        plan_reads([dump], index_path=str(index))


def test_another_dumps_index_is_refused_when_planning(tmp_path):
    dump, _ = repack(tmp_path, 2)
    _, other = repack(tmp_path, 3, source=FIXTURE, name="other")   # its offsets all fall inside `dump`
    with pytest.raises(BadDumpError, match=r"x-multistream\.xml\.bz2: no bz2 stream starts at byte \d+, which the "
                                           r"index .*other-elsewhere-index\.txt\.bz2 lists"):
        plan_reads([dump], index_path=other)


def test_a_truncated_index_is_refused_when_planning(tmp_path):
    dump, index = repack(tmp_path, 1)
    data = open(index, "rb").read()
    cut = tmp_path / "cut-index.txt.bz2"
    cut.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(BadDumpError, match=r"cut-index\.txt\.bz2: bz2 stream starting at byte 0 is truncated"):
        plan_reads([dump], index_path=str(cut))


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["another dump's", "past the end"])
def test_a_bad_index_stops_the_command_in_one_line_and_publishes_nothing(tmp_path, damage, capsys):
    from pipeline.commands import cli

    dump, _ = repack(tmp_path, 2)
    if damage == "another dump's":
        _, index = repack(tmp_path, 3, source=FIXTURE, name="other")
    else:
        index = str(tmp_path / "long-index.txt")
        open(index, "w").write(f"600:1:A\n{10 ** 9}:2:B\n")
    out = tmp_path / "docs"
    with pytest.raises(SystemExit) as exit_:
        cli.main(["extract", "wikipedia", "--input", dump, "--wiki-index", index, "--output", str(out),
                  "--preset", "local-1"])
    message = str(exit_.value.code)
    assert message.startswith("bertprep extract: ") and "\n" not in message and index in message
    assert ("no bz2 stream starts at byte" if damage == "another dump's" else f"offset {10 ** 9} is past") in message
    assert not [f for _, _, files in os.walk(tmp_path / "docs") for f in files]


# --- on an object store each range fetches its own bytes --------------------------------------------------

def upload(bucket: str, *paths: str) -> list[str]:
    """Copies local files into the simulated store (no upload counted); returns their simstore:// paths."""
    for path in paths:
        shutil.copyfile(path, simstore._object(bucket, os.path.basename(path)))
    return [f"simstore://{bucket}/{os.path.basename(p)}" for p in paths]


def test_ranges_download_only_their_bytes_from_an_object_store(tmp_path):
    """Each range used to re-read the file head and to fetch 16 MiB per read: 24x this dump. Now <= 1.2x."""
    dump, index = repack(tmp_path, 1)
    os.rename(index, index := dump.replace(".xml.bz2", "-index.txt.bz2"))   # beside it: found
    bucket = simstore.new_bucket()
    remote, _ = upload(bucket, dump, index)
    reads = plan_reads([remote], streams_per_read=3)
    assert len(reads) == 29
    assert documents(reads) == documents(plan_reads([str(SAMPLE)]))
    assert simstore.usage(bucket)["downloaded"] / os.path.getsize(dump) <= 1.2


def test_without_an_index_an_object_store_dump_is_scanned_once(tmp_path):
    dump, index = repack(tmp_path, 1)
    bucket = simstore.new_bucket()
    remote, = upload(bucket, dump)
    reads = plan_reads([remote], streams_per_read=3)
    assert [(r.start, r.end) for r in reads] == \
        [(r.start, r.end) for r in plan_reads([dump], index_path=index, streams_per_read=3)]
    planned = simstore.usage(bucket)["downloaded"]
    assert planned <= os.path.getsize(dump) + (1 << 20)   # one pass, and the head (one read)
    documents(reads)
    assert simstore.usage(bucket)["downloaded"] - planned <= 1.2 * os.path.getsize(dump)


@pytest.mark.slow
def test_extract_from_an_object_store_downloads_the_dump_about_once(tmp_path):
    """`bertprep extract wikipedia` through Beam (plans cut into ranges on a worker) with the dump and its index on
    the simulated store: the documents of a local run, and <= 1.2x the dump's bytes downloaded."""
    from pipeline.commands import cli

    dump, index = repack(tmp_path, 1)
    bucket = simstore.new_bucket()
    remote, remote_index = upload(bucket, dump, index)
    common = ["--preset", "local-1", "--num-shards", "1"]
    assert cli.main(["extract", "wikipedia", "--input", remote, "--wiki-index", remote_index, "--output",
                     str(tmp_path / "store"), *common]) == 0
    assert simstore.usage(bucket)["downloaded"] / os.path.getsize(dump) <= 1.2
    assert cli.main(["extract", "wikipedia", "--input", dump, "--output", str(tmp_path / "local"),   # its name: the ids'
                     *common]) == 0
    same_tree(tmp_path / "store", tmp_path / "local", ignore=("manifest.json",))   # it names each input
