"""corpora/wikipedia/: cleaning on hand-written fixtures, counts on the bundled real sample, multistream
splitting, damaged dumps, and a property test that no wikitext makes the cleaner raise."""
import bz2
import collections
import json
import re
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corpora import wikipedia
from corpora.wikipedia import (BadDumpError, Page, ReadRange, builder, clean_wikitext, is_disambiguation,
                               page_to_document, plan_reads, read_pages)
from corpora.wikipedia import wikitext as cleaning
from corpora.wikipedia.builder import make_multistream
from corpora.wikipedia.sites import ENGLISH, site_from_siteinfo
from pipeline.formats.documents import Count, Document

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests/data/wikipedia/constructs.xml"
SAMPLE = REPO / "corpora/samples/enwiki-sample.xml.bz2"

# Expected paragraphs for every article of the fixture, by title: the contract of clean_wikitext.
EXPECTED = {
    "Nested templates": ["Jean Exemple was a peintre painter. He lived in Paris.",
                         "His second paragraph ends here."],
    "Tables inside templates": ["Before the box.", "After the box.", "Last words of the page."],
    "Lists inside tables": ["Intro sentence.", "Outro with a link.", "Final sentence."],
    "Refs containing templates": ["Fact one. Fact two. Fact three. Fact four."],
    "Headings": ["Lead paragraph.", "Under one.", "Under two.", "Under three.", "Under four.", "Under five.",
                 "Under six.", "Under the linked heading.", "Under the commented heading.",
                 "Under the HTML heading."],
    "Galleries and files": ["Text before the gallery.",
                            "Text after the gallery. More text. the file page ends it."],
    "Lists": ["Prose before the lists.", "Prose after the lists."],
    "Links and formatting": ["Bold and italic and both and rock 'n' roll. Links: display, Target, Targets, Foo, "
                             "a section, word, help. External: label text and and end."],
    "Entities and HTML": ["A B & C <tag> é é é. bold span x2 H2O small line break again code.",
                          "A quoted passage.", "After the quote."],
    "Comments and magic words": ["Text visible.", "Next paragraph."],
    "Math and nowiki": ["Euler's identity holds. [[not a link]] {{not a template}} stays.", "The end."],
    "Escaped like a real dump": ["The AT&T company is in New York."],
    "Hatnote article": ["An article that only points at a disambiguation page."],
}
DISAMBIGUATION = {"Mercury", "John Smith", "Springfield", "Apple (disambiguation)", "Bass"}


def collect(items):
    """(counter of Count events, list of Pages, list of Documents) from an iterator of mixed items."""
    counts, pages, docs = collections.Counter(), [], []
    for item in items:
        if isinstance(item, Count):
            counts[item.name] += item.n
        elif isinstance(item, Page):
            pages.append(item)
        else:
            docs.append(item)
    return counts, pages, docs


def extract(pages, **kwargs):
    return collect(x for page in pages for x in page_to_document(page, **kwargs))


@pytest.fixture(scope="module")
def fixture_pages():
    counts, pages, _ = collect(read_pages(ReadRange(str(FIXTURE))))
    assert counts == {"pages": len(pages)}
    return pages


@pytest.fixture(scope="module")
def sample_pages():
    counts, pages, _ = collect(read_pages(ReadRange(str(SAMPLE))))
    assert counts == {"pages": len(pages)}
    return pages


# --- cleaning, construct by construct -------------------------------------------------------------------

@pytest.mark.parametrize("title", sorted(EXPECTED))
def test_fixture_article_paragraphs(fixture_pages, title):
    page = next(p for p in fixture_pages if p.title == title)
    out = list(page_to_document(page))
    assert out[0] == Count("articles")
    doc = out[1]
    assert doc == Document(id=f"wikipedia:constructs:{page.page_id}", source="wikipedia", title=title,
                           paragraphs=EXPECTED[title])


def test_fixture_counts_reconcile(fixture_pages):
    counts, _, docs = extract(fixture_pages)
    assert counts == {"articles": len(EXPECTED), "disambiguation": 5, "redirects": 2,
                      "non_article_namespace": 2, "empty_after_cleaning": 1}
    assert sum(counts.values()) == len(fixture_pages) == 23
    assert {d.title for d in docs} == set(EXPECTED)


