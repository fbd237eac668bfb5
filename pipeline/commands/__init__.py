"""The `bertprep` commands: what a user runs, and the only layer that reads flags.

cli          the command table and the strict parser: one line for every mistake
flags        the parser and flag value types
run          the Beam commands' handler: Beam options, a runner's checks, then the stage's job (pipeline/jobs/)
verify       `bertprep verify`: every record and invariant of an output directory
inspection   `bertprep inspect`: counts, statistics and examples
vocab        `bertprep vocab`: a WordPiece vocab learned from documents
demo         `bertprep demo`: the whole product on the bundled sample
training     `bertprep train`, `export-hf`, `plot`: the trainer's flags, its TrainPlan, one-line refusals

The top layer, with its peers jobs/ and model/: may import every layer below. A new stage is a module of
pipeline/jobs/ (its job, one chain of labelled transforms), a row of cli.COMMANDS and of run.STAGES; its invariants
go into verify and its statistics into inspection.
"""
