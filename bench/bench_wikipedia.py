"""Benchmark of corpora/wikipedia/ on the shared enwiki sample (206 pages, 6.1 MB of XML):

  1. speed: MB of wikitext per core-second for read_pages + page_to_document, against bare
     `mwparserfromhell.parse(text).strip_code()` on the same texts in the same run, and against the cleaner of
     another checkout (--baseline DIR, e.g. a `git worktree` or `git archive` of an older commit), the best of
     --repeat runs of each, taken in turns;
  2. quality: extracted paragraphs that hold a heading, list item or table cell of their page, a "Category:" or
     "File:" string, or markup residue (goal: zero of each); prose recall: a marker planted at the start of
     every line of running text, and the share of them that reaches the output (ours and the baseline's);
  3. template holes: paragraphs of >= 40 characters with an empty or separator-led bracket, a space before
     , ; or :, or a run of commas (HOLE below), ours, the baseline's and WikiExtractor 3.1.0's when it is
     installed (`pip install wikiextractor`, a comparison only); --templates adds how often each template
     stands inside running text, the table corpora/wikipedia/templates.py was chosen by;
  4. other languages: the hand-written exports of tests/data/wikipedia/languages (own namespace names, aliases,
     disambiguation): text marked LEAK or a link prefix of the wiki in the output, and expected paragraphs missed;
  5. scaling: a multistream dump of >= --scale-mb MB of XML (the sample's pages repeated under new ids, built in
     /tmp), read and cleaned range by range in one process, then by a pool of two processes.

    .venv/bin/python bench/bench_wikipedia.py [--baseline DIR] [--repeat 3] [--templates] [--scale-mb 50]
                                              [--skip-scaling]

Times are CPU seconds of this process (core-seconds) unless marked wall; the machine may be shared, so wall
times, and the scaling ratio most of all, move with its load.
"""
import argparse
import collections
import gc
import glob
import importlib.util
import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mwparserfromhell

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from corpora.wikipedia import (Page, ReadRange, clean_wikitext, page_to_document, plan_reads,  # noqa: E402
                               read_pages, templates)
from corpora.wikipedia import wikitext as wikipedia  # noqa: E402  (its cleaning's patterns)
from corpora.wikipedia.builder import make_multistream  # noqa: E402
from pipeline.formats.documents import Count, Document  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "../shared/corpora/wikipedia/enwiki-sample-pages-articles.xml.bz2"
SCRATCH = Path("/tmp/bertprep-bench-wikipedia")
LANGUAGES = REPO / "tests/data/wikipedia/languages"
HOLE = re.compile(r"\(\s*[,;:]?\s*\)|\(\s*[,;:]|\s[,;:]|,\s*,")   # what a dropped template leaves
HOLE_MIN_CHARS = 40
MB = 1e6
# The sample's pages are long (28 kB of wikitext on average, 7 times enwiki's), so a 100-page stream holds as
# much text as ~7 real ones: one stream per range keeps the ~19 ranges of the 50 MB dump balanced on 2 workers.
STREAMS_PER_READ = 1


def row(name: str, value: str, note: str = "") -> None:
    print(f"  {name:<58} {value:>14}  {note}")


def read_all(path: str) -> list[Page]:
    return [x for x in read_pages(ReadRange(path)) if isinstance(x, Page)]


