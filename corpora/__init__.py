"""One module per corpus: each turns raw files into `pipeline.formats.documents.Document`s and `Count` events."""

KINDS = ("wikipedia", "books", "text", "jsonl", "parquet")   # the corpus kinds of --input KIND:GLOB
RECORD_KINDS = ("jsonl", "parquet")   # one document a record (corpora/web.py): --text-field and --id-field name them


from dataclasses import dataclass   # noqa: E402


@dataclass(frozen=True)
class ReadParams:
    """How the corpus readers read (the extract flags): TEMPORARY until the kinds registry lands."""
    wiki_index: str | None = None
    skip_disambiguation: bool = True
    disambiguation_templates: tuple[str, ...] = ()
    max_document_bytes: int | None = None
    skip_bad_files: bool = False
    text_field: str = "text"
    id_field: str = "id"
    strict: bool = False
