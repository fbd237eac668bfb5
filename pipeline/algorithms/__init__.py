"""The algorithms that decide what a training example is: pure functions over token arrays, seeded by a stable
key, tested without a pipeline. They know nothing of Beam, files or workers.

pairs     google's create_instances_from_document: NSP instances from a tokenized document and a pool
masking   google's masked-LM rule (count, 80/10/10), whole-word and n-gram, vectorised over batches

Imports text/ and formats/. The new stages' algorithms belong here, each wrapped by a thin composite in beam/:
packing (histogram-based bin packing of masked instances into rows), the other objectives (ALBERT's sentence
order and RoBERTa's full-sentence rows, beside NSP in pairs), and deduplication (MinHash signatures, LSH bands,
clusters and the rule that keeps one document of each).
"""
