"""One module per corpus: each turns raw files into `pipeline.documents.Document`s and `Count` events."""
