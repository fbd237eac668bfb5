"""The contracts: every format one stage writes and another reads, each defined once, imported by both sides.

documents               documents (gzip JSON Lines) and `Count` events: extract writes them, pairs reads them
pair_records            the unmasked NSP instance (`pairs` -> `mask`, dynamic masking)
schema                  the masked-LM shard schemas, google's and the packed one beside it: the encoder and both
                        decoders
example_proto           the `tf.train.Example` wire format in numpy (under pair_records and schema)
tfrecord                TFRecord framing and CRC32C
columns                 the columns `convert` exports (Hugging Face's names), from shards or pair records, and back
parquet                 Parquet files of those columns, as `datasets` reads them, and their dataset card
mds                     MosaicML streaming's MDS shards, written by our own code
heldout                 a validation set beside its training output, and its list of held-out documents
dedup_report            `dedup_report.jsonl.gz`: one line per cluster of duplicates, the one kept and those removed,
                        and per document the paragraph pass removed
decontamination_report  `decontamination_report.jsonl.gz`: one line per document the eval sets cut or dropped
evalsets                eval-set files (SQuAD, JSON Lines, text) -> the examples to decontaminate against
gzip_lines              gzip JSON Lines side files (the reports, the held-out list), the same bytes on any machine
manifest                `manifest.json`, and the one way every reader opens a stage's output
identify                what a path given to a reader holds when it is not what it reads (raw books, a dump, a training
                        run, ...), and the command that makes what it reads: the words of every such refusal
storage                 paths on any file system (local or an object store, which has no directories)

The bottom layer: imports nothing else of bertprep. Beam appears only as its FileSystems, imported where a path
is not local, so the trainer reads shards without Beam's pipelines or tensorflow. A new format goes here beside
the old ones, which stay byte-stable (the packed schema sits beside google's in schema.py, the reports beside the
manifest).
"""