def test_fixture_page_fields(fixture_pages):
    by_title = {p.title: p for p in fixture_pages}
    assert by_title["Redirect page"].redirect and not by_title["Old-style redirect"].redirect
    assert by_title["Talk:Nested templates"].namespace == 1
    assert by_title["Nested templates"].page_id == 101   # the page's <id>, not the revision's 9001
    assert by_title["Escaped like a real dump"].text.startswith("{{Infobox|a=b}}\nThe '''AT&amp;T''' company<ref>")


def test_disambiguation_kept_when_asked(fixture_pages):
    counts, _, docs = extract(fixture_pages, skip_disambiguation=False)
    assert "disambiguation" not in counts
    titles = {d.title for d in docs}
    assert DISAMBIGUATION <= titles
    mercury = next(d for d in docs if d.title == "Mercury")
    assert mercury.paragraphs == ["Mercury may refer to:"]


@pytest.mark.parametrize("title,text,expected", [
    ("X", "Text.\n{{Disambig}}", True),
    ("X", "Text.\n{{Template:disambiguation|geo}}", True),
    ("X", "Text.\n{{hndis|Smith}}", True),
    ("X", "Text.\n__DISAMBIG__", True),
    ("Foo (disambiguation)", "Text.", True),
    ("X", "{{Redirect|A|other uses|Foo (disambiguation)}} Text.", False),
    ("X", "Text{{disambiguation needed|date=2020}}.", False),
    ("X", "{{Infobox}} Text.", False),
])
def test_is_disambiguation(title, text, expected):
    assert is_disambiguation(title, text) is expected


@pytest.mark.parametrize("wikitext,expected", [
    ("", []),
    ("plain", ["plain"]),
    ("a\nb\n\n\nc", ["a b", "c"]),                               # single newlines join, blank lines split
    ("{{a|{{b|{{c}}}}}}x{{d}}", ["x"]),
    ("{{unclosed [[a]] {{closed}} text", ["unclosed a text"]),  # an unpaired {{ goes, the text stays
    ("stray }} braces", ["stray braces"]),
    ("x <ref>unclosed ref", ["x unclosed ref"]),               # an unpaired <ref> tag goes, the text stays
    ("[[File:x.png|thumb|cap [[y|z]] {{t}}]]after", ["after"]),
    ("a [[:Category:Cats|cats]] b [[Category:Cats]] c", ["a cats b c"]),
    ("a [[fr:Chat]] [[zh-min-nan:Niau]] [[WP:NPOV|policy]] b", ["a policy b"]),
    ("a&nbsp;\u00a0 b\u200bc", ["a bc"]),
    ("text\n----\nmore", ["text", "more"]),
    ("* only\n* a list", []),
    ("| stray table row\ntext", ["text"]),
    ("...\n\n()", []),                                          # no letter or digit left
    ("<div>boxed</div>text", ["boxed", "text"]),
    ("<poem>line one\nline two</poem>", ["line one line two"]),
])
def test_clean_wikitext_cases(wikitext, expected):
    assert clean_wikitext(wikitext) == expected


@pytest.mark.parametrize("wikitext,expected", [
    # templates that carry prose are rendered, their parameters expanded first (corpora/wikipedia/templates.py)
    ("It is {{convert|10|km|mi}} long.{{citation needed|date=May 2010}}", "It is 10 kilometres (6.2 mi) long."),
    ("He said ''{{lang|fr|[[bonjour]]}}'' {{small|(once)}}.", "He said bonjour (once)."),
    ("{{As of|2010}}, it had {{nowrap|{{convert|5|km}} of road}}.",
     "As of 2010, it had 5 kilometres (3.1 mi) of road."),
    ("a {{math|''x''{{=}}2}} b {{lang|1=fr|2=oui}} c", "a x=2 b oui c"),
    ("Text {{cite web|url=x|title={{lang|fr|a}}}} more.", "Text more."),
    ("born {{birth date|1947|13|1}} in Ohio.", "born in Ohio."),            # broken parameters: dropped
    # what a dropped template leaves is tidied, and only where a template was dropped
    ("'''Alabama''' ({{IPAc-en|al}}) is a state.", "Alabama is a state."),
    ("'''Aristotle''' ({{IPAc-en|x}}; {{lang-grc-gre|Ἀριστοτέλης}}, ''Aristotélēs'', {{IPA-grc|a}}; "
     "384–322 BC) was a philosopher.",
     "Aristotle (Ancient Greek: Ἀριστοτέλης, Aristotélēs; 384–322 BC) was a philosopher."),
    ("'''Rand''' ({{IPAc-en|aɪ}}; born '''Alisa''', {{lang-ru|Али́са}}; "
     "{{OldStyleDate|February 2|1905|January 20}} – March 6, 1982) wrote.",
     "Rand (born Alisa, Russian: Али́са; February 2 [O.S. January 20] 1905 – March 6, 1982) wrote."),
    ("(born 1947, {{IPA|x}}) and (born 1950 {{sfn|a}})", "(born 1947) and (born 1950)"),
    ("from the Greek {{lang|grc}}{{IPA|z}}, i.e. anarchy", "from the Greek, i.e. anarchy"),
    ("thinking {{sfn|A|2001}}. The picture, {{efn|n}}; more", "thinking. The picture; more"),
    ("{{Use dmy dates}}, here", "here"),
    ('The title "( , )" and "a , b" stay ( ; kept) : so do French spaces ; here.',
     'The title "( , )" and "a , b" stay ( ; kept) : so do French spaces ; here.'),
])
def test_templates_rendered_and_holes_tidied(wikitext, expected):
    assert clean_wikitext(wikitext) == [expected]


