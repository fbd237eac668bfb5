"""One module per corpus: each turns raw files into `pipeline.formats.documents.Document`s and `Count` events."""

KINDS = ("wikipedia", "books", "text", "jsonl", "parquet")   # the corpus kinds of --input KIND:GLOB
RECORD_KINDS = ("jsonl", "parquet")   # one document a record (corpora/web.py): --text-field and --id-field name them
