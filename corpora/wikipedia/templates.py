"""Inline templates that carry prose, rendered as English Wikipedia shows them; every other template is dropped.

    render("lang-ru", ["Москва", "Moskva"], {})     -> "Russian: Москва, romanized: Moskva"
    render("convert", ["10", "km"], {})             -> "10 kilometres (6.2 mi)"
    render("birth date", ["1947", "2", "1"], {})    -> "February 1, 1947"
    render("cite web", [...], {...})                -> None (dropped)

`render(name, pos, named, language)` takes a template's normalised name (`normal_name`), its parameters, each
already expanded, and the wiki's language, and returns wikitext (links and italics are left for the caller's
parser) or None: the template is not one of RENDERED (NEUTRAL on a wiki not in English, see there), or its
parameters are not what its rendering needs. None means "drop it", never an error: a template with broken
parameters is dropped, as every template was before. Each rendering is a small pure function.

Which templates: those that stand inside the sentences of articles and show prose, by how often they do so in
the shared enwiki sample (`bench/bench_wikipedia.py --templates` counts them: templates on a line of running
text, outside <ref>s, in the 98 articles that are no redirect or disambiguation page):

    convert 350, lang 194, lang-xx 36, transl 43, as of 29, chem 22, nowrap 21, nihongo 15, vanchor 10,
    angbr 8, 's 8, vr 7, sc 6, nbsp 6, val 6, snd/mdashb 7, e 3, ' and ' " 4, music 2, USS 2, circa 1,
    small 1, oldstyledate 1; the date templates (birth date, death date and age ...: 18 uses, all in infoboxes
    here, in lead sentences on most biographies) and frac, abbr, sic, nobr, cvt (not inside running text here;
    named in the issue); harvtxt 1, with harvcoltxt and harvs|txt: citations used as words
    ("{{harvtxt|Artin|1970}} showed" -> "Artin (1970) showed", issue 38).

Dropped on purpose, though as frequent: citation needed 115, rp 102, sfn/sfnp 185 and the parenthetical Harvard
citations (harvnb, harv, harvp: in <ref>s here), refn 20, efn, clarify and the other inline cleanup tags (notes,
no prose); IPAc-en 85, respell 56, IPA and IPA-xx 23 (pronunciation);
main, see also, quote (blocks); coord (coordinates); inflation and currentyear (a value that changes with the
day the page is shown, as does the age of "birth date and age", which is left out of its rendering).
"""
from __future__ import annotations

import calendar
import re
from typing import Callable

from corpora.wikipedia.units import convert

Renderer = Callable[[list[str], dict[str, str]], "str | None"]

