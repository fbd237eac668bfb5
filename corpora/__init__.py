"""One module per corpus: each turns raw files into `pipeline.formats.documents.Document`s and `Count` events.

    kinds       the corpus kinds of --input KIND:GLOB, an entry each (reader, check, size figures, ids, counts);
                ReadParams, the reading flags
    wikipedia/  MediaWiki XML dumps (dump planning and reading, wikitext -> text, templates, the test-dump builder)
    books       book files, directories and tar archives
    text        google's format (a sentence a line), and the decoding every text corpus shares
    web         JSON Lines and Parquet records (C4, Dolma, FineWeb)
"""
from corpora.kinds import KINDS, RECORD_KINDS, ReadParams   # noqa: F401 (the command line's names for them)
