"""What cleaning a page needs to know of its wiki: the names of the namespaces whose links are no text, and the
templates and title words that mark a disambiguation page. From the dump's own <siteinfo>, plus tables.

    site = site_from_siteinfo({-2: "Medium", 6: "Datei", 14: "Kategorie"}, "de")
    "datei" in site.link_prefixes and "bild" in site.link_prefixes and "file" in site.link_prefixes   # True

A dump's <siteinfo> lists one name per namespace in the wiki's language (Datei, Kategorie). Every wiki also
accepts the English canonical names (File, Image, Media, Category), and most accept older aliases that siteinfo
omits (Bild, Fichier, Archivo, Изображение, 画像 ...): LINK_PREFIX_ALIASES lists them for the largest wikis,
from MediaWiki's languages/messages/Messages<Lang>.php ($namespaceNames and $namespaceAliases). A language not in
the table gets its siteinfo names and the English ones; an export without siteinfo gets the English ones (and
the reader counts `no_siteinfo`).

Disambiguation pages are marked by a template, which sets the __DISAMBIG__ switch on the page it is used on, so
the switch itself is rarely in a page's wikitext: DISAMBIGUATION_TEMPLATES lists the English template, its
redirects and variants, and for the largest wikis their own (Begriffsklärung, Homonymie, Неоднозначность ...);
`--disambiguation-templates` adds names for any other wiki. DISAMBIGUATION_TITLES are the title qualifiers
("(disambiguation)", "(homonymie)") that mark one too.
"""
from __future__ import annotations

from dataclasses import dataclass

NS_MEDIA, NS_FILE, NS_CATEGORY = -2, 6, 14

# Per language: names of the File, Media and Category namespaces, aliases included, as written (compared
# lower-cased, "_" as " "). "en" holds the canonical names every wiki accepts.
LINK_PREFIX_ALIASES = {
    "en": "File Image Media Category",
    "ar": "ملف صورة ميديا تصنيف",
    "bg": "Файл Картинка Медия Категория",
    "ca": "Fitxer Imatge Multimèdia Categoria",
    "cs": "Soubor Obrázek Média Kategorie",
    "de": "Datei Bild Medium Kategorie",
    "es": "Archivo Imagen Medio Categoría",
    "fa": "پرونده تصویر رسانه رده",
    "fi": "Tiedosto Kuva Media Luokka",
    "fr": "Fichier Image Média Catégorie",
    "he": "קובץ תמונה מדיה קטגוריה",
    "hi": "चित्र मीडिया श्रेणी",
    "hu": "Fájl Kép Média Kategória",
    "id": "Berkas Gambar Media Kategori",
    "it": "File Immagine Media Categoria",
    "ja": "ファイル 画像 メディア カテゴリ",
    "ko": "파일 그림 미디어 분류",
    "nl": "Bestand Afbeelding Media Categorie",
    "no": "Fil Bilde Medium Kategori",
    "pl": "Plik Grafika Media Kategoria",
    "pt": "Ficheiro Arquivo Imagem Multimédia Categoria",
    "ro": "Fișier Fişier Imagine Media Categorie",
    "ru": "Файл Изображение Медиа Категория",
    "sv": "Fil Bild Media Kategori",
    "tr": "Dosya Resim Ortam Kategori",
    "uk": "Файл Зображення Медіа Категорія",
    "vi": "Tập_tin Hình Phương_tiện Thể_loại",
    "zh": "File 文件 檔案 档案 图像 圖像 Media 媒体 媒體 Category 分类 分類",
}