# ISO 639 codes of the lang-xx / langx templates -> the label they show ("Russian: Москва").
LANGUAGES = dict(line.split(" ", 1) for line in """\
af Afrikaans
am Amharic
an Aragonese
ang Old English
ar Arabic
arc Aramaic
arz Egyptian Arabic
as Assamese
ast Asturian
az Azerbaijani
ba Bashkir
be Belarusian
ber Berber
bg Bulgarian
bn Bengali
bo Tibetan
br Breton
bs Bosnian
ca Catalan
ce Chechen
chr Cherokee
ckb Central Kurdish
co Corsican
cs Czech
cu Church Slavonic
cy Welsh
da Danish
de German
dv Maldivian
el Greek
en English
enm Middle English
eo Esperanto
es Spanish
et Estonian
eu Basque
fa Persian
fi Finnish
fil Filipino
fo Faroese
fr French
fro Old French
fy West Frisian
ga Irish
gd Scottish Gaelic
gl Galician
gn Guarani
gmh Middle High German
goh Old High German
got Gothic
grc Ancient Greek
grc-gre Ancient Greek
gsw Swiss German
gu Gujarati
gv Manx
ha Hausa
haw Hawaiian
he Hebrew
hi Hindi
hr Croatian
ht Haitian Creole
hu Hungarian
hy Armenian
id Indonesian
ig Igbo
is Icelandic
it Italian
iu Inuktitut
ja Japanese
jv Javanese
ka Georgian
kk Kazakh
km Khmer
kn Kannada
ko Korean
ku Kurdish
kw Cornish
ky Kyrgyz
la Latin
lb Luxembourgish
ln Lingala
lo Lao
lt Lithuanian
lv Latvian
mg Malagasy
mi Māori
mk Macedonian
ml Malayalam
mn Mongolian
mr Marathi
ms Malay
mt Maltese
my Burmese
nah Nahuatl
nds Low German
ne Nepali
nl Dutch
nn Norwegian Nynorsk
no Norwegian
nb Norwegian Bokmål
non Old Norse
oc Occitan
or Odia
os Ossetian
ota Ottoman Turkish
pa Punjabi
peo Old Persian
pi Pali
pl Polish
ps Pashto
pt Portuguese
qu Quechua
rm Romansh
ro Romanian
ru Russian
sa Sanskrit
sc Sardinian
scn Sicilian
sco Scots
sd Sindhi
se Northern Sami
sh Serbo-Croatian
si Sinhala
sk Slovak
sl Slovene
sm Samoan
sn Shona
so Somali
sq Albanian
sr Serbian
su Sundanese
sv Swedish
sw Swahili
syc Classical Syriac
syr Syriac
ta Tamil
te Telugu
tg Tajik
th Thai
ti Tigrinya
tk Turkmen
tl Tagalog
tr Turkish
tt Tatar
ug Uyghur
uk Ukrainian
ur Urdu
uz Uzbek
vi Vietnamese
wa Walloon
yi Yiddish
yo Yoruba
yue Cantonese
zh Chinese
zu Zulu""".splitlines())