def load_baseline(checkout: str):
    """corpora/wikipedia.py of a checkout from before it became the corpora/wikipedia/ package, imported beside ours
    (it shares our document contract, which a checkout from before pipeline/ had layers imports as
    pipeline.documents, and imports our templates, sites and units by their old names)."""
    from corpora.wikipedia import sites, units
    from pipeline.formats import documents

    sys.modules.setdefault("pipeline.documents", documents)
    for old, moved in (("corpora.templates", templates), ("corpora.wikisites", sites), ("corpora.units", units)):
        sys.modules.setdefault(old, moved)
    path = Path(checkout) / "corpora" / "wikipedia.py"
    spec = importlib.util.spec_from_file_location("baseline_wikipedia", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def extract(module, path: str) -> tuple[list, list[Document], collections.Counter, float, float]:
    """(pages, documents, counts, CPU s reading, CPU s cleaning) of one dump by one wikipedia module."""
    t0 = time.process_time()
    pages = [x for x in module.read_pages(module.ReadRange(path)) if isinstance(x, module.Page)]
    t_read = time.process_time() - t0
    t0 = time.process_time()
    docs, counts = [], collections.Counter()
    for page in pages:
        for item in module.page_to_document(page):
            if isinstance(item, Count):
                counts[item.name] += item.n
            else:
                docs.append(item)
    return pages, docs, counts, t_read, time.process_time() - t0


def bench_speed(path: str, baseline, repeat: int) -> tuple[list[Page], list[Document]]:
    print(f"\n1. speed (core-seconds: CPU time of this one process; best of {repeat}, taken in turns)")
    modules = {"ours": wikipedia, **({"baseline": baseline} if baseline else {})}
    best = {name: (float("inf"), 0.0) for name in modules}
    ours = None
    for i in range(repeat):
        for name, module in modules.items():
            # Each timed run starts from the same heap: no output of an earlier run alive, garbage collected
            # (a cleaner that ran with more live objects would pay for the collector's longer walks).
            gc.collect()
            pages, docs, counts, t_read, t_clean = extract(module, path)
            if t_read + t_clean < sum(best[name]):
                best[name] = (t_read, t_clean)
            if name == "ours" and i == repeat - 1:
                ours = pages, docs, counts
            del pages, docs, counts
    pages, docs, counts = ours
    t0 = time.process_time()
    for page in pages:
        mwparserfromhell.parse(page.text).strip_code()
    t_base = time.process_time() - t0
    mb = sum(len(p.text.encode()) for p in pages) / MB
    t_read, t_clean = best["ours"]
    row("pages / articles", f"{len(pages)} / {len(docs)}", repr(dict(counts)))
    row("wikitext of all pages, MB", f"{mb:.2f}")
    row("read_pages (bz2 + XML), MB/core-s", f"{mb / t_read:.1f}", f"{t_read:.2f} s")
    row("read_pages + page_to_document, MB/core-s (goal >= 1.0)", f"{mb / (t_read + t_clean):.2f}",
        f"{t_read + t_clean:.2f} s")
    if baseline:
        b_read, b_clean = best["baseline"]
        row("the same, baseline checkout, MB/core-s", f"{mb / (b_read + b_clean):.2f}",
            f"{b_read + b_clean:.2f} s")
        row("ratio: ours / baseline speed (goal >= 0.90)", f"{(b_read + b_clean) / (t_read + t_clean):.3f}x")
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


# A marker word planted at the start of every line of running text (a letter, a digit, bold or italic text, or
# an ordinary link first): the share of markers in the output is the share of prose lines kept.
_PROSE_LINE = re.compile(r"^(?=[^\W_]|''+[^\W_']|\[\[(?![^\]|:]*:))", re.M)
_PROSE_MARKER = "Qqproseqq"


def prose_recall(module, pages: list) -> tuple[int, int]:
    """(markers found in the output, markers planted) over the articles of `pages`, cleaned by `module`."""
    found = planted = 0
    for page in pages:
        if page.namespace or page.redirect or module.is_disambiguation(page.title, page.text):
            continue
        planted += len(_PROSE_LINE.findall(page.text))
        text = _PROSE_LINE.sub(_PROSE_MARKER + " ", page.text)
        found += sum(p.count(_PROSE_MARKER) for p in module.clean_wikitext(text))
    return found, planted


def bench_recall(pages: list[Page], baseline) -> None:
    print("\n   prose recall: lines of running text whose planted marker reaches the output")
    for name, module in [("ours", wikipedia)] + ([("baseline checkout", baseline)] if baseline else []):
        found, planted = prose_recall(module, pages)
        row(name, f"{found / planted:.2%}", f"{found} of {planted}")


def hole_share(paragraphs: list[str]) -> tuple[int, int, list[str]]:
    """(paragraphs of >= HOLE_MIN_CHARS characters with a HOLE, such paragraphs, a few examples)."""
    long = [p for p in paragraphs if len(p) >= HOLE_MIN_CHARS]
    holed = [p for p in long if HOLE.search(p)]
    examples = [p[max(0, m.start() - 45):m.end() + 25] for p in holed[::max(1, len(holed) // 6)][:6]
                for m in [HOLE.search(p)]]
    return len(holed), len(long), examples


def wikiextractor_paragraphs(path: str) -> list[str] | None:
    """The paragraphs WikiExtractor makes of the dump, titles left out (None if it is not installed)."""
    if importlib.util.find_spec("wikiextractor") is None:
        return None
    paragraphs = []
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, "-m", "wikiextractor.WikiExtractor", path, "-o", out, "--processes", "1",
                        "-q"], check=True, capture_output=True)
        for name in sorted(glob.glob(f"{out}/*/wiki_*")):
            title_next = False
            for line in open(name, encoding="utf-8"):
                line = line.strip()
                if line.startswith("<doc"):
                    title_next = True
                elif line and not line.startswith("</doc>"):
                    if not title_next:
                        paragraphs.append(line)
                    title_next = False
    return paragraphs


def bench_holes(path: str, docs: list[Document], baseline, count_templates: bool) -> None:
    print(f"\n3. template holes: paragraphs of >= {HOLE_MIN_CHARS} characters matching {HOLE.pattern} "
          "(goal <= 1.0%)")
    outputs = [("ours", [p for d in docs for p in d.paragraphs])]
    if baseline:
        outputs.append(("baseline checkout", [p for d in extract(baseline, path)[1] for p in d.paragraphs]))
    outputs.append(("WikiExtractor 3.1.0 (a comparison)", wikiextractor_paragraphs(path)))
    for name, paragraphs in outputs:
        if paragraphs is None:
            row(name, "-", "not installed (pip install wikiextractor)")
            continue
        holed, long, examples = hole_share(paragraphs)
        row(name, f"{holed / long:.2%}", f"{holed} of {long}")
        if name == "ours":
            print("\n".join(f"      what remains: ...{example}..." for example in examples))
    if count_templates:
        print("\n   templates inside running text (outside <ref>s), articles only: uses, articles, and what we do")
        pages = [p for p in read_all(path) if not p.namespace and not p.redirect
                 and not wikipedia.is_disambiguation(p.title, p.text)]
        for name, (uses, articles) in inline_templates(pages).most_common(50):
            print(f"      {uses:5d} {articles:4d}  {'rendered' if templates.is_rendered(name) else 'dropped':8s}  "
                  f"{name}")


_BRACES = re.compile(r"\{\{|\}\}")
_NOT_RUNNING_TEXT = ("|", "!", "{|", "*", "#", ":", ";", "=")


def inline_templates(pages: list[Page]) -> collections.Counter:
    """Template name -> (uses on a line of running text, articles using it so); outermost templates only."""
    uses, articles = collections.Counter(), collections.defaultdict(set)
    for page in pages:
        text = wikipedia._EXTENSION_PAIR.sub("", wikipedia._COMMENT.sub("", page.text))
        opens: list[int] = []
        for m in _BRACES.finditer(text):
            if m.group() == "{{":
                opens.append(m.start())
                continue
            if not opens:
                continue
            start = opens.pop()
            if opens:       # nested in another template
                continue
            name = templates.normal_name(re.split(r"[|\n]", text[start + 2:m.start()], maxsplit=1)[0])
            line_start, line_end = text.rfind("\n", 0, start) + 1, text.find("\n", m.end())
            line = text[line_start:start] + text[m.end():line_end if line_end >= 0 else len(text)]
            if re.search(r"[^\W\d_]{3,}", line) and not line.lstrip().startswith(_NOT_RUNNING_TEXT):
                uses[name] += 1
                articles[name].add(page.page_id)
    return collections.Counter({name: (n, len(articles[name])) for name, n in uses.items()})


def bench_languages(baseline) -> None:
    print(f"\n4. other languages: {LANGUAGES.relative_to(REPO)} (paragraphs with text marked LEAK or a link "
          "prefix of the wiki; expected paragraphs missed; goal zero of each)")
    expected = json.loads((LANGUAGES / "expected.json").read_text(encoding="utf-8"))
    for name, module in [("ours", wikipedia)] + ([("baseline checkout", baseline)] if baseline else []):
        leaks = missed = total = 0
        for file, want in sorted(expected.items()):
            pages = [x for x in module.read_pages(module.ReadRange(str(LANGUAGES / file)))
                     if isinstance(x, module.Page)]
            prefixes = read_all(str(LANGUAGES / file))[0].site.link_prefixes   # the wiki's, as ours reads them
            got = [p for page in pages for d in module.page_to_document(page) if isinstance(d, Document)
                   for p in d.paragraphs]
            leaks += sum("LEAK" in p or any(f"{prefix}:" in p.lower() for prefix in prefixes) for p in got)
            wanted = [p for paragraphs in want["documents"].values() for p in paragraphs]
            missed += sum(p not in got for p in wanted)
            total += len(wanted)
        row(f"{name}: {len(expected)} exports, leaking paragraphs / expected missed", f"{leaks} / {missed}",
            f"of {total} expected paragraphs")


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
    print(f"\n5. multistream scaling (wall seconds; {os.cpu_count()} cores, "
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
    parser.add_argument("--baseline", help="a checkout of another commit whose cleaner to compare with")
    parser.add_argument("--repeat", type=int, default=3, help="speed runs of each cleaner, the best counted")
    parser.add_argument("--templates", action="store_true", help="list templates inside running text")
    args = parser.parse_args(argv)
    if not Path(args.sample).exists():
        sys.exit(f"no sample at {args.sample} (the shared corpora sit at ../shared beside the checkout)")
    if args.baseline and not (Path(args.baseline) / "corpora" / "wikipedia.py").exists():
        sys.exit(f"--baseline {args.baseline}: no corpora/wikipedia.py there")
    print(f"bench_wikipedia: {Path(args.sample).resolve()}"
          + (f"; baseline: {Path(args.baseline).resolve()}" if args.baseline else ""))
    baseline = load_baseline(args.baseline) if args.baseline else None
    pages, docs = bench_speed(args.sample, baseline, args.repeat)
    bench_quality(pages, docs)
    bench_recall(pages, baseline)
    bench_holes(args.sample, docs, baseline, args.templates)
    bench_languages(baseline)
    if not args.skip_scaling:
        bench_scaling(pages, args.scale_mb)


if __name__ == "__main__":
    main()
