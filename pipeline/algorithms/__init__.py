"""The algorithms that decide what a training example is: pure functions over token arrays, seeded by a stable
key, tested without a pipeline. They know nothing of Beam, files or workers.

pairs       google's create_instances_from_document: NSP (and ALBERT's SOP) instances from a document and a pool
objectives  RoBERTa's full-sentence rows (objective none), within a document or across a bucket's documents
masking     google's masked-LM rule (count, 80/10/10), whole-word and n-gram, vectorised over batches
packing     histogram-based bin packing of masked instances into rows, and back
dedup       MinHash signatures (one permutation hashing), LSH bands, clusters and the rule that keeps one of each

Imports text/ and formats/; each is wrapped by a thin composite in beam/.
"""
