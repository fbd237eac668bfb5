"""Wikipedia pages -> `Document`s of prose paragraphs, as the BERT paper used them.

    page_to_document(page)   -> Count(reason) | Count("articles"), Document
    clean_wikitext(text)     -> [paragraph]                 pure; the whole of the text cleaning

Counters reconcile: pages == articles + redirects + non_article_namespace + disambiguation + parse_error
+ empty_after_cleaning (pages: dump.read_pages's count).

Any language: each Page carries its wiki's `Site` (sites.py), built from the dump's <siteinfo>: the names of its
File, Media and Category namespaces (with English's and the usual aliases) and the marks of its disambiguation
pages. Templates that carry prose are rendered (templates.py), the rest dropped.
"""
from __future__ import annotations

import logging
import re
from typing import Iterator

import mwparserfromhell
from mwparserfromhell.nodes import ExternalLink, Heading, HTMLEntity, Tag, Text, Wikilink

from corpora.kinds import WIKIPEDIA
from corpora.wikipedia import templates
from corpora.wikipedia.dump import SOURCE, Page
from corpora.wikipedia.sites import ENGLISH, Site
from pipeline.formats.documents import Count, Document

_TEMPLATE_NAME = re.compile(r"\{\{\s*([^{}|<>\n]+?)\s*(?:\||\}\})")


def is_disambiguation(title: str, text: str, site: Site = ENGLISH, templates_too: frozenset[str] = frozenset()) \
        -> bool:
    """True for a disambiguation page: the __DISAMBIG__ switch, a title qualifier such as "(disambiguation)",
    or a disambiguation template of the site's language, of English, or among `templates_too` (normal names)."""
    if "__DISAMBIG__" in text or title.rstrip().lower().endswith(site.disambiguation_titles):
        return True
    names = site.disambiguation_templates | templates_too
    return any(templates.normal_name(m.group(1)) in names for m in _TEMPLATE_NAME.finditer(text))


def is_redirect(page: Page) -> bool:
    """A <redirect/> page, or an old export's "#REDIRECT [[...]]" in the site's language or English."""
    return page.redirect or page.text.lstrip()[:32].lower().startswith(page.site.redirect_words)


def page_to_document(page: Page, skip_disambiguation: bool = True,
                     disambiguation_templates: frozenset[str] = frozenset()) -> Iterator[Document | Count]:
    """For each page exactly one of: Count("articles") and its Document, or Count(<why it was dropped>).
    `disambiguation_templates`: more names of templates that mark a disambiguation page (normal names)."""
    if page.namespace != 0:
        yield Count("non_article_namespace")
        return
    if is_redirect(page):
        yield Count("redirects")
        return
    if skip_disambiguation and is_disambiguation(page.title, page.text, page.site, disambiguation_templates):
        yield Count("disambiguation")
        return
    try:
        paragraphs = clean_wikitext(page.text, page.site)
    except Exception:  # noqa: BLE001 - one unparsable page must cost that page only, never the rest of the file
        logging.warning("wikitext of page %d (%r) could not be cleaned", page.page_id, page.title, exc_info=True)
        yield Count("parse_error")
        return
    if not paragraphs:
        yield Count("empty_after_cleaning")
        return
    yield Count(WIKIPEDIA.documents)
    yield Document(id=page.document_id, source=SOURCE, title=page.title, paragraphs=paragraphs)


# ---------------------------------------------------------------------------------------------------------
# Cleaning: wikitext -> paragraphs of prose.
#
# Two passes. First, regexes and a brace matcher cut what can never hold prose (comments, <ref>s and other
# extension tags, templates): they are most of an article's bytes, and cutting them before mwparserfromhell
# runs spares it the markup it parses slowest and worst (the whole cleaning runs ~2.5x faster than a bare
# parse().strip_code(); bench/bench_wikipedia.py). Second, mwparserfromhell parses the rest and one walk over
# its tree keeps the text (see clean_wikitext).

# Extension tags whose content is never prose (formulas, code, media, reference lists) or is only shown when
# the page is transcluded (includeonly). Cut with their content before templates, since formulas and code are
# full of braces and pipes.
_DROPPED_EXTENSION_TAGS = ("ref", "references", "math", "chem", "ce", "score", "timeline", "graph",
                           "syntaxhighlight", "source", "pre", "gallery", "imagemap", "mapframe", "maplink",
                           "templatedata", "templatestyles", "inputbox", "categorytree", "hiero", "charinsert",
                           "indicator", "includeonly", "section")
