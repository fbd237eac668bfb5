"""The Beam jobs: one module a stage, each reading alone, top to bottom, like a Beam example's `run()`.

    extract    Read<Corpus>                                                 | ToRecords | WriteDocuments
    pairs      ReadDocuments | SpreadDocuments | Tokenize | MakePairs | ToRecords | WritePairs
    mask       ReadPairs                                    | MaskPairs             | WriteShards (or PackShards)
    prepare    Read<Corpus>  | SpreadDocuments | Tokenize | MakePairs | MaskPairs | WriteShards (or PackShards)
    pack       ReadShards                                                         | PackShards
    dedup      ReadDocuments | Dedup                                    | ToRecords | WriteDocuments
    decontaminate  ReadDocuments | Decontaminate                        | ToRecords | WriteDocuments

each ending in `Publish`, and each a `run(args, options)` that plans the job, builds it and hands it to the launcher.
`pairs` and `prepare` may split the documents into training and validation before pairing (OUTPUT/validation/), and
`mask` and `pack` carry such a split through.
What they share, apart:

    launch     running a job: the shuffle back end, the plan printed before it, the run (Ctrl-C, retries, a dry
               run, waiting), the counters after it
    sources    what a job reads: corpus inputs (checked for their kind), their readers, the vocab's entry
    settings   flags -> the algorithms' parameters (pairs, masking, packing, dedup), and their manifest entries
    outputs    what a job's manifest says, from what it wrote and counted (a `Publication`'s functions)

Options are parsed once (pipeline/commands/cli.py) and arrive as plain values; pipeline/commands/run.py is the Beam
commands' handler (Beam options, the checks a runner needs) that calls a job's `run`. This layer sits beside
commands/ (peers): below it are the Beam plumbing (pipeline/beam), the algorithms, the corpora, text and formats.
"""
