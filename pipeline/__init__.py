"""bertprep: Beam pipelines for BERT pretraining data and a lean PyTorch trainer.

The sub-packages are layers; a module imports its own layer and the ones below it, never one above
(tests/test_layers.py checks every import, the lazy ones included):

    commands/     the `bertprep` commands, the only layer that reads flags: cli, flags, the Beam commands' flag
                  groups and plans, their handler (run.py), the trainer's flags (training.py), verify, inspect,
                  vocab, demo
    (model/)      the trainer, a top-level package of its own, run from a TrainPlan
    jobs/         the Beam jobs, one module a stage (extract, pairs, mask, prepare, pack, dedup, decontaminate,
                  convert), each run from a typed Plan, and the launcher
    beam/         Beam plumbing: composite transforms, the shuffle and its run files, shards, sizing, options
    algorithms/   what a training example is, pure: pairs, masking, packing; dedup, decontamination, the split
    (corpora/)    raw corpus files -> documents: one module per corpus, a top-level package of its own
    text/         text -> tokens: sentence splitting, WordPiece, google's Unicode classes; dedup's and
                  decontamination's text rules
    formats/      the contracts: documents, pair records, google's schema, Example wire format, TFRecord,
                  exported columns (Parquet, MDS), reports, manifest, and the path rules (storage) every reader
                  and writer uses

Bottom to top: formats, text, corpora, algorithms, beam, jobs, model, commands.
"""
