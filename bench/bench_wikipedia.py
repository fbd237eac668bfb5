"""Benchmark of corpora/wikipedia.py on the shared enwiki sample (206 pages, 6.1 MB of XML):

  1. speed: MB of wikitext per core-second for read_pages + page_to_document, against bare
     `mwparserfromhell.parse(text).strip_code()` on the same texts in the same run;
  2. quality: extracted paragraphs that hold a heading, list item or table cell of their page, a "Category:" or
     "File:" string, or markup residue (goal: zero of each);
  3. scaling: a multistream dump of >= --scale-mb MB of XML (the sample's pages repeated under new ids, built in
     /tmp), read and cleaned range by range in one process, then by a pool of two processes.

    .venv/bin/python bench/bench_wikipedia.py [--scale-mb 50] [--skip-scaling]

Times are CPU seconds of this process (core-seconds) unless marked wall; the machine may be shared, so wall
times, and the scaling ratio most of all, move with its load.
"""
import argparse
import collections
import multiprocessing
import os
import re
import sys
import time
from pathlib import Path

import mwparserfromhell

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from corpora.wikipedia import (Page, ReadRange, clean_wikitext, make_multistream, page_to_document,  # noqa: E402
                               plan_reads, read_pages)
from pipeline.documents import Count, Document  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "../shared/corpora/wikipedia/enwiki-sample-pages-articles.xml.bz2"
SCRATCH = Path("/tmp/bertprep-bench-wikipedia")
MB = 1e6
# The sample's pages are long (28 kB of wikitext on average, 7 times enwiki's), so a 100-page stream holds as
# much text as ~7 real ones: one stream per range keeps the ~19 ranges of the 50 MB dump balanced on 2 workers.
STREAMS_PER_READ = 1


def row(name: str, value: str, note: str = "") -> None:
    print(f"  {name:<58} {value:>14}  {note}")


def read_all(path: str) -> list[Page]:
    return [x for x in read_pages(ReadRange(path)) if isinstance(x, Page)]


def bench_speed(path: str) -> tuple[list[Page], list[Document]]:
    print("\n1. speed (core-seconds: CPU time of this one process)")
    t0 = time.process_time()
    pages = read_all(path)
    t_read = time.process_time() - t0
    t0 = time.process_time()
    docs, counts = [], collections.Counter()
    for page in pages:
        for item in page_to_document(page):
            if isinstance(item, Count):
                counts[item.name] += item.n
            else:
                docs.append(item)
    t_clean = time.process_time() - t0
    t0 = time.process_time()
    for page in pages:
        mwparserfromhell.parse(page.text).strip_code()
    t_base = time.process_time() - t0
    mb = sum(len(p.text.encode()) for p in pages) / MB
    row("pages / articles", f"{len(pages)} / {len(docs)}", repr(dict(counts)))
    row("wikitext of all pages, MB", f"{mb:.2f}")
    row("read_pages (bz2 + XML), MB/core-s", f"{mb / t_read:.1f}", f"{t_read:.2f} s")
    row("read_pages + page_to_document, MB/core-s (goal >= 1.0)", f"{mb / (t_read + t_clean):.2f}",
        f"{t_read + t_clean:.2f} s")
    row("bare parse(text).strip_code() on the same texts, MB/core-s", f"{mb / t_base:.2f}", f"{t_base:.2f} s")
    row("ratio: ours (read + clean) / bare strip_code speed", f"{t_base / (t_read + t_clean):.2f}x")
    return pages, docs


# Marker words planted in every heading title, list item and table cell before cleaning: a marker in the
# output is a leak, with no false positive from prose that merely repeats a heading's words.
_MARKERS = [
    ("a heading title", re.compile(r"^(=+)(.+?)(=+)[ \t]*$", re.M), r"\1 Qqheadingqq \2\3"),
    ("a list item", re.compile(r"^([*#;:]+)", re.M), r"\1 Qqlistqq "),
    ("a table cell", re.compile(r"^([|!])(?![-}+])|(\|\||!!)", re.M), r"\1\2 Qqcellqq "),
]


def bench_quality(pages: list[Page], docs: list[Document]) -> None:
    """Counts leaks of headings, list items and table cells (by planted markers, see _MARKERS) and
    markup residue in the paragraphs of every extracted article."""
    print("\n2. quality: paragraphs holding (goal: zero each)")
    text_of = {p.page_id: p.text for p in pages}
    hits, examples = collections.Counter(), {}
    residue = ["{{", "}}", "[[", "]]", "|", "<ref", "Category:", "File:", "Image:"]
    n_paragraphs = 0
    for doc in docs:
        text = text_of[int(doc.id.split(":")[1])]
        for what, pattern, repl in _MARKERS:
            marker = repl.split()[-1]
            for paragraph in clean_wikitext(pattern.sub(repl, text)):
                if marker in paragraph:
                    hits[what] += 1
                    examples.setdefault(what, f"{doc.title}: ...{_around(paragraph, marker)}...")
        for paragraph in doc.paragraphs:
            n_paragraphs += 1
            for r in residue:
                if r in paragraph:
                    hits[r] += 1
                    examples.setdefault(r, f"{doc.title}: ...{_around(paragraph, r)}...")
    row("paragraphs checked", f"{n_paragraphs}")
    for what in [m[0] for m in _MARKERS] + residue:
        row(what if " " in what else f"residue {what!r}", f"{hits[what]}", examples.get(what, ""))