_TAG_NAMES = "|".join(_DROPPED_EXTENSION_TAGS)
_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.S)
_NOWIKI = re.compile(r"<nowiki\s*>(.*?)</nowiki\s*>|<nowiki\s*/>", re.S | re.I)
_EXTENSION_PAIR = re.compile(rf"<({_TAG_NAMES})(?:\s[^<>]*)?(?<!/)>.*?</\1\s*>", re.S | re.I)
_EXTENSION_SINGLE = re.compile(rf"</?(?:{_TAG_NAMES})(?:\s[^<>]*)?/?>", re.I)  # self-closing or unpaired
_BRACES = re.compile(r"\{\{|\}\}")
_TEMPLATE_HEAD = re.compile(r"[^{}|]*(?=\||$)", re.S)   # a template's name, up to its first pipe
_PARAM_TOKENS = re.compile(r"\{\{|\}\}|\[\[|\]\]|\|")
_HOLE = "\x01"   # where a template was dropped; the tidying in _paragraphs works only at these seams
_INDENTED_TABLE = re.compile(r"^[ \t]*:+[ \t]*(?=\{\|)", re.M)  # ":{|" is a table pushed right, not a list
_MAGIC_WORDS = re.compile(
    r"__(?:NOTOC|FORCETOC|TOC|NOEDITSECTION|NEWSECTIONLINK|NONEWSECTIONLINK|NOGALLERY|HIDDENCAT|"
    r"EXPECTUNUSEDCATEGORY|NOCONTENTCONVERT|NOCC|NOTITLECONVERT|NOTC|INDEX|NOINDEX|STATICREDIRECT|DISAMBIG|"
    r"NOGLOBAL|EXPECTED_UNCONNECTED_PAGE|ARCHIVEDTALK|NOTALK)__", re.I)

# Inside <nowiki> markup is text: entity-escape it so neither pass reads it as markup; the walk decodes it.
_NOWIKI_ESCAPES = {c: f"&#{ord(c)};" for c in "&<>[]{}|'=*#:;_~-"}
_NOWIKI_TABLE = str.maketrans(_NOWIKI_ESCAPES)

# Link prefixes: files (their captions go too) and categories, by the names of the page's Site, and
# interlanguage links, which are language codes ([[de:Foo]]). A 2-3 letter prefix is taken for a language unless
# it is one of enwiki's short non-language prefixes; a leading colon ([[:de:Foo]], [[:File:X]]) makes any of
# these an ordinary link.
_LANGUAGE_PREFIX = re.compile(r"(?:[a-z]{2,3}(?:-[a-z]{1,12})*|simple)$")  # de, zh-min-nan, be-x-old
_NOT_LANGUAGES = frozenset({"wp", "mw", "voy", "wmf", "mos", "doi", "rfc", "iso"})

