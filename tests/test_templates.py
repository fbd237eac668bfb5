"""corpora/wikipedia/templates.py and units.py: each rendering against what English Wikipedia shows, table by
table; unknown templates and broken parameters give None (dropped), never an error."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corpora.wikipedia.templates import RENDERED, is_rendered, normal_name, render
from corpora.wikipedia.units import convert


@pytest.mark.parametrize("name, pos, named, shown", [
    # native-language names
    ("lang", ["fr", "peintre"], {}, "peintre"),
    ("lang", ["grc", "Νύμφη"], {"italic": "no"}, "Νύμφη"),
    ("rtl-lang", ["ar", "الكيمياء"], {}, "الكيمياء"),
    ("lang-ru", ["Москва"], {}, "Russian: Москва"),
    ("lang-ru", ["Москва", "Moskva"], {}, "Russian: Москва, romanized: Moskva"),
    ("lang-grc-gre", ["Ἀριστοτέλης"], {}, "Ancient Greek: Ἀριστοτέλης"),
    ("langx", ["de", "Haus", "", "house"], {}, "German: Haus, lit. 'house'"),
    ("langx", ["fr", "Paris"], {"label": "none"}, "Paris"),
    ("lang-xx", ["text"], {}, "text"),                                   # an unknown code: the text alone
    ("transl", ["ar", "ALA", "al-asmāʼ"], {}, "al-asmāʼ"),
    ("transl", ["ja", "''yari''"], {}, "''yari''"),
    ("nihongo", ["Tokyo Tower", "東京タワー", "Tōkyō tawā"], {}, "Tokyo Tower (東京タワー, Tōkyō tawā)"),
    ("nihongo", ["", "東京", "Tōkyō"], {}, "東京 (Tōkyō)"),
    ("nihongo", ["headquarters", "本部道場"], {}, "headquarters (本部道場)"),
    ("nihongo3", ["Tokyo", "東京", "Tōkyō"], {}, "Tōkyō (東京, Tokyo)"),
    # dates
    ("birth date", ["1809", "2", "12"], {}, "February 12, 1809"),
    ("birth date", ["1932", "4", "4"], {"df": "yes"}, "4 April 1932"),
    ("birth date and age", ["1947", "04", "01"], {"df": "y"}, "1 April 1947"),   # no age: it changes daily
    ("death date and age", ["1865", "4", "15", "1809", "2", "12"], {}, "April 15, 1865 (aged 56)"),
    ("death date and age", ["1955", "4", "18", "1879", "3", "14"], {"df": "yes"}, "18 April 1955 (aged 76)"),
    ("death date and age", ["1993", "2", "4", "1920", "5", "6"], {}, "February 4, 1993 (aged 72)"),
    ("start date", ["2010"], {}, "2010"),
    ("start date", ["2010", "5"], {}, "May 2010"),
    ("oldstyledate", ["February 2", "1905", "January 20"], {}, "February 2 [O.S. January 20] 1905"),
    ("as of", ["2009"], {}, "As of 2009"),
    ("as of", ["2010", "7", "5"], {}, "As of 5 July 2010"),
    ("as of", ["2010", "7", "5"], {"df": "US", "lc": "y"}, "as of July 5, 2010"),
    ("as of", ["2010"], {"since": "y"}, "Since 2010"),
    ("circa", ["3000"], {}, "c. 3000"),
    # numbers, formulas, symbols
    ("frac", ["2"], {}, "1⁄2"),
    ("frac", ["3", "2"], {}, "3⁄2"),
    ("frac", ["1", "1", "2"], {}, "1 1⁄2"),
    ("chem", ["Cs", "4", "O"], {}, "Cs4O"),
    ("e", ["-20"], {}, "×10⁻²⁰"),
    ("val", ["6.241"], {"e": "18"}, "6.241×10¹⁸"),
    ("val", ["1.00794", "(7)"], {}, "1.00794(7)"),
    ("val", ["0.001118000"], {"u": "grams"}, "0.001118000 grams"),
    ("val", ["1.2", "0.3"], {}, "1.2±0.3"),
    ("formatnum:1234567.5", [], {}, "1,234,567.5"),
    ("music", ["flat"], {}, "♭"),
    ("angbr", ["υι"], {}, "⟨υι⟩"),
    ("sic", ["teh"], {}, "teh [sic]"),
    ("sic", ["nu", "cular"], {}, "nucular [sic]"),
    ("sic", ["?", "teh"], {}, "teh [sic?]"),
    ("sic", ["teh"], {"hide": "y"}, "teh"),
    ("sic", [], {}, "[sic]"),
    ("uss", ["Hornet", "CV-12"], {}, "USS ''Hornet'' (CV-12)"),
    ("uss", ["Hornet", "CV-12", "6"], {}, "''Hornet'' (CV-12)"),
    ("ship", ["HMS", "Dreadnought", "1906", "3"], {}, "HMS ''Dreadnought''"),
    # text as given, punctuation, spaces
    ("nowrap", ["39° N"], {}, "39° N"),
    ("small", ["(40th)"], {}, "(40th)"),
    ("vanchor", ["13", "el13"], {}, "13"),
    ("abbr", ["UK", "United Kingdom"], {}, "UK"),
    ("'s", [], {}, "'s"),
    ("' \"", [], {}, "' \""),
    ("snd", [], {}, " – "),
    ("ndash", [], {}, "–"),
    ("mdashb", [], {}, "—"),
    ("nbsp", ["3"], {}, " "),
    ("convert", ["10", "km", "mi"], {}, "10 kilometres (6.2 mi)"),
    ("cvt", ["10", "km", "mi"], {}, "10 km (6.2 mi)"),
    # citations used as words, joined as Module:Footnotes joins them
    ("harvtxt", ["Artin", "1970"], {}, "Artin (1970)"),
    ("harvtxt", ["Smith", "Jones", "2001"], {}, "Smith & Jones (2001)"),
    ("harvtxt", ["Smith", "Jones", "Brown", "2001"], {"p": "25"}, "Smith, Jones & Brown (2001, p. 25)"),
    ("harvtxt", ["Smith", "Jones", "Brown", "Black", "2001"], {"pp": "25–26"}, "Smith et al. (2001, pp. 25–26)"),
    ("harvtxt", ["Smith", "2005"], {"loc": "chpt. 3"}, "Smith (2005, chpt. 3)"),
    ("harvtxt", ["Boolos", "Jeffrey", "1974, 1999"], {}, "Boolos & Jeffrey (1974, 1999)"),   # the last is the year
    ("harvard citation text", ["[[Emil Artin|Artin]]", "1970a"], {"ref": "none"}, "[[Emil Artin|Artin]] (1970a)"),
    ("harvcoltxt", ["D'Andrade", "1995"], {}, "D'Andrade (1995)"),
    ("harvcoltxt", ["Smith", "2006"], {"p": "25"}, "Smith (2006:25)"),
    ("harvcoltxt", ["Smith", "Jones", "2006"], {"pp": "25–27"}, "Smith & Jones (2006:25–27)"),
    ("harvs", ["txt"], {"last": "Moishezon", "year": "1966", "authorlink": "Boris Moishezon"}, "Moishezon (1966)"),
    ("harvs", [], {"txt": "yes", "last1": "Hardy", "last2": "Littlewood", "year": "1914"},
     "Hardy & Littlewood (1914)"),
    ("harvs", ["txt"], {"author1": "Serre", "year1": "1955", "year2": "1956"}, "Serre (1955, 1956)"),
])
def test_rendering(name, pos, named, shown):
    assert is_rendered(name)
    assert render(name, pos, named) == shown


@pytest.mark.parametrize("name, pos, named", [
    ("cite web", [], {"url": "http://x", "title": "T"}),    # citations, pronunciation, notes, blocks: dropped
    ("ipac-en", ["ˈ", "æ", "l"], {}),
    ("ipa-de", ["ˈaʁtʊʁ"], {}),
    ("respell", ["AL", "ə"], {}),
    ("sfn", ["Smith", "2000"], {"p": "3"}),
    ("citation needed", [], {"date": "May 2020"}),
    ("quote", ["A long quotation."], {}),
    ("infobox person", [], {"name": "X"}),
    ("birth date", ["1947", "13", "1"], {}),          # broken parameters: dropped
    ("birth date", ["1947", "2", "30"], {}),
    ("birth date", ["c. 1947"], {}),
    ("death date and age", ["1993", "2", "4"], {}),
    ("lang", ["fr"], {}),
    ("lang-ru", [], {}),
    ("transl", ["ar"], {}),
    ("as of", ["soon"], {}),
    ("frac", [], {}),
    ("e", ["x"], {}),
    ("val", ["abc"], {}),
    ("music", ["trumpet"], {}),
    ("formatnum:abc", [], {}),
    ("convert", ["ten", "km"], {}),
    ("nihongo", [], {}),
    ("uss", [], {}),
    ("harvnb", ["Smith", "2001"], {"p": "5"}),      # parenthetical citations: references, dropped with them
    ("harv", ["Smith", "2001"], {}),
    ("harvp", ["Smith", "2001"], {}),
    ("harvard citation no brackets", ["Smith", "2001"], {}),
    ("harvcol", ["Smith", "2001"], {"p": "5"}),
    ("harvcolnb", ["Smith", "2001"], {}),
    ("sfnp", ["Smith", "2001"], {}),
    ("harvs", [], {"last": "Moishezon", "year": "1966"}),   # harvs without txt is parenthetical
    ("harvs", ["nb"], {"last": "Moishezon", "year": "1966"}),
    ("harvtxt", ["Smith"], {}),                      # no year, or no author: dropped
    ("harvtxt", [], {"p": "5"}),
    ("harvs", ["txt"], {"last": "Moishezon"}),
    ("harvs", ["txt"], {"year": "1966"}),
])
def test_dropped(name, pos, named):
    assert render(name, pos, named) is None


def test_normal_name():
    assert normal_name("Template:Birth_date  and age") == "birth date and age"
    assert normal_name(" Convert\n") == "convert"
    assert normal_name("IPAc-en") == "ipac-en" and not is_rendered("ipac-en")


@pytest.mark.parametrize("pos, named, shown", [
    (["10", "km", "mi"], {}, "10 kilometres (6.2 mi)"),
    (["100", "km", "mi"], {}, "100 kilometres (62 mi)"),
    (["1", "km"], {}, "1 kilometre (0.62 mi)"),                   # singular, and the unit's default output
    (["5", "ft", "m"], {"abbr": "on"}, "5 ft (1.5 m)"),
    (["1000", "ft", "m"], {}, "1,000 feet (300 m)"),             # thousands separated; rounded to tens
    (["2942", "m", "ft", "0"], {}, "2,942 metres (9,652 ft)"),   # a precision after the units
    (["500", "mi", "km", "-1"], {}, "500 miles (800 km)"),
    (["24", "°C", "0"], {"abbr": "on"}, "24 °C (75 °F)"),       # a precision where the output unit would be
    (["20", "C"], {}, "20 °C (68 °F)"),                          # temperatures: symbols unless abbr=off
    (["112", "°F"], {}, "112 °F (44 °C)"),
    (["-19", "to", "22", "C", "F"], {"sigfig": "2"}, "−19 to 22 °C (−2.2 to 72 °F)"),
    (["10", "to", "20", "km"], {}, "10 to 20 kilometres (6.2 to 12.4 mi)"),
    (["8", "-", "12", "km", "mi"], {}, "8–12 kilometres (5.0–7.5 mi)"),
    (["70.0", "by", "71.3", "mi", "km"], {}, "70.0 by 71.3 miles (112.7 by 114.7 km)"),
    (["4000", "m", "fathom ft"], {}, "4,000 metres (2,200 fathoms; 13,000 ft)"),
    (["188320", "sqmi", "km2", "0"], {}, "188,320 square miles (487,747 km²)"),
    (["52419", "sqmi", "km2"], {"abbr": "out", "sp": "us"}, "52,419 square miles (135,765 km²)"),
    (["100000", "m3", "0"], {"abbr": "off"}, "100,000 cubic metres (3,531,467 cubic feet)"),
    (["10", "km"], {"sp": "us", "abbr": "off"}, "10 kilometers (6.2 miles)"),
    (["12392", "lb", "kg"], {"order": "flip"}, "5,621 kilograms (12,392 lb)"),
    (["5", "mi", "km", "0"], {"adj": "on"}, "5-mile (8 km)"),
    (["10", "km"], {"disp": "or"}, "10 kilometres or 6.2 mi"),
    (["10", "km"], {"disp": "out"}, "6.2 mi"),
    (["1", "Moilbbl"], {}, "1 million barrels (160,000 m³)"),
    (["230", " acre", "ha"], {}, "230 acres (93 ha)"),
    (["3990", "ft/s", "m/s"], {"abbr": "on"}, "3,990 ft/s (1,216 m/s)"),
])
def test_convert(pos, named, shown):
    assert convert(pos, named) == shown


@pytest.mark.parametrize("pos, named", [
    (["x", "km"], {}), ([], {}), (["10"], {}), (["10", "km", "kg"], {}), (["10", "furlong"], {}),
    (["10", "km"], {"disp": "table"}), (["1e400", "km"], {}), (["10", "to", "km"], {}),
])
def test_convert_dropped(pos, named):
    assert convert(pos, named) is None


_WORDS = st.sampled_from(["", " ", "1", "0", "-3", "1e400", "2.5", "x", "km", "C", "to", "df=y", "|", "13", "31",
                          "ﾠ", "٣", "10000000000000", "(7)", "?", "Москва", "''a''", "[[a|b]]"])


@given(st.sampled_from(sorted(RENDERED) + ["lang-ru", "lang-", "formatnum:", "formatnum:1e9"]),
       st.lists(_WORDS, max_size=7), st.dictionaries(st.sampled_from(["df", "e", "u", "abbr", "disp", "sigfig",
                                                                      "lit", "label", "hide", "order", "adj", "1",
                                                                      "p", "pp", "loc", "last", "year", "txt"]),
                                                     _WORDS, max_size=3))
@settings(max_examples=1500, deadline=None)
def test_no_parameters_make_a_rendering_raise(name, pos, named):
    shown = render(name, pos, named)
    assert shown is None or isinstance(shown, str)


def test_other_wikis_get_only_templates_without_english_words():
    assert render("lang", ["en", "Moscow"], {}, "ru") == "Moscow"
    assert render("nowrap", ["sehr alt"], {}, "de") == "sehr alt"
    for name, pos in [("convert", ["10", "km"]), ("lang-en", ["Moscow"]), ("as of", ["2010"]),
                      ("birth date", ["1947", "2", "1"]), ("formatnum:3700000", [])]:
        assert render(name, pos, {}, "en") is not None
        assert render(name, pos, {}, "de") is None and not is_rendered(name, "de")