@pytest.mark.parametrize("wikitext,expected", [
    # a citation used as a word shows as Wikipedia shows it; a parenthetical one goes, as a <ref> does
    ("{{harvs|txt|last=Moishezon|year=1966|authorlink=Boris Moishezon}} showed that a [[Moishezon manifold]] "
     "is projective.", ["Moishezon (1966) showed that a Moishezon manifold is projective."]),
    ("{{harvtxt|Artin|1970}} showed that every such group is finite.",
     ["Artin (1970) showed that every such group is finite."]),
    ("As {{Harvtxt|Hardy|Littlewood|1914|p=12}} and {{harvcoltxt|Smith|2006|p=25}} note, it holds "
     "{{harvnb|Smith|2006}} in ({{harv|Jones|2001}}) every case {{harvp|Brown|1999}}.",
     ["As Hardy & Littlewood (1914, p. 12) and Smith (2006:25) note, it holds in every case."]),
    ("It holds ({{harvs|last=Moishezon|year=1966}}).", ["It holds."]),
    # real text: the shared enwiki sample's "Algorithm" and "Anthropology" (Wikipedia, CC BY-SA 4.0; excerpts)
    ("A prototypical example of an algorithm is [[Euclid's algorithm]] to determine the maximum common divisor "
     "of two integers.\n\n{{Harvtxt|Boolos|Jeffrey|1974, 1999}} offer an informal meaning of the word in the "
     "following quotation:\n\n<blockquote>No human being can write fast enough</blockquote>",
     ["A prototypical example of an algorithm is Euclid's algorithm to determine the maximum common divisor of "
      "two integers.", "Boolos & Jeffrey (1974, 1999) offer an informal meaning of the word in the following "
      "quotation:", "No human being can write fast enough"]),
    ("Cognitive anthropology is concerned with what people from different groups know and how that implicit "
     "knowledge changes the way people perceive and relate to the world around them."
     "<ref>{{Harvcoltxt|D'Andrade|1995}}</ref>\n\n==== Transpersonal ====",
     ["Cognitive anthropology is concerned with what people from different groups know and how that implicit "
      "knowledge changes the way people perceive and relate to the world around them."]),   # in a <ref>: a note
])
def test_citations_used_as_words(wikitext, expected):
    assert clean_wikitext(wikitext) == expected


SHARED_SAMPLE = REPO.parent / "shared/corpora/wikipedia/enwiki-sample-pages-articles.xml.bz2"


@pytest.mark.skipif(not SHARED_SAMPLE.exists(), reason="the shared enwiki sample is not here (../shared)")
def test_shared_sample_citations_used_as_words():
    """The shared sample's two Harvard text citations: the one in running text shows, the one in a <ref> goes
    with its note, and no parenthetical citation leaves its names in the text."""
    _, pages, _ = collect(read_pages(ReadRange(str(SHARED_SAMPLE))))
    cited = [p for p in pages if re.search(r"\{\{\s*(?:harv[a-z]*txt|harvs\s*\|\s*txt)", p.text, re.I)]
    assert sorted(p.title for p in cited) == ["Algorithm", "Anthropology"]
    _, _, docs = extract(cited)
    text = {d.title: "\n".join(d.paragraphs) for d in docs}
    assert "\nBoolos & Jeffrey (1974, 1999) offer an informal meaning of the word in the following quotation:\n" \
        in text["Algorithm"]
    assert "D'Andrade" not in text["Anthropology"] and \
        "perceive and relate to the world around them.\n" in text["Anthropology"]