# Per language: the disambiguation templates (names as `templates.normal_name` gives them).
DISAMBIGUATION_TEMPLATES = {
    # Template:Disambiguation, its redirects and its specialised variants. Hatnotes that merely point to a
    # disambiguation page ({{about}}, {{redirect}}, {{other uses}}) and {{disambiguation needed}} are not here.
    "en": ["disambiguation", "disambig", "disamb", "dab", "dbig", "dis", "disambiguation page", "disambig-cleanup",
           "disambiguation cleanup", "dab cleanup", "hndis", "hndis-cleanup", "human name disambiguation",
           "human name disambiguation cleanup", "geodis", "place name disambiguation", "numberdis",
           "number disambiguation", "letter-numbercombdisambig", "letter-number combination disambiguation",
           "mil-unit-dis", "military unit disambiguation", "hospitaldis", "hospital disambiguation", "schooldis",
           "school disambiguation", "roaddis", "road disambiguation", "species latin name disambiguation",
           "genus disambiguation", "taxonomy disambiguation", "call sign disambiguation",
           "chinese title disambiguation", "church disambiguation", "caselaw disambiguation"],
    "ar": ["توضيح"],
    "bg": ["пояснение", "пояснителна страница"],
    "ca": ["desambiguació"],
    "cs": ["rozcestník"],
    "de": ["begriffsklärung"],
    "es": ["desambiguación", "desambiguacion", "des"],
    "fa": ["ابهام‌زدایی", "ابهامزدایی", "صفحه ابهام‌زدایی"],
    "fi": ["täsmennyssivu"],
    "fr": ["homonymie", "bandeau standard pour page d'homonymie", "homonymie de personnes", "patronymie",
           "toponymie"],
    "he": ["פירושונים"],
    "hi": ["बहुविकल्पी शब्द", "बहुविकल्पी"],
    "hu": ["egyért"],
    "id": ["disambiginfo"],
    "it": ["disambigua", "disambiguazione"],
    "ja": ["aimai", "曖昧さ回避", "人名の曖昧さ回避", "地名の曖昧さ回避"],
    "ko": ["동음이의", "동음이의어"],
    "nl": ["dp", "dpintro"],
    "no": ["peker", "pekerside"],
    "pl": ["ujednoznacznienie"],
    "pt": ["desambiguação", "desambig"],
    "ro": ["dezambiguizare"],
    "ru": ["неоднозначность", "многозначность", "значения"],
    "sv": ["förgrening", "gren"],
    "tr": ["anlam ayrımı", "anlam ayrımı sayfası"],
    "uk": ["неоднозначність", "багатозначність"],
    "vi": ["trang định hướng", "định hướng"],
    "zh": ["消歧义", "消歧義", "消歧义页", "消歧義頁"],
}

# Per language: title qualifiers of disambiguation pages, lower-cased.
DISAMBIGUATION_TITLES = {
    "en": "(disambiguation)", "bg": "(пояснение)", "ca": "(desambiguació)", "cs": "(rozcestník)",
    "de": "(begriffsklärung)", "es": "(desambiguación)", "fi": "(täsmennyssivu)", "fr": "(homonymie)",
    "it": "(disambigua)", "ja": "(曖昧さ回避)", "nl": "(doorverwijspagina)", "pl": "(ujednoznacznienie)",
    "pt": "(desambiguação)", "ru": "(значения)", "uk": "(значення)", "zh": "(消歧义)", "ar": "(توضيح)",
}

# Per language: the words of an old-style "#REDIRECT [[target]]" (exports before <redirect/> mark it only so).
REDIRECT_WORDS = {
    "en": "#redirect", "de": "#weiterleitung", "fr": "#redirection", "es": "#redirección", "it": "#rinvia",
    "pt": "#redirecionamento", "ru": "#перенаправление", "uk": "#перенаправлення", "bg": "#пренасочване",
    "pl": "#patrz", "nl": "#doorverwijzing", "sv": "#omdirigering", "ja": "#転送", "zh": "#重定向",
    "ar": "#تحويل", "fa": "#تغییرمسیر", "tr": "#yönlendirme", "cs": "#přesměruj", "hi": "#अनुप्रेषित",
}


def _names(words: str) -> frozenset[str]:
    return frozenset(word.replace("_", " ").lower() for word in words.split())


@dataclass(frozen=True)
class Site:
    """A wiki as cleaning sees it. The defaults are English Wikipedia's (and any export's without siteinfo)."""
    language: str = "en"
    link_prefixes: frozenset[str] = _names(LINK_PREFIX_ALIASES["en"])   # File, Media, Category: no text
    disambiguation_templates: frozenset[str] = frozenset(DISAMBIGUATION_TEMPLATES["en"])
    disambiguation_titles: tuple[str, ...] = (DISAMBIGUATION_TITLES["en"],)
    redirect_words: tuple[str, ...] = (REDIRECT_WORDS["en"],)


ENGLISH = Site()


def site_from_siteinfo(namespaces: dict[int, str], language: str) -> Site:
    """A Site from a <siteinfo>'s namespace names (by key) and the wiki's language code (xml:lang; "" if
    unknown): its own names, the English ones, and the tables' entries for its language."""
    language = (language or "en").lower()
    base = language.split("-")[0]
    own = " ".join(namespaces.get(key, "").replace(" ", "_") for key in (NS_MEDIA, NS_FILE, NS_CATEGORY))
    return Site(
        language=language,
        link_prefixes=_names(f"{LINK_PREFIX_ALIASES['en']} {LINK_PREFIX_ALIASES.get(base, '')} {own}"),
        disambiguation_templates=frozenset(DISAMBIGUATION_TEMPLATES["en"] + DISAMBIGUATION_TEMPLATES.get(base, [])),
        disambiguation_titles=_english_and(DISAMBIGUATION_TITLES, base),
        redirect_words=_english_and(REDIRECT_WORDS, base),
    )


def _english_and(table: dict[str, str], language: str) -> tuple[str, ...]:
    return tuple(sorted({table["en"], table.get(language, table["en"])}))
