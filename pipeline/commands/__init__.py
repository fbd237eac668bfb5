"""The `bertprep` commands: what a user runs, and the only layer that reads flags.

cli          the command table and the strict parser: one line for every mistake
flags        the parser and flag value types (shared with model/train.py)
run          the Beam jobs (extract, pairs, mask, prepare): one chain of labelled transforms each, then publishing
verify       `bertprep verify`: every record and invariant of an output directory
inspection   `bertprep inspect`: counts, statistics and examples
vocab        `bertprep vocab`: a WordPiece vocab learned from documents
demo         `bertprep demo`: the whole product on the bundled sample

The top layer: may import every layer below. A new stage's job (pack, dedup, an objective) is a chain in run.py
and a row of cli.COMMANDS; its invariants go into verify and its statistics into inspection.
"""
