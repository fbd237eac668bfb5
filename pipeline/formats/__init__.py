"""The contracts: every format one stage writes and another reads, each defined once, imported by both sides.

documents       documents (gzip JSON Lines) and `Count` events: extract writes them, pairs reads them
pair_records    the unmasked NSP instance (`pairs` -> `mask`, dynamic masking)
schema          the masked-LM shard schemas, google's and the packed one beside it: the encoder and both decoders
example_proto   the `tf.train.Example` wire format in numpy (under pair_records and schema)
tfrecord        TFRecord framing and CRC32C
manifest        `manifest.json`, and the one way every reader opens a stage's output
storage         paths on any file system (local or an object store, which has no directories)

The bottom layer: imports nothing else of bertprep. Beam appears only as its FileSystems, imported where a path
is not local, so the trainer reads shards without Beam's pipelines or tensorflow. A new format goes here beside
the old ones, which stay byte-stable (the packed schema sits beside google's in schema.py); the dedup report
will be dedup_report.py.
"""
