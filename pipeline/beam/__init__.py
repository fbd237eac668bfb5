"""Beam plumbing: everything that runs the algorithms on Beam, at any scale, with the same bytes everywhere.

transforms     the composite transforms every job is built from (thin wrappers around corpora/, text/,
               algorithms/)
shuffle        every big regrouping, by ranges of a seeded hash; back ends `files` (run files) and `groupbykey`
runfiles       sorted run files on this machine's disk: the `files` back end
shards         deterministic, balanced output files; the `.incomplete/` protocol and the moves that publish them
tally          counts that travel as data (a Beam counter and, per bundle, a dict on the step's `tally` output)
publish        a job's last step: checks its counts, publishes its files, writes manifest.json
split          the validation split: documents -> training and validation, and the list of the held-out ones
dedup          deduplication: fingerprints, LSH buckets, verified pairs, clusters, the documents and paragraphs kept
decontaminate  the eval sets' n-grams as a side input, each document cleaned as it comes, and the report
convert        `convert`'s steps: each input file -> its Parquet file or MDS shards, in the input's order
sizing         default file counts from the input's size
options        Beam options: presets from beam_options/ overridden by the user's Beam flags
local          around a local run: Ctrl-C and the worker processes' tracebacks

Imports algorithms/, text/, formats/ and corpora/. A new stage's composite goes here (as dedup and split did) and
reaches its workers through the shuffle and shards above, never a GroupByKey of its own.
"""