_MINUS = "−"
_SUPERSCRIPT = str.maketrans("0123456789-−+", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁻⁺")
_MONTHS = ("", "January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")


def normal_name(name: str) -> str:
    """How a template name is looked up: "Template:Birth_date  and age" -> "birth date and age"."""
    name = name.strip().lower()
    if "_" in name or "  " in name or "\n" in name or "\t" in name:   # rare: spared the common case
        name = " ".join(name.replace("_", " ").split())
    return name[len("template:"):].lstrip() if name.startswith("template:") else name


def is_rendered(name: str, language: str = "en") -> bool:
    """Whether `render` may show something for the template `name` (a normal_name) on a wiki in `language`."""
    if language != "en":
        return name in NEUTRAL
    return name in RENDERED or name.startswith(("lang-", "formatnum:"))


def render(name: str, pos: list[str], named: dict[str, str], language: str = "en") -> str | None:
    """The wikitext template `name` shows with these parameters on a wiki in `language`, or None to drop it
    (see the module doc)."""
    if not is_rendered(name, language):
        return None
    renderer = RENDERED.get(name)
    if renderer is None and name.startswith("lang-"):   # {{lang-ru|...}} is {{langx|ru|...}}
        renderer, pos = _lang_x, [name[len("lang-"):]] + pos
    if renderer is None:
        return _formatnum(name)
    try:
        return renderer(pos, named)
    except (ValueError, IndexError, KeyError, ArithmeticError):
        return None   # parameters the rendering cannot use: dropped, as an unknown template is


def _arg(pos: list[str], i: int) -> str:
    """Positional parameter i (0-based), stripped; "" when absent."""
    return pos[i].strip() if i < len(pos) else ""


def _first(pos: list[str], named: dict[str, str]) -> str | None:
    """Templates that show their first parameter as it is (nowrap, small, vanchor ...)."""
    return pos[0] if pos else None


def _constant(text: str) -> Renderer:
    return lambda pos, named: text


# --- native-language names ---------------------------------------------------------------------------------

def _lang(pos: list[str], named: dict[str, str]) -> str | None:
    """{{lang|fr|texte}} -> texte"""
    return pos[1].strip() or None if len(pos) > 1 else None


def _lang_x(pos: list[str], named: dict[str, str]) -> str | None:
    """{{langx|ru|Москва|Moskva|lit=...}} and {{lang-ru|...}} -> "Russian: Москва, romanized: Moskva"."""
    code, text = _arg(pos, 0).lower(), _arg(pos, 1)
    if not text:
        return None
    label = LANGUAGES.get(code) or LANGUAGES.get(code.split("-")[0])
    shown = text if named.get("label", "").strip() == "none" or not label else f"{label}: {text}"
    translit = _arg(pos, 2) or named.get("translit", "").strip()
    if translit:
        shown += f", romanized: {translit}"
    meaning = _arg(pos, 3) or named.get("lit", "").strip()
    if meaning:
        shown += f", lit. '{meaning}'"
    return shown


def _transl(pos: list[str], named: dict[str, str]) -> str | None:
    """{{transl|ar|DIN|text}} and {{transl|ja|text}} -> text (the last parameter)."""
    return _arg(pos, len(pos) - 1) or None if len(pos) >= 2 else None


def _nihongo(pos: list[str], named: dict[str, str]) -> str | None:
    """{{nihongo|Tokyo Tower|東京タワー|Tōkyō tawā}} -> "Tokyo Tower (東京タワー, Tōkyō tawā)"."""
    english, kanji, romaji, extra, extra2 = (_arg(pos, i) for i in range(5))
    inside = ", ".join(x for x in ((kanji, romaji, extra) if english else (romaji, extra)) if x)
    head = english or kanji
    if not head:
        return None
    shown = f"{head} ({inside})" if inside else head
    return f"{shown} {extra2}" if extra2 else shown


def _nihongo3(pos: list[str], named: dict[str, str]) -> str | None:
    """{{nihongo3|English|漢字|rōmaji}} -> "rōmaji (漢字, English)"."""
    english, kanji, romaji = (_arg(pos, i) for i in range(3))
    inside = ", ".join(x for x in (kanji, english) if x)
    return (f"{romaji} ({inside})" if inside else romaji) if romaji else None


# --- dates -------------------------------------------------------------------------------------------------

def _date(year: str, month: str = "", day: str = "", day_first: bool = False) -> str | None:
    """"1947", "February 1947", "February 1, 1947" or "1 February 1947"; None for no real date."""
    y = int(year)
    if not month:
        return str(y)
    m = int(month)
    if not 1 <= m <= 12:
        return None
    if not day:
        return f"{_MONTHS[m]} {y}"
    d = int(day)
    if not 1 <= d <= calendar.monthrange(y if y > 0 else 2000, m)[1]:
        return None
    return f"{d} {_MONTHS[m]} {y}" if day_first else f"{_MONTHS[m]} {d}, {y}"


def _day_first(named: dict[str, str]) -> bool:
    return named.get("df", "").strip().lower() in ("y", "yes", "on", "true", "1")


def _dated(pos: list[str], named: dict[str, str]) -> str | None:
    """{{birth date|1947|2|1}}, {{start date|2010|5}} ... -> "February 1, 1947", "May 2010" (df=y: day first).
    The age of {{birth date and age}} is left out: it is not the same on any two days the page is shown."""
    values = [p.strip() for p in pos if p.strip()]
    return _date(*values[:3], day_first=_day_first(named)) if values else None


def _death_date_and_age(pos: list[str], named: dict[str, str]) -> str | None:
    """{{death date and age|1993|2|4|1920|5|6}} -> "February 4, 1993 (aged 72)"."""
    dy, dm, dd, by, bm, bd = (int(_arg(pos, i)) for i in range(6))
    died = _date(str(dy), str(dm), str(dd), _day_first(named))
    if died is None or _date(str(by), str(bm), str(bd)) is None:
        return None
    age = dy - by - ((dm, dd) < (bm, bd))
    return f"{died} (aged {age})" if age >= 0 else None


def _old_style_date(pos: list[str], named: dict[str, str]) -> str | None:
    """{{OldStyleDate|February 2|1905|January 20}} -> "February 2 [O.S. January 20] 1905"."""
    day, year, old = _arg(pos, 0), _arg(pos, 1), _arg(pos, 2)
    return f"{day} [O.S. {old}] {year}" if day and year and old else None


def _as_of(pos: list[str], named: dict[str, str]) -> str | None:
    """{{as of|2010|5|12}} -> "As of 12 May 2010" (lc=y: "as of"; since=y: "Since"; alt=...: that text)."""
    if named.get("alt", "").strip():
        return named["alt"].strip()
    values = [p.strip() for p in pos if p.strip()]
    date = _date(*values[:3], day_first=named.get("df", "").strip().upper() != "US") if values else None
    if date is None:
        return None
    words = "Since" if named.get("since", "").strip() else "As of"
    if named.get("lc", "").strip():
        words = words.lower()
    return date if named.get("bare", "").strip() else f"{words} {date}"


def _circa(pos: list[str], named: dict[str, str]) -> str:
    """{{circa|1500}} -> "c. 1500"."""
    return f"c. {_arg(pos, 0)}".rstrip()


# --- numbers, formulas, symbols ----------------------------------------------------------------------------

def _convert(pos: list[str], named: dict[str, str]) -> str | None:
    return convert(pos, named)


def _cvt(pos: list[str], named: dict[str, str]) -> str | None:
    """{{cvt}} is {{convert}} with abbr=on."""
    return convert(pos, {"abbr": "on", **named})


def _frac(pos: list[str], named: dict[str, str]) -> str | None:
    """{{frac|2}} -> "1⁄2", {{frac|3|4}} -> "3⁄4", {{frac|1|1|2}} -> "1 1⁄2"."""
    args = [_arg(pos, i) for i in range(len(pos))]
    if len(args) == 1:
        return f"1⁄{args[0]}" if args[0] else None
    if len(args) == 2:
        return f"{args[0]}⁄{args[1]}"
    return f"{args[0]} {args[1]}⁄{args[2]}" if len(args) == 3 else None


def _chem(pos: list[str], named: dict[str, str]) -> str | None:
    """{{chem|H|2|O}} -> "H2O"."""
    return "".join(p.strip() for p in pos) or None


def _times_ten(exponent: str) -> str:
    return f"×10{exponent.strip().replace('-', _MINUS).translate(_SUPERSCRIPT)}"


def _e(pos: list[str], named: dict[str, str]) -> str | None:
    """{{e|9}} -> "×10⁹"."""
    exponent = _arg(pos, 0)
    return _times_ten(exponent) if re.fullmatch(r"[-−+]?\d+", exponent) else None


def _val(pos: list[str], named: dict[str, str]) -> str | None:
    """{{val|1.2|0.3|e=5|u=m}} -> "1.2±0.3×10⁵ m"; {{val|1.00794|(7)}} -> "1.00794(7)"."""
    number = _arg(pos, 0)
    if not re.fullmatch(r"[-−+]?[\d,]*\.?\d+(?:e[-+]?\d+)?", number, re.I):
        return None
    shown = named.get("p", "") + number.replace("-", _MINUS)
    first, second = _arg(pos, 1), _arg(pos, 2)
    if first.startswith("("):
        shown += first
    elif first and second:
        shown += f"+{first.lstrip('+')}{_MINUS}{second.lstrip('-−')}"
    elif first:
        shown += f"±{first}"
    exponent = named.get("e", "").strip()
    if exponent:
        shown += _times_ten(exponent)
    unit = (named.get("u") or named.get("ul") or "").strip()
    per = (named.get("up") or named.get("upl") or "").strip()
    return shown + (f" {unit}" if unit else "") + (f"/{per}" if per else "") + named.get("s", "")


def _formatnum(name: str) -> str | None:
    """{{formatnum:1234567.5}} -> "1,234,567.5" (the name holds the argument)."""
    number = name[len("formatnum:"):].strip()
    integer, dot, decimals = number.partition(".")
    if not integer.lstrip("-").isdigit():
        return None
    return f"{int(integer):,}".replace("-", _MINUS) + dot + decimals


_MUSIC = {"flat": "♭", "b": "♭", "sharp": "♯", "#": "♯", "natural": "♮", "n": "♮", "doubleflat": "𝄫",
          "doublesharp": "𝄪"}


def _music(pos: list[str], named: dict[str, str]) -> str | None:
    """{{music|flat}} -> "♭"."""
    return _MUSIC.get(_arg(pos, 0).lower())


def _angbr(pos: list[str], named: dict[str, str]) -> str | None:
    """{{angbr|a}} -> "⟨a⟩"."""
    return f"⟨{pos[0]}⟩" if pos else None


def _sic(pos: list[str], named: dict[str, str]) -> str:
    """{{sic|teh}} -> "teh [sic]", {{sic|nu|cular}} -> "nucular [sic]", {{sic|?|teh}} -> "teh [sic?]";
    hide=y shows the text alone; {{sic}} -> "[sic]"."""
    doubt = _arg(pos, 0) == "?"
    text = "".join(p.strip() for p in pos[1:3] if doubt) or "".join(p.strip() for p in pos[:2] if not doubt)
    if named.get("hide", "").strip():
        return text
    mark = "[sic?]" if doubt else "[sic]"
    return f"{text} {mark}" if text else mark


def _ship(pos: list[str], named: dict[str, str], prefix: str = "") -> str | None:
    """{{USS|Hornet|CV-12}} -> "USS Hornet (CV-12)"; the format (1 prefix, 2 name, 4 id, added) picks parts."""
    if not prefix:
        prefix, pos = _arg(pos, 0), pos[1:]
    name, hull, shown = _arg(pos, 0), _arg(pos, 1), _arg(pos, 2)
    if not name:
        return None
    parts = int(shown) if shown.isdigit() else 7
    words = [w for bit, w in ((1, prefix), (2, f"''{name}''")) if parts & bit and w]
    if parts & 4 and hull:
        words.append(f"({hull})" if words else hull)
    return " ".join(words) or None


def _ship_with(prefix: str) -> Renderer:
    return lambda pos, named: _ship(pos, named, prefix)


# --- citations used as words -------------------------------------------------------------------------------
# The Harvard "text" forms stand in the sentence as its subject ("{{harvtxt|Artin|1970}} showed that"), and
# Wikipedia's Module:Footnotes shows them "Artin (1970)"; the parenthetical forms (harv, harvnb, harvp, sfn,
# harvcol, harvs without txt) are references, dropped with the others. Authors are joined as the module joins
# them: "A & B", "A, B & C", four or more "A et al.".

def _authors(names: list[str]) -> str | None:
    """["A"] -> "A", ["A", "B"] -> "A & B", ["A", "B", "C"] -> "A, B & C", four or more -> "A et al."."""
    if not names:
        return None
    if len(names) >= 4:
        return f"{names[0]} et al."
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} & {names[-1]}"


