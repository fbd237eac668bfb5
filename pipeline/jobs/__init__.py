"""The Beam jobs: one module a stage, each reading alone, top to bottom, like a Beam example's `run()`.

    extract    Read<Corpus>                                                 | ToRecords | WriteDocuments
    pairs      ReadDocuments | SpreadDocuments | Tokenize | MakePairs | ToRecords | WritePairs
    mask       ReadPairs                                    | MaskPairs             | WriteShards (or PackShards)
    prepare    Read<Corpus>  | SpreadDocuments | Tokenize | MakePairs | MaskPairs | WriteShards (or PackShards)
    pack       ReadShards                                                         | PackShards
    dedup      ReadDocuments | Dedup                                    | ToRecords | WriteDocuments
    decontaminate  ReadDocuments | Decontaminate                        | ToRecords | WriteDocuments
    convert    ListFiles | SpreadFiles | ConvertFile

each ending in `Publish`. Each module declares a frozen `Plan` (everything the job does, decided before it runs)
and a `run(plan, options)` that builds its chain and hands it to the launcher. `pairs` and `prepare` may split the
documents into training and validation before pairing (OUTPUT/validation/), and `mask`, `pack` and `convert` carry
such a split through: a job builds its chain once and applies it to each side it has (a `Side`: labels prefixed
Validation..., its own output and manifest), and one Publish publishes every side, the training one last.
What they share, apart:

    launch     running a job: the shuffle back end, the plan printed before it, the run (Ctrl-C, retries, a dry
               run, waiting), the counters after it; the start dedup and decontaminate share (documents in and out)
    settings   the typed settings plans share (running, pairing, masking, packing, decontamination, what an input
               without a manifest was made with), the algorithms' parameters they make, their manifest entries
    sources    what a job reads: corpus inputs (checked for their kind), their readers, eval sets
    inputs     masked shards and pair records, ours (a manifest) or google's (flags): the one place mask, pack,
               convert and verify tell them apart; the vocab's entry; the validation set an input carries
    outputs    what a job's manifest says, from what it wrote and counted (a `Publication`'s functions)
    errors     `Refused`: what a job finds it cannot do while planning, printed by bertprep as one line

No job reads a flag: the command layer (pipeline/commands/plans.py) builds each plan from the flags, and
pipeline/commands/run.py (Beam options, the checks a runner needs) calls the job's `run`. Below this layer are the
Beam plumbing (pipeline/beam), the algorithms, the corpora, text and formats; above it the trainer and the commands.
"""