def _around(paragraph: str, needle: str) -> str:
    at = paragraph.find(needle)
    return paragraph[max(0, at - 40): at + 40]


# --- 3. scaling over multistream ranges -------------------------------------------------------------------

def _work(read: ReadRange) -> tuple[collections.Counter, float]:
    """Reads and cleans one range: (its counts, the CPU seconds it took)."""
    t0, counts = time.process_time(), collections.Counter()
    for item in read_pages(read):
        if isinstance(item, Page):
            for out in page_to_document(item):
                if isinstance(out, Count):
                    counts[out.name] += out.n
        else:
            counts[item.name] += item.n
    return counts, time.process_time() - t0


def build_big_dump(pages: list[Page], scale_mb: float) -> tuple[str, float]:
    """Repeats the sample's pages under new ids (copy k adds k * 10^7) until the XML holds scale_mb MB."""
    SCRATCH.mkdir(parents=True, exist_ok=True)
    dump = SCRATCH / f"enwiki-x{scale_mb:g}MB-multistream.xml.bz2"
    index = SCRATCH / f"enwiki-x{scale_mb:g}MB-multistream-index.txt.bz2"
    xml_mb = sum(len(p.text.encode()) + 200 for p in pages) / MB
    copies = int(scale_mb / xml_mb) + 1
    if not (dump.exists() and index.exists()):
        make_multistream((Page(p.page_id + k * 10_000_000, p.namespace, p.title, p.text, p.redirect)
                          for k in range(copies) for p in pages), str(dump), str(index))
    return str(dump), copies * xml_mb


def bench_scaling(pages: list[Page], scale_mb: float) -> None:
    print(f"\n3. multistream scaling (wall seconds; {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f} at start)")
    t0 = time.perf_counter()
    dump, xml_mb = build_big_dump(pages, scale_mb)
    row("dump: XML MB (approx.) / bz2 MB", f"{xml_mb:.0f} / {os.path.getsize(dump) / MB:.1f}",
        f"built or reused in {time.perf_counter() - t0:.1f}s: {dump}")
    t0 = time.perf_counter()
    reads = plan_reads([dump], streams_per_read=STREAMS_PER_READ)
    row(f"plan_reads (index -> ranges of {STREAMS_PER_READ} stream(s) of 100 pages)", f"{len(reads)} ranges",
        f"{time.perf_counter() - t0:.2f}s")
    t0 = time.perf_counter()
    single = [_work(r) for r in reads]
    t_single = time.perf_counter() - t0
    t0 = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(2) as pool:
        pooled = list(pool.imap_unordered(_work, reads))
    t_pool = time.perf_counter() - t0
    counts_single = sum((counts for counts, _ in single), collections.Counter())
    counts_pooled = sum((counts for counts, _ in pooled), collections.Counter())
    row("1 process: read + clean every range, wall s", f"{t_single:.1f}",
        f"{xml_mb / t_single:.2f} MB XML/s; CPU of the ranges {sum(s for _, s in single):.1f} s")
    row("pool of 2 processes over the same ranges, wall s", f"{t_pool:.1f}",
        f"{xml_mb / t_pool:.2f} MB XML/s; CPU of the ranges {sum(s for _, s in pooled):.1f} s")
    row("speed-up (ideal 2.0 on 2 idle cores)", f"{t_single / t_pool:.2f}x",
        "same counts" if counts_pooled == counts_single else "COUNTS DIFFER")
    row("counts", f"{counts_single['pages']} pages", repr(dict(counts_single)))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sample", default=str(SAMPLE))
    parser.add_argument("--scale-mb", type=float, default=50.0, help="XML MB of the scaling dump")
    parser.add_argument("--skip-scaling", action="store_true")
    args = parser.parse_args(argv)
    if not Path(args.sample).exists():
        sys.exit(f"no sample at {args.sample} (the shared corpora sit at ../shared beside the checkout)")
    print(f"bench_wikipedia: {Path(args.sample).resolve()}")
    pages, docs = bench_speed(args.sample)
    bench_quality(pages, docs)
    if not args.skip_scaling:
        bench_scaling(pages, args.scale_mb)


if __name__ == "__main__":
    main()