@pytest.mark.parametrize("wikitext,expected", [
    # the bundled sample's own lead-ins (Ayn Rand, Academy Awards, Achilles): each goes with its list
    ("Rand's fiction.\n\n'''Novels:'''\n* 1936 ''[[We the Living]]''\n* 1943 ''[[The Fountainhead]]''\n\n"
     "'''Other fiction:'''\n* 1934 ''[[Night of January 16th]]''\n\nLast words.", ["Rand's fiction.", "Last words."]),
    ("Nichols boycotted the ceremony.\n\n== Associated events ==\nThe following events are closely associated with "
     "the annual Academy Awards:\n* [[César Award]]\n* Nominees luncheon", ["Nichols boycotted the ceremony."]),
    ("Achilles was played by many.\n\nThe role of Achilles has been played in film by:\n\n* [[Piero Lulli]] in "
     "''Ulysses'' (1955)\n\nAchilles has frequently been mentioned in music:\n\n* [[Achilles (band)|Achilles]] is a "
     "band.", ["Achilles was played by many."]),
    ("Homer.\n\nThe first two lines of the ''Iliad'' read:\n:{{lang|grc|μῆνιν ἄειδε θεὰ Πηληϊάδεω Ἀχιλῆος}}\n\n"
     "After.", ["Homer.", "After."]),
    ("The album was released in 1969.\n\nSide One:\n# \"Come Together\" – 4:20\n# \"Something\" – 3:03",
     ["The album was released in 1969."]),
    # a page's first paragraph stays (a disambiguation page kept on request is only that); prose ending in ":"
    # followed by a paragraph stays, as do long or several-sentence lines before a list and a lead-in before a
    # table or a heading (not a list)
    ("Mercury may refer to:\n* [[Mercury (planet)]]", ["Mercury may refer to:"]),
    ("Lincoln spoke.\n\nIn his address at Gettysburg, Lincoln said:\n\nFour score and seven years ago our fathers "
     "brought forth a new nation.", ["Lincoln spoke.", "In his address at Gettysburg, Lincoln said:",
                                     "Four score and seven years ago our fathers brought forth a new nation."]),
    ("Altruism.\n\nTheories of apparently altruistic behavior were accelerated by the need to produce theories "
     "compatible with evolutionary origins, and the proposed mechanisms are:\n* [[Kin selection]].",
     ["Altruism.", "Theories of apparently altruistic behavior were accelerated by the need to produce theories "
      "compatible with evolutionary origins, and the proposed mechanisms are:"]),
    ("Lead.\n\nHe wrote many books. Some are:\n* A", ["Lead.", "He wrote many books. Some are:"]),
    ("Lead.\n\nWater ports of Alabama, listed from north to south:\n{| class=\"wikitable\"\n|-\n| Mobile\n|}\nAfter.",
     ["Lead.", "Water ports of Alabama, listed from north to south:", "After."]),
    ("Lead.\n\nWorks:\n== Novels ==\n* A", ["Lead.", "Works:"]),
    ("Lead.\n\nBefore:\nstill the same paragraph.\n* A", ["Lead.", "Before: still the same paragraph."]),
])
def test_list_lead_ins_go_with_their_lists(wikitext, expected):
    assert clean_wikitext(wikitext) == expected


# --- the bundled real sample ----------------------------------------------------------------------------

def test_sample_counts_reconcile(sample_pages):
    counts, _, docs = extract(sample_pages)
    assert len(sample_pages) == 86
    assert counts == {"articles": 20, "redirects": 66}
    assert sum(counts.values()) == len(sample_pages)
    # the dump's name is part of the id: page ids are unique within one wiki only
    assert [d.id for d in docs][:3] == ["wikipedia:enwiki-sample:12", "wikipedia:enwiki-sample:25",
                                        "wikipedia:enwiki-sample:39"]
    assert sum(len(d.paragraphs) for d in docs) == 1042   # 1054 before lists took their 12 lead-ins along
    assert docs[0].title == "Anarchism" and docs[0].paragraphs[0] == (
        "Anarchism is a political philosophy that advocates self-governed societies based on voluntary "
        "institutions. These are often described as stateless societies, although several authors have defined "
        "them more specifically as institutions based on non-hierarchical free associations. Anarchism considers "
        "the state to be undesirable, unnecessary, and harmful. While anti-statism is central, anarchism entails "
        "opposing authority or hierarchical organisation in the conduct of all human relations, including, but "
        "not limited to, the state system.")