def _cited(names: list[str], year: str, named: dict[str, str], colon: bool) -> str | None:
    """"Artin (1970, p. 5)"; `colon` (harvcoltxt): "Artin (1970:5)". loc= follows the pages after a comma."""
    authors = _authors(names)
    if authors is None or not year:
        return None
    page = (named.get("p") or named.get("page") or "").strip()
    pages = (named.get("pp") or named.get("pages") or "").strip()
    loc = (named.get("loc") or named.get("at") or "").strip()
    inside = year
    if page or pages:
        inside += f":{page or pages}" if colon else f", p. {page}" if page else f", pp. {pages}"
    if loc:
        inside += f", {loc}"
    return f"{authors} ({inside})"


def _harvtxt(pos: list[str], named: dict[str, str], colon: bool = False) -> str | None:
    """{{harvtxt|Smith|Jones|2001|p=5}} -> "Smith & Jones (2001, p. 5)": up to four authors, then the year
    (the last parameter given, "1974, 1999" included)."""
    values = [p.strip() for p in pos if p.strip()]
    return _cited(values[:-1], values[-1], named, colon) if len(values) >= 2 else None


def _harvs(pos: list[str], named: dict[str, str]) -> str | None:
    """{{harvs|txt|last=Moishezon|year=1966}} -> "Moishezon (1966)"; named authors (last, last1..4, author1..4)
    and years (year, year1..3: "Smith (2001, 2002)"). Without txt (or txt=yes) it is parenthetical: None."""
    if "txt" not in (p.strip().lower() for p in pos) and not named.get("txt", "").strip():
        return None
    names = []
    for i in range(1, 5):
        keys = (f"last{i}", f"author{i}", f"surname{i}") + (("last", "author", "surname") if i == 1 else ())
        name = next((named[k].strip() for k in keys if named.get(k, "").strip()), "")
        if not name:
            break
        names.append(name)
    years = [named[k].strip() for k in ("year", "year1", "year2", "year3") if named.get(k, "").strip()]
    return _cited(names, ", ".join(years), named, colon=False)


