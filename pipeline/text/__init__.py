"""Text -> tokens, pure functions on strings: the steps every corpus goes through before pairing.

sentences        paragraphs -> sentences (blingfire + rules keyed to scripts and words; no language flag)
tokenization     WordPiece with HF `tokenizers`, giving google's FullTokenizer ids exactly
unicode_classes  google's BasicTokenizer character classes per Unicode version (generated)

Imports formats/ only. Text normalisation for deduplication (NFKC, case and punctuation folding, word shingles)
goes here too (normalize.py): it is a text step that the dedup algorithm builds on.
"""