def test_sample_paragraphs_have_no_markup_residue(sample_pages):
    _, _, docs = extract(sample_pages)
    for doc in docs:
        for paragraph in doc.paragraphs:
            for residue in ("{{", "}}", "[[", "]]", "<ref", "Category:", "File:", "Image:", "thumb|", "''", "\n"):
                assert residue not in paragraph, (doc.title, residue, paragraph)
            assert paragraph == " ".join(paragraph.split()) and paragraph


# --- other languages: the dump's own namespace names, aliases, disambiguation, redirects ------------------

LANGUAGES = REPO / "tests/data/wikipedia/languages"
LANGUAGE_EXPECTED = json.loads((LANGUAGES / "expected.json").read_text(encoding="utf-8"))


def extract_file(path, **kwargs):
    counts, pages, docs = collect(read_pages(ReadRange(str(path))))
    more, _, docs = extract(pages, **kwargs)
    return counts + more, pages, docs


@pytest.mark.parametrize("name", sorted(LANGUAGE_EXPECTED))
def test_language_fixture(name):
    expected = LANGUAGE_EXPECTED[name]
    counts, _, docs = extract_file(LANGUAGES / name,
                                   disambiguation_templates=frozenset(expected["disambiguation_templates"]))
    assert counts == expected["counts"]
    assert {d.title: d.paragraphs for d in docs} == expected["documents"]
    assert not any("LEAK" in p for d in docs for p in d.paragraphs)   # every text marked to go went


def test_language_fixtures_cover_what_the_issue_asks():
    assert len(LANGUAGE_EXPECTED) >= 6
    assert (LANGUAGES / "bg.xml").read_bytes()[:2] == b"\xff\xfe"   # a UTF-16 export, read as any other
    _, pages, _ = extract_file(LANGUAGES / "de.xml")
    site = pages[0].site
    assert site.language == "de" and {"datei", "bild", "kategorie", "file", "category"} <= site.link_prefixes
    _, pages, _ = extract_file(LANGUAGES / "eo.xml")   # a language not in the tables: its siteinfo names
    assert pages[0].site.language == "eo" and {"dosiero", "kategorio", "file"} <= pages[0].site.link_prefixes


def test_disambiguation_templates_for_any_wiki():
    counts, _, docs = extract_file(LANGUAGES / "eo.xml")
    assert counts["disambiguation"] == 0 and {d.title for d in docs} == {"Varsovio", "Merkuro"}
    counts, _, _ = extract_file(LANGUAGES / "eo.xml", disambiguation_templates=frozenset({"apartigilo"}))
    assert counts["disambiguation"] == 1


def test_templates_of_other_wikis_are_not_drawn_in_english():
    de = site_from_siteinfo({6: "Datei", 14: "Kategorie"}, "de")
    text = "Sie ist {{convert|10|km}} lang, {{nowrap|sehr}} alt und heißt {{lang|fr|Pont}}{{lang-fr|Pont}}."
    assert clean_wikitext(text, de) == ["Sie ist lang, sehr alt und heißt Pont."]
    assert clean_wikitext(text) == ["Sie ist 10 kilometres (6.2 mi) lang, sehr alt und heißt PontFrench: Pont."]


def test_export_without_siteinfo_counts_it_once_and_uses_english_names(tmp_path):
    export = FIXTURE.read_text(encoding="utf-8")
    bare = export[:export.index("<siteinfo>")] + export[export.index("</siteinfo>") + len("</siteinfo>"):]
    (tmp_path / "bare.xml").write_text(bare, encoding="utf-8")
    counts, pages, _ = collect(read_pages(ReadRange(str(tmp_path / "bare.xml"))))
    assert counts == {"pages": 23, "no_siteinfo": 1} and all(p.site == ENGLISH for p in pages)
    dump, index = tmp_path / "bare-multistream.xml.bz2", tmp_path / "bare-multistream-index.txt.bz2"
    make_multistream(tmp_path / "bare.xml", str(dump), str(index), pages_per_stream=4)
    reads = plan_reads([str(dump)], streams_per_read=1)
    assert len(reads) == 6
    counts, pages, _ = collect(x for r in reads for x in read_pages(r))
    assert counts == {"pages": 23, "no_siteinfo": 1}   # once per file, by the range at its start


