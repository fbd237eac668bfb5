"""Text -> tokens, pure functions on strings: the steps every corpus goes through before pairing.

sentences        paragraphs -> sentences (blingfire + rules keyed to scripts and words; no language flag)
tokenization     WordPiece with HF `tokenizers`, giving google's FullTokenizer ids exactly
subwords         any tokenizer.json (BPE, Unigram, WordPiece): its BERT special roles, casing, BERT's tokens added;
                 documents to its ids with word starts marked
vocabularies     the vocabulary as one type, a vocab.txt or a tokenizer.json (`Vocabulary`), built once from a
                 manifest's entry or the flags and asked: its entry, encoder, ids, rows, export files, comparison
training         a tokenizer.json trained from documents (`bertprep vocab --model bpe|unigram|wordpiece`)
unicode_classes  google's BasicTokenizer character classes per Unicode version (generated)
normalize        text as deduplication compares it (NFKC, case, quotes, dashes and spaces folded), its shingles
contamination    lm-eval's Janitor rule (eval n-grams, matches, the fragments left), vectorised over a document

Imports formats/ only. normalize and contamination are text steps the dedup and decontamination algorithms build
on: they go here, not in algorithms/.
"""
