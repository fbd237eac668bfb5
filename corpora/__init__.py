"""One module per corpus: each turns raw files into `pipeline.formats.documents.Document`s and `Count` events.

    wikipedia/  MediaWiki XML dumps (dump planning and reading, wikitext -> text, templates, the test-dump builder)
    books       book files, directories and tar archives
    text        google's format (a sentence a line), and the decoding every text corpus shares
    web         JSON Lines and Parquet records (C4, Dolma, FineWeb)
"""

KINDS = ("wikipedia", "books", "text", "jsonl", "parquet")   # the corpus kinds of --input KIND:GLOB
RECORD_KINDS = ("jsonl", "parquet")   # one document a record (corpora/web.py): --text-field and --id-field name them