def test_multistream_ranges_carry_the_site_of_the_head(tmp_path):
    dump, index = tmp_path / "dewiki-multistream.xml.bz2", tmp_path / "dewiki-multistream-index.txt.bz2"
    make_multistream(LANGUAGES / "de.xml", str(dump), str(index), pages_per_stream=1)
    reads = plan_reads([str(dump)], streams_per_read=1)
    assert len(reads) == 5 and reads[-1].start > 0
    counts, pages, docs = extract_file(LANGUAGES / "de.xml")
    assert collect(x for r in reads for x in read_pages(r))[1] == pages
    assert all(p.site.language == "de" for p in pages)


@pytest.mark.parametrize("title,text,language,expected", [
    ("X", "Text.\n{{Begriffsklärung}}", "de", True),
    ("X", "Text.\n{{Begriffsklärung}}", "en", False),   # another wiki's template name means nothing here
    ("X", "Text.\n{{Disambig}}", "de", True),            # English names count on every wiki
    ("Schloss (Begriffsklärung)", "Text.", "de", True),
    ("X", "Text.\n__DISAMBIG__", "eo", True),
    ("X", "{{Homonymie}}", "fr", True),
])
def test_is_disambiguation_in_other_languages(title, text, language, expected):
    assert is_disambiguation(title, text, site_from_siteinfo({}, language)) is expected


# --- parse failures cost one page -----------------------------------------------------------------------

def test_parse_error_counted_and_rest_of_file_kept(fixture_pages, monkeypatch):
    real = wikipedia.clean_wikitext

    def failing(text, site):
        if "Lead paragraph." in text:
            raise RecursionError("simulated parser failure")
        return real(text, site)

    monkeypatch.setattr(cleaning, "clean_wikitext", failing)
    counts, _, docs = extract(fixture_pages)
    assert counts["parse_error"] == 1 and counts["articles"] == len(EXPECTED) - 1
    assert sum(counts.values()) == len(fixture_pages)
    assert "Headings" not in {d.title for d in docs}


# --- multistream splitting ------------------------------------------------------------------------------

def test_multistream_ranges_read_the_same_pages(tmp_path, sample_pages):
    dump = tmp_path / "enwiki-test-multistream.xml.bz2"
    index = tmp_path / "enwiki-test-multistream-index.txt.bz2"
    offsets = make_multistream(SAMPLE, str(dump), str(index), pages_per_stream=10)
    assert len(offsets) == 9 and offsets == sorted(offsets) and offsets[0] > 0   # 86 pages; header apart
    assert bz2.open(dump).read() == bz2.open(SAMPLE).read()   # the same export, cut into streams
    index_lines = bz2.open(index, "rt", encoding="utf-8").read().splitlines()
    assert len(index_lines) == 86 and index_lines[1] == f"{offsets[0]}:12:Anarchism"

    reads = plan_reads([str(dump)], streams_per_read=2)             # index found beside the dump
    assert [(r.start, r.end) for r in reads] == [(0, offsets[2]), (offsets[2], offsets[4]),
                                                 (offsets[4], offsets[6]), (offsets[6], offsets[8]),
                                                 (offsets[8], None)]
    counts, pages, _ = collect(x for r in reads for x in read_pages(r))
    assert pages == sample_pages and counts == {"pages": 86}
    # The plain read of the multistream file (no index) is one range and gives the same pages.
    assert plan_reads([str(dump)], index_path=None, streams_per_read=100) == \
        [ReadRange(str(dump), 0, None, name="enwiki-test-multistream")]
    assert collect(read_pages(ReadRange(str(dump))))[1] == sample_pages


