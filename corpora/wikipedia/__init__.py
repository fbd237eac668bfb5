"""Wikipedia: MediaWiki XML export dumps -> `Document`s of prose paragraphs, as the BERT paper used them.

Pipeline order, each step a free function the Beam wrapper (pipeline/beam/transforms.py: ExtractWikipedia) calls:

    plan_dumps(paths)        -> [DumpPlan] -> [ReadRange]   one work item per range of bz2 streams
    read_pages(read)         -> Count("pages"), Page, ...   streams one range, never a whole dump in memory
    page_to_document(page)   -> Count(reason) | Count("articles"), Document
    clean_wikitext(text)     -> [paragraph]                 pure; the whole of the text cleaning

    dump        dump planning and reading: ranges of bz2 streams (multistream dumps read in parallel), pages
    wikitext    pages -> documents: which pages are articles, wikitext -> paragraphs of prose
    templates   the inline templates that carry prose, rendered (units: {{convert}})
    sites       what cleaning needs to know of a wiki: its namespace names, its disambiguation marks
    builder     multistream dumps built from any export, for tests and benchmarks (no reader imports it)
"""
from corpora.wikipedia.dump import (SOURCE, BadDumpError, DumpPlan, Page, ReadRange, check_input, dump_names,
                                    index_beside, not_a_dump, plan_dumps, plan_reads, read_pages, unsplit_warnings)
from corpora.wikipedia.wikitext import clean_wikitext, is_disambiguation, is_redirect, page_to_document

__all__ = ["SOURCE", "BadDumpError", "DumpPlan", "Page", "ReadRange", "check_input", "clean_wikitext", "dump_names",
           "index_beside", "is_disambiguation", "is_redirect", "not_a_dump", "page_to_document", "plan_dumps",
           "plan_reads", "read_pages", "unsplit_warnings"]