RENDERED: dict[str, Renderer] = {
    # text shown as given
    **dict.fromkeys(["nowrap", "nobr", "small", "smaller", "big", "larger", "nobold", "noitalic", "vanchor",
                     "vr", "sc", "smallcaps", "sc1", "sc2", "sup", "sub", "abbr", "abbrlink", "math", "mvar",
                     "var", "chem2", "serif", "resize", "nowrap begin", "lang-rtl", "keypress"], _first),
    "lang": _lang, "rtl-lang": _lang, "langx": _lang_x, "transl": _transl, "transliteration": _transl,
    "nihongo": _nihongo, "nihongo2": _first, "nihongo3": _nihongo3, "nihongo4": _nihongo,
    # dates
    **dict.fromkeys(["birth date", "dob", "birth date and age", "bda", "birth year and age", "start date",
                     "end date", "start date and age", "death date", "film date", "release date"], _dated),
    "death date and age": _death_date_and_age, "oldstyledate": _old_style_date, "as of": _as_of,
    "circa": _circa,
    # numbers, units, formulas
    "convert": _convert, "cvt": _cvt, "frac": _frac, "sfrac": _frac, "chem": _chem, "e": _e, "val": _val,
    "music": _music, "angbr": _angbr, "sic": _sic,
    "ship": _ship, "uss": _ship_with("USS"), "hms": _ship_with("HMS"), "hmas": _ship_with("HMAS"),
    "hmcs": _ship_with("HMCS"), "ss": _ship_with("SS"), "rms": _ship_with("RMS"),
    # punctuation and spaces
    "'": _constant("'"), "'s": _constant("'s"), "' \"": _constant("' \""), "\" '": _constant("\" '"),
    "'\"": _constant("'\""), "\"'": _constant("\"'"), "snd": _constant(" – "), "spaced ndash": _constant(" – "),
    "snds": _constant(" – "), "ndash": _constant("–"), "mdash": _constant("—"), "mdashb": _constant("—"),
    "spaced mdash": _constant(" — "), "nbsp": _constant(" "), "thinsp": _constant(" "), "sp": _constant(" "),
    "·": _constant(" · "), "dot": _constant(" · "), "middot": _constant("·"), "bull": _constant(" • "),
    "=": _constant("="), "!": _constant("|"), "anchor": _constant(""),
    # citations used as words
    "harvtxt": _harvtxt, "harvard citation text": _harvtxt,
    "harvcoltxt": lambda pos, named: _harvtxt(pos, named, colon=True), "harvs": _harvs,
}

# What a wiki in another language may share with English Wikipedia: templates of the same name and meaning whose
# output holds no English word and no English number format (text as given, marks, formulas). The others are
# English Wikipedia's own: ruwiki's {{lang-en}} shows "англ.", dewiki's numbers read "3.700.000", and words such
# as "kilometres" or "As of" would be English in a German sentence; there they are dropped, as before.
NEUTRAL = frozenset({
    "nowrap", "nobr", "small", "smaller", "big", "larger", "nobold", "noitalic", "vanchor", "sup", "sub", "abbr",
    "math", "mvar", "var", "chem2", "lang", "rtl-lang", "transl", "chem", "e", "angbr", "music", "'", "'s", "' \"",
    "\" '", "'\"", "\"'", "ndash", "mdash", "nbsp", "thinsp", "=", "!", "anchor",
})
