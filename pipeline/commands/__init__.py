"""The `bertprep` commands: what a user runs, and the only layer that reads flags.

cli          the command table and the strict parser: one line for every mistake
flags        the parser and flag value types
groups       the Beam commands' flag groups: each its flags, their checks together, the typed value they build
plans        each Beam command as its job and its groups; the job's typed Plan built from the flags
run          the Beam commands' handler: Beam options, a runner's checks, the plan, then the stage's job
verify       `bertprep verify`: every record and invariant of an output directory
inspection   `bertprep inspect`: counts, statistics and examples
vocab        `bertprep vocab`: a WordPiece vocab learned from documents
demo         `bertprep demo`: the whole product on the bundled sample
training     `bertprep train`, `export-hf`, `plot`: the trainer's flags, its TrainPlan, one-line refusals

The top layer: may import every layer below (the jobs, the trainer). A new stage is a module of pipeline/jobs/ (its
Plan and its job, one chain of labelled transforms), an entry of plans.COMMANDS (its flag groups, named for the
Plan's fields), and a row of cli.COMMANDS; its invariants go into verify and its statistics into
inspection.
"""