def test_multistream_from_pages_and_explicit_index(tmp_path, fixture_pages):
    dump, index = tmp_path / "pages.xml.bz2", tmp_path / "elsewhere.txt.bz2"
    make_multistream(fixture_pages, str(dump), str(index), pages_per_stream=3)   # 23 pages -> 8 streams
    assert plan_reads([str(dump)]) == [ReadRange(str(dump), name="pages")]   # no index beside it under this name
    reads = plan_reads([str(dump)], index_path=str(index), streams_per_read=3)
    assert len(reads) == 3
    assert collect(x for r in reads for x in read_pages(r))[1] == fixture_pages
    assert plan_reads([str(dump), str(index)], index_path=str(index), streams_per_read=3) == reads
    with pytest.raises(ValueError):
        plan_reads([str(dump), str(FIXTURE)], index_path=str(index))


def test_plan_reads_without_index_and_with_a_glob_that_matched_the_index(tmp_path, fixture_pages):
    assert plan_reads([str(SAMPLE), str(FIXTURE)]) == [ReadRange(str(SAMPLE), name="corpora/samples/enwiki-sample"),
                                                       ReadRange(str(FIXTURE), name="tests/data/wikipedia/constructs")]
    dump, index = tmp_path / "f-multistream.xml.bz2", tmp_path / "f-multistream-index.txt.bz2"
    make_multistream(FIXTURE, str(dump), str(index), pages_per_stream=5)   # an uncompressed export as input
    reads = plan_reads(sorted([str(index), str(dump)]), streams_per_read=2)  # as *multistream*.bz2 expands
    assert {r.path for r in reads} == {str(dump)} and len(reads) == 3
    assert collect(x for r in reads for x in read_pages(r))[1] == fixture_pages


# --- damaged dumps --------------------------------------------------------------------------------------