# HTML tags dropped with their content: tables and lists (the paper kept only text passages), headings,
# and the extension tags again in case a template cut unbalanced them. All other tags (b, i, u, s, span,
# sup, sub, small, big, code, abbr, font, em, strong, cite, q, poem, blockquote, div, center, p, ...) keep
# their inner text.
_DROPPED_TAGS = frozenset({"table", "tr", "td", "th", "caption", "thead", "tbody", "tfoot", "ul", "ol", "li",
                           "dl", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6", "hr", *_DROPPED_EXTENSION_TAGS})
# Tags that stand as blocks of their own in rendered HTML: they end the paragraph before them.
_BLOCK_TAGS = frozenset({"table", "ul", "ol", "dl", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "p", "div",
                         "blockquote", "center", "poem", "pre", "gallery", "references", "syntaxhighlight"})
_LIST_MARK = "\x00"    # written by the walk where a list item starts; its whole line is dropped afterwards
_PARAGRAPH_BREAK = "\n\n"
_BLOCK_MARK = "\x02"   # a line of its own where the walk dropped a heading or a table: no list's lead-in before it
_BLOCK_BREAK = f"{_PARAGRAPH_BREAK}{_BLOCK_MARK}{_PARAGRAPH_BREAK}"

_STYLE_QUOTES = re.compile(r"'{2,}")  # ''italic'' and '''bold''' marks (parsed with skip_style_tags)
_INVISIBLE = re.compile("[\u00ad\u200b\u2060\ufeff]")  # soft hyphen, zero-width space, word joiner, BOM
# Line starts of table rows the parser did not take for a table (not a bare "!": "!!!" is a band's name).
_TABLE_RESIDUE = ("{|", "|", "! ")
_HEADING_LINE = re.compile(r"=+[^=].*=+$")
_WORD = re.compile(r"\w")
_PARENTHETICAL = re.compile(r"\s*\([^()]*\)\s*$")
_EDGE_HOLES = re.compile(r"^[\s\x01]+|[\s\x01]+$")
_SEAM = re.compile(r"\s*\x01[\s\x01]*")   # one or more dropped templates and the spaces around them
# Each needs a seam (" \x01 " or "\x01" once _tidy has made every seam one of these) where it acts.
_SEPARATOR_OR_HOLE = r"(?: ?(?:[,;:]|\x01))"
_TIDYING = [
    (re.compile(rf" ?\((?: ?[,;:])* ?\x01{_SEPARATOR_OR_HOLE}* ?\)"), ""),   # a bracket left empty
    (re.compile(rf"\( ?\x01{_SEPARATOR_OR_HOLE}* ?"), "("),                    # a bracket opening with separators
    (re.compile(rf"{_SEPARATOR_OR_HOLE}* ?\x01 ?\)"), ")"),                    # ... or closing with them
    (re.compile(r"[,;:](?: ?\x01 ?[,;:])+"), lambda m: m.group()[-1]),         # doubled separators: the last
    (re.compile(r"^ ?\x01 ?[,;:] ?"), ""),                                     # a paragraph opening with one
    (re.compile(r" ?\x01 ?(?=[,;:.!?)\]])"), ""),                              # a space before punctuation
]
_SPACES = re.compile(r"\s+")
# A list's lead-in (dropped with the list): the sample's run to 11 words ("The following events are closely
# associated with the annual Academy Awards:"); a longer line, or one holding a sentence end, is prose and stays.
_LEAD_IN_WORDS = 15
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s+[A-Z]")


def clean_wikitext(text: str, site: Site = ENGLISH) -> list[str]:
    """Wikitext -> paragraphs of prose, each one line of single-spaced text.

    Kept: running text; the display text of wikilinks ([[A|b]] -> b, [[A]] -> A, [[A]]s -> As) and of
    bracketed external links ([http://x label] -> label); bold and italic text without its quote marks; the
    inner text of HTML tags not listed below, and <nowiki> content as plain text; HTML entities decoded
    (&amp; -> &), with &nbsp; and every other Unicode space turned into a plain space.
    Dropped: section headings with their title; list items (lines starting with * # ; :) and HTML lists; a
    list's lead-in line ("Side one:") with its list;
    wiki and HTML tables with everything in them; every template and parser function ({{...}}); <ref>s and
    the other extension tags listed in _DROPPED_EXTENSION_TAGS (math, gallery, code, timelines, ...);
    File/Image/Media links with their captions and category links, by the site's names for them (`Site`,
    sites.py: English Wikipedia's by default); interlanguage links; bare URLs and [url] links
    with no label; HTML comments; behaviour switches (__TOC__ ...); <br> becomes a space.
    Paragraphs are blocks of lines between blank lines; headings, lists and block-level tags (tables, <div>,
    <blockquote>, <p>, ...) also end a paragraph. A paragraph with no letter or digit left is dropped.
    """
    text = _pre_strip(text, site.language)
    out: list[str] = []
    _render(mwparserfromhell.parse(text, skip_style_tags=True), out, site.link_prefixes)
    return _paragraphs("".join(out))


def _pre_strip(text: str, language: str) -> str:
    """Cuts comments, extension tags and templates with regexes and a brace matcher (see above)."""
    text = text.replace(_LIST_MARK, "").replace(_HOLE, "").replace(_BLOCK_MARK, "")
    if "<!--" in text:
        text = _COMMENT.sub("", text)
    if "<" in text:
        if "nowiki" in text.lower():
            text = _NOWIKI.sub(lambda m: (m.group(1) or "").translate(_NOWIKI_TABLE), text)
        text = _EXTENSION_PAIR.sub(_block_or_inline, text)
        text = _EXTENSION_SINGLE.sub("", text)
    text = _expand_templates(text, language)
    if "__" in text:
        text = _MAGIC_WORDS.sub("", text)
    if "{|" in text:
        text = _INDENTED_TABLE.sub("", text)
    return text


def _block_or_inline(m: re.Match) -> str:
    # A dropped <gallery> between two lines of text must still separate them; a dropped <ref> must not.
    return _PARAGRAPH_BREAK if m.group(1).lower() in _BLOCK_TAGS else ""


def _expand_templates(text: str, language: str) -> str:
    """Renders the templates templates.py knows (nesting included) and replaces every other {{...}} by
    _HOLE; cuts every unpaired "{{" or "}}".

    MediaWiki shows an unpaired "{{" as text; here it goes, since it is residue either way. Pairs nest or
    are disjoint, so the outermost ones cover the rest; a rendered template's parameters are expanded first.
    """
    if "{{" not in text and "}}" not in text:
        return text
    opens: list[int] = []
    cuts: list[tuple[int, int]] = []   # outermost matched spans, and unpaired tokens, in order of end
    for m in _BRACES.finditer(text):
        if m.group() == "{{":
            opens.append(m.start())
        elif opens:
            start = opens.pop()
            while cuts and cuts[-1][0] >= start:   # spans nested in this one
                cuts.pop()
            cuts.append((start, m.end()))
        else:
            cuts.append((m.start(), m.end()))
    cuts.extend((start, start + 2) for start in opens)  # never closed: cut the two characters only
    # An unclosed "{{" is never inside a matched span (the stack would have matched it), so no cuts overlap.
    cuts.sort()
    pieces, pos = [], 0
    for start, end in cuts:
        pieces.append(text[pos:start])
        if end - start > 2:
            pieces.append(_expand_template(text[start + 2:end - 2], language))
        pos = end
    pieces.append(text[pos:])
    return "".join(pieces)


def _expand_template(body: str, language: str) -> str:
    """The text of one template ({{ and }} cut off): its rendering, or _HOLE."""
    head = _TEMPLATE_HEAD.match(body)
    name = templates.normal_name(head.group()) if head else ""
    if not name or not templates.is_rendered(name, language):
        return _HOLE
    pos: list[str] = []
    named: dict[str, str] = {}
    for param in _template_params(body[head.end() + 1:]) if head.end() < len(body) else ():
        key, equals, value = param.partition("=")
        if equals and "{{" not in key and "[[" not in key:
            named[key.strip()] = _expand_templates(value, language).strip()
        else:
            pos.append(_expand_templates(param, language))
    for key in [k for k in named if k.isdigit()]:   # {{x|2=b|a}}: a positional parameter given by number
        i = int(key) - 1
        pos.extend([""] * (i + 1 - len(pos)))
        pos[i] = named.pop(key)
    rendered = templates.render(name, pos, named, language)
    return _HOLE if rendered is None else rendered


def _template_params(text: str) -> list[str]:
    """Splits a template's parameters at the pipes that are not inside a nested {{...}} or [[...]]."""
    params, depth, start = [], 0, 0
    for m in _PARAM_TOKENS.finditer(text):
        token = m.group()
        if token == "|":
            if depth == 0:
                params.append(text[start:m.start()])
                start = m.end()
        else:
            depth = depth + 1 if token in ("{{", "[[") else max(depth - 1, 0)
    params.append(text[start:])
    return params


def _render(code, out: list[str], no_text: frozenset[str]) -> None:
    """Appends the visible prose of a parsed Wikicode to `out` (one walk, no strip_code). `no_text`: the
    lower-cased namespace names whose links show nothing (files, media, categories)."""
    for node in code.nodes:
        kind = type(node)
        if kind is Text:
            out.append(node.value)
        elif kind is Wikilink:
            _render_wikilink(node, out, no_text)
        elif kind is Tag:
            _render_tag(node, out, no_text)
        elif kind is HTMLEntity:
            try:
                out.append(node.normalize())
            except ValueError:  # a code point chr() refuses
                pass
        elif kind is ExternalLink:
            if node.brackets and node.title is not None:
                _render(node.title, out, no_text)
        elif kind is Heading:
            out.append(_BLOCK_BREAK)
        # Template, Argument and Comment nodes (normally cut before parsing) carry no prose: dropped.


def _render_wikilink(node: Wikilink, out: list[str], no_text: frozenset[str]) -> None:
    title = str(node.title).strip()
    prefix, colon, _ = title.partition(":")
    if colon and prefix:  # no leading colon: a file, category or language prefix makes it no link
        prefix = prefix.strip().lower().replace("_", " ")
        if prefix in no_text or (_LANGUAGE_PREFIX.match(prefix) and prefix not in _NOT_LANGUAGES):
            return
    if node.text is not None:
        shown: list[str] = []
        _render(node.text, shown, no_text)
        if "".join(shown).strip():
            out.extend(shown)
            return
        # "[[Foo (bar)|]]", the pipe trick (normally expanded on save), shows "Foo"
        title = _PARENTHETICAL.sub("", title)
    if "&" in title:  # entities in a title show decoded
        _render(mwparserfromhell.parse(title.lstrip(":"), skip_style_tags=True), out, no_text)
    else:
        out.append(title.lstrip(":"))


def _render_tag(node: Tag, out: list[str], no_text: frozenset[str]) -> None:
    markup = node.wiki_markup
    if markup is not None:
        if markup in ("*", "#", ";", ":"):
            out.append(_LIST_MARK)
        elif markup == "{|":
            out.append(_BLOCK_BREAK)
        elif markup == "----":
            out.append(_PARAGRAPH_BREAK)
        elif node.contents is not None:  # ''/''' only when a caller parses with style tags
            _render(node.contents, out, no_text)
        return
    name = str(node.tag).strip().lower()
    if name == "br":
        out.append(" ")
    elif name in _DROPPED_TAGS:
        if name in _BLOCK_TAGS:
            out.append(_PARAGRAPH_BREAK)
    elif node.contents is not None and not node.self_closing:
        block = name in _BLOCK_TAGS
        if block:
            out.append(_PARAGRAPH_BREAK)
        _render(node.contents, out, no_text)
        if block:
            out.append(_PARAGRAPH_BREAK)


def _paragraphs(text: str) -> list[str]:
    """Rendered text -> paragraphs: drops list lines and table residue, and a list's lead-in with the list (a
    paragraph of one short line ending in ":", "Side one:", "Some of the proposed mechanisms are:", with only blank
    lines before the list); joins lines, collapses spaces."""
    text = _STYLE_QUOTES.sub("", text)
    text = _INVISIBLE.sub("", text)
    paragraphs, lines, lead_in = [], [], False   # lead_in: the last paragraph would introduce a list that came next
    for line in text.split("\n") + [""]:   # the final "" ends the last paragraph
        line = line.strip()
        bare = _EDGE_HOLES.sub("", line) if _HOLE in line else line   # what the line shows, for the checks
        if bare and not (bare[0] in (_LIST_MARK, _BLOCK_MARK) or bare.startswith(_TABLE_RESIDUE)
                         or _HEADING_LINE.match(bare)):
            lines.append(line)
            continue
        if lines:  # a blank line, a list item, a table row or a heading ends the paragraph
            paragraph = _SPACES.sub(" ", " ".join(lines).replace(_LIST_MARK, "")).strip()
            if _HOLE in paragraph:
                paragraph = _tidy(paragraph)
            lead_in = len(lines) == 1 and _is_lead_in(paragraph)
            if _WORD.search(paragraph):
                paragraphs.append(paragraph)
            else:
                lead_in = False
            lines = []
        if bare:   # a list item takes its lead-in along (not the page's first paragraph: "Mercury may refer to:",
            # all a disambiguation page kept on request holds); a table row or a heading leaves it
            if lead_in and bare[0] == _LIST_MARK and len(paragraphs) > 1:
                paragraphs.pop()
            lead_in = False
    return paragraphs


def _is_lead_in(paragraph: str) -> bool:
    """A line that only introduces what follows: ends in ":", one sentence of at most _LEAD_IN_WORDS words."""
    return (paragraph.endswith(":") and len(paragraph.split()) <= _LEAD_IN_WORDS
            and not _SENTENCE_END.search(paragraph))


def _tidy(paragraph: str) -> str:
    """Mends what dropped templates leave (each marked by _HOLE), and only there: "Alabama (\x01) is" ->
    "Alabama is", "(\x01; born" -> "(born", "born 1947, \x01)" -> "born 1947)", ", \x01;" -> ";",
    "thinking \x01." -> "thinking.", a paragraph opening "\x01, ...". Text without a seam is never touched, so
    neither a quoted title nor a French " :" changes."""
    paragraph = _SEAM.sub(lambda m: f" {_HOLE} " if m.group() != _HOLE * len(m.group()) else _HOLE, paragraph)
    for pattern, replacement in _TIDYING:
        paragraph = pattern.sub(replacement, paragraph)
    return _SPACES.sub(" ", paragraph.replace(_HOLE, "")).strip()
