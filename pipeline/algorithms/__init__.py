"""The algorithms that decide what a training example is: pure functions over token arrays, seeded by a stable
key, tested without a pipeline. They know nothing of Beam, files or workers.

pairs          google's create_instances_from_document: NSP (and ALBERT's SOP) instances from a document and a pool
objectives     RoBERTa's full-sentence rows (objective none), within a document or across a bucket's documents
pool           what pairs and objectives share: a bucket's documents as token ids (held or spilled), PairParams
masking        google's masked-LM rule (count, 80/10/10), whole-word and n-gram, vectorised over batches
packing        histogram-based bin packing of masked instances into rows, and back
dedup          MinHash signatures (one permutation hashing), LSH bands, clusters and the rule that keeps one of each
decontaminate  lm-eval's Janitor on a document: kept as it is, cut to its fragments, or dropped, with a report line
split          the validation split by document: a seeded draw per id, held out by a fraction or a count

Imports text/ and formats/; each is wrapped by a thin composite in beam/.
"""