def test_truncated_bz2_names_file_and_offset(tmp_path):
    data = SAMPLE.read_bytes()
    bad = tmp_path / "truncated.xml.bz2"
    bad.write_bytes(data[: len(data) * 9 // 10])
    with pytest.raises(BadDumpError, match=r"truncated\.xml\.bz2: bz2 stream starting at byte 0 is truncated"):
        list(read_pages(ReadRange(str(bad))))
    counts, pages, _ = collect(read_pages(ReadRange(str(bad)), skip_bad_files=True))
    assert counts["bad_file"] == 1 and counts["pages"] == len(pages) > 0


def test_corrupt_bz2_block(tmp_path):
    data = bytearray(SAMPLE.read_bytes())
    for i in range(1000, 1200):
        data[i] ^= 0x5A
    bad = tmp_path / "corrupt.xml.bz2"
    bad.write_bytes(bytes(data))
    with pytest.raises(BadDumpError, match=r"corrupt\.xml\.bz2: corrupt bz2 data in the stream starting at byte 0"):
        list(read_pages(ReadRange(str(bad))))
    assert collect(read_pages(ReadRange(str(bad)), skip_bad_files=True))[0]["bad_file"] == 1


def test_truncated_and_malformed_xml(tmp_path):
    xml = bz2.open(SAMPLE).read()
    cut = tmp_path / "cut.xml.bz2"
    cut.write_bytes(bz2.compress(xml[: len(xml) // 3]))     # valid bz2, XML cut mid-page
    with pytest.raises(BadDumpError, match=r"cut\.xml\.bz2: XML is truncated"):
        list(read_pages(ReadRange(str(cut))))
    bad = tmp_path / "bad.xml"
    bad.write_text("<mediawiki><page><title>A</title><ns>0</ns><id>1</id></titel></page></mediawiki>")
    with pytest.raises(BadDumpError, match=r"bad\.xml: malformed XML at line 1"):
        list(read_pages(ReadRange(str(bad))))


def test_damaged_stream_costs_only_its_range(tmp_path, sample_pages):
    dump, index = tmp_path / "d-multistream.xml.bz2", tmp_path / "d-multistream-index.txt.bz2"
    offsets = make_multistream(SAMPLE, str(dump), str(index), pages_per_stream=10)
    data = bytearray(dump.read_bytes())
    middle = (offsets[4] + offsets[5]) // 2
    data[middle: middle + 50] = bytes(50)                    # damage the 5th page stream
    dump.write_bytes(bytes(data))
    reads = plan_reads([str(dump)], streams_per_read=1)
    with pytest.raises(BadDumpError, match=rf"stream starting at byte {offsets[4]}"):
        list(read_pages(reads[4]))
    counts, pages, _ = collect(x for r in reads for x in read_pages(r, skip_bad_files=True))
    assert counts["bad_file"] == 1 and counts["pages"] == len(pages)
    assert [p.page_id for p in pages] == [p.page_id for p in sample_pages[:40] + sample_pages[50:]]


def test_index_offset_beyond_the_file(tmp_path):
    dump = tmp_path / "x-multistream.xml.bz2"
    make_multistream(SAMPLE, str(dump), str(tmp_path / "x-multistream-index.txt.bz2"), pages_per_stream=50)
    bogus = tmp_path / "bogus-index.txt"
    bogus.write_text("700:1:A\n10000000:2:B\n")
    with pytest.raises(BadDumpError, match=r"bogus-index\.txt: offset 10000000 is past the end of .*x-multistream"):
        plan_reads([str(dump)], index_path=str(bogus), streams_per_read=1)   # when planning, not in a worker
    # a range made by hand past the end still names it when read
    with pytest.raises(BadDumpError, match="no data at byte 10000000"):
        list(read_pages(ReadRange(str(dump), 10000000, None)))


# --- streaming: memory follows the largest page, not the file -------------------------------------------

def test_large_page_streams_with_bounded_memory(tmp_path):
    big_text = "word " * 2_000_000                                     # one 10 MB page
    small = [Page(i, 0, f"P{i}", "filler text " * 20_000, False) for i in range(1, 121)]   # 120 x 240 kB
    path = tmp_path / "big.xml"
    with open(path, "wb") as f:
        f.write(builder._MINIMAL_HEADER)
        for page in small[:60] + [Page(999, 0, "Big", big_text, False)] + small[60:]:
            f.write(builder._page_xml(page))
        f.write(b"</mediawiki>\n")
    assert path.stat().st_size > 38_000_000
    tracemalloc.start()
    try:
        n, big_len = 0, 0
        for item in read_pages(ReadRange(str(path))):
            if isinstance(item, Page):
                n += 1
                big_len = len(item.text) if item.page_id == 999 else big_len
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n == 121 and big_len == len(big_text)
    assert peak < 30_000_000, peak   # the 38 MB file never sits in memory; the 10 MB page may, a few times


# --- no wikitext makes the cleaner raise ----------------------------------------------------------------

MARKUP = ["[[", "]]", "{{", "}}", "{{{", "}}}", "{|", "|}", "|-", "|", "!", "<ref>", "</ref>", "<ref name=a/>",
          "<!--", "-->", "==", "=", "\n", "\n\n", "*", "#", ";", ":", "''", "'''", "<nowiki>", "</nowiki>",
          "<math>", "</math>", "<gallery>", "</gallery>", "<table>", "</table>", "<br>", "&nbsp;", "&amp;", "&#",
          "[http://x.org ", "]", "File:", "Category:", "de:", "__TOC__", "<", ">", "/>", "<div>", "</div>",
          "----", " ", "\x00", "\x01", "{{convert|", "{{lang|", "{{lang-ru|", "{{birth date|", "{{as of|",
          "{{frac|", "{{val|", "|to|", "km", "1", "-3", "e=", "(", ")", ",", ";"]


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.sampled_from(MARKUP), st.text(max_size=4)), max_size=40))
def test_clean_wikitext_never_raises(tokens):
    paragraphs = clean_wikitext("".join(tokens))
    assert isinstance(paragraphs, list)
    for paragraph in paragraphs:
        assert paragraph and paragraph == " ".join(paragraph.split())   # one line, single spaces
        assert "\x00" not in paragraph and "\x01" not in paragraph


# --- the command line -----------------------------------------------------------------------------------

@pytest.mark.slow
def test_extract_with_disambiguation_templates(tmp_path):
    from pipeline.commands import cli

    out = tmp_path / "docs"
    assert cli.main(["extract", "wikipedia", "--input", str(LANGUAGES / "eo.xml"), "--disambiguation-templates",
                     "Apartigilo,Alia", "--output", str(out), "--preset", "local-1"]) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["parameters"]["disambiguation_templates"] == ["Apartigilo", "Alia"]
    counters = m["counts"]["counters"]
    assert counters["wikipedia/disambiguation"] == 1 and counters["wikipedia/articles"] == 1


def test_disambiguation_templates_flag_refuses_an_empty_name(capsys):
    from pipeline.commands import cli

    with pytest.raises(SystemExit) as exit_:
        cli.main(["extract", "wikipedia", "--input", str(FIXTURE), "--disambiguation-templates", "a,,b",
                  "--output", "unused"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--disambiguation-templates" in err and "Traceback" not in err
