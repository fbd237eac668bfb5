"""One module per corpus: each turns raw files into `pipeline.formats.documents.Document`s and `Count` events."""
