"""The Beam commands' flags, as groups, and the typed plan each builds for its job (pipeline/jobs/).

A command is its job's module and its groups in --help's order, each named for the field of the job's `Plan` it
fills (None: a group that fills several, or none). Parsing checks every group (groups.py: one line naming the
flag); `Command.plan(args)` builds each group's value and hands them to the job's `Plan`, so a job never sees a
flag: it runs as `run(plan, options)`.
"""
from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass

from pipeline.algorithms import masking, packing, pool
from pipeline.commands import flags, groups
from pipeline.commands.flags import positive_int, probability, vocab_file
from pipeline.commands.groups import (AllowIncomplete, Corpus, Decontaminate, Dedup, GoogleShards, Group, Mask, Mix,
                                      NumShards, Output, Pack, Pairs, Seed, Split, ValidationMasking)
from pipeline.formats import mds
from pipeline.jobs import settings


class Flag(Group):
    """One flag of a command's own, its value as it was parsed."""

    def __init__(self, *names, **kwargs):
        self.names, self.kwargs = names, kwargs
        self.dest = names[0].lstrip("-").replace("-", "_")   # argparse's name for it

    def add(self, p):
        p.add_argument(*self.names, **self.kwargs)

    def build(self, args):
        return getattr(args, self.dest)


def mds_shard_mb(text: str) -> float:
    return flags._number(float, text, lambda v: 0 < v < 4096, "MiB of an MDS shard, in (0, 4096)")


class Format(Group):
    """convert: the output format and each format's own flags -> format, hf_dataset_card, mds_shard_mb."""

    def add(self, p):
        p.add_argument("--format", required=True, choices=("parquet", "mds"),
                       help="parquet: Hugging Face datasets/transformers (input_ids, token_type_ids, attention_mask, "
                            "labels, next_sentence_label; train-*.parquet, one file per input file); mds: MosaicML "
                            "streaming / ModernBERT (index.json and shard.*.mds, rows cut to their real tokens, with "
                            "len). docs: README, 'Training with another trainer'")
        p.add_argument("--hf-dataset-card", action="store_true",
                       help="parquet: also write README.md, a dataset card (splits, features, counts, the bertprep "
                            "parameters) so that the directory can be pushed to a hub as it is")
        p.add_argument("--mds-shard-mb", type=mds_shard_mb, default=None,
                       help=f"mds: MiB a shard holds at most (default {mds.DEFAULT_SHARD_MB}, streaming's own "
                            "default); an input file makes one shard or more")

    def check(self, p, args):
        if args.hf_dataset_card and args.format != "parquet":
            p.error(f"--hf-dataset-card with --format {args.format}: the card describes Parquet files")
        if args.mds_shard_mb is not None and args.format != "mds":
            p.error(f"--mds-shard-mb with --format {args.format}")
        if args.mds_shard_mb is None:
            args.mds_shard_mb = float(mds.DEFAULT_SHARD_MB)

    def build(self, args) -> dict:
        return {"format": args.format, "hf_dataset_card": args.hf_dataset_card, "mds_shard_mb": args.mds_shard_mb}


class CorpusFields(Corpus):
    """extract, prepare: the corpora and how they are read -> corpora, read."""

    def build(self, args) -> dict:
        corpora, read = super().build(args)
        return {"corpora": corpora, "read": read}


class Mixing(Mix):
    def build(self, args) -> dict:
        weights, mix = super().build(args)
        return {"corpus_weights": weights, "mix_corpora": mix}


DOCUMENTS_INPUT = "document directories or GLOBs of documents-*.jsonl.gz"
DOCUMENTS_WITHOUT_MANIFEST = "the documents-*.jsonl.gz of a directory without manifest"
DOCUMENT_FILES = "document files to write (0: from the input's size, ~128 MiB each)"


@dataclass(frozen=True)
class Command:
    """A Beam command: its job's module (pipeline/jobs/NAME.py, whose `Plan` it builds) and its flag groups in
    --help's order, each named for the Plan field it fills."""
    job: str
    groups: tuple[tuple[str | None, Group], ...]

    def add(self, p: flags.Parser) -> None:
        for _, group in self.groups:
            group.add(p)

    def check(self, p: flags.Parser, args: argparse.Namespace) -> None:
        for _, group in self.groups:
            group.check(p, args)

    def module(self):
        """The job's module: Beam's modules are imported when a job runs, not when its flags parse."""
        return importlib.import_module(self.job)

    def plan(self, args: argparse.Namespace):
        """The job's Plan: each group's value, by the field it names."""
        values = {}
        for name, group in self.groups:
            built = group.build(args)
            if name:
                values[name] = built
            elif built:
                values.update(built)
        return self.module().Plan(**values)


COMMANDS = {
    "extract": Command("pipeline.jobs.extract", (
        (None, CorpusFields()), ("num_shards", NumShards(DOCUMENT_FILES)), ("run", Output()))),
    "pairs": Command("pipeline.jobs.pairs", (
        ("input", Flag("--input", required=True, help=DOCUMENTS_INPUT)),
        ("allow_incomplete", AllowIncomplete(DOCUMENTS_WITHOUT_MANIFEST)),
        ("pairing", Pairs()), ("split", Split()), ("seed", Seed()),
        ("num_shards", NumShards("pair files to write (0: from the input's size, ~128 MiB each, at least 8)")),
        ("run", Output()))),
    "mask": Command("pipeline.jobs.mask", (
        ("input", Flag("--input", required=True, help="a pairs directory (with its manifest.json)")),
        ("vocab", Flag("--vocab", default=None, type=vocab_file,
                       help="optional: refuse unless the pairs were made with this vocab")),
        ("allow_incomplete", AllowIncomplete("the pairs-*.tfrecord of a directory without manifest (then give "
                                             "--vocab and --max-seq-length)")),
        ("objective", Flag("--objective", choices=pool.OBJECTIVES, default=None,
                           help="optional: refuse unless the pairs were made for this objective (the shards keep "
                                "the pairs' objective; with --allow-incomplete, what the pairs are: default nsp)")),
        ("max_seq_length", Flag("--max-seq-length", type=positive_int, default=None,
                                help="with --allow-incomplete: the pairs' max_seq_length (otherwise from their "
                                     "manifest)")),
        ("masking", Mask()),
        (None, ValidationMasking("when the pairs have a validation set, which is masked too", needs_split=False)),
        ("sequences_per_pack", Pack()), ("seed", Seed()),
        ("num_shards", NumShards("TFRecord shards (0: from the records' size, ~128 MiB each)")), ("run", Output()))),
    "prepare": Command("pipeline.jobs.prepare", (
        (None, CorpusFields()), (None, Mixing()), ("dedup", Dedup(switch=True)),
        ("decontaminate", Decontaminate(switch=True)), ("pairing", Pairs()), ("split", Split()),
        ("masking", Mask()),
        (None, ValidationMasking("with --validation-documents or --validation-fraction", needs_split=True)),
        ("sequences_per_pack", Pack()), ("seed", Seed()),
        ("num_shards", NumShards("TFRecord shards (0: from the input's size, ~128 MiB each)")), ("run", Output()))),
    "pack": Command("pipeline.jobs.pack", (
        ("input", Flag("--input", required=True,
                       help="masked-LM shards in google's layout: a `mask`/`prepare` output directory, or "
                            "google-made shards (a glob, with --max-seq-length, --max-predictions-per-seq and "
                            "--vocab); or pair records (a `pairs` output), packed unmasked for train "
                            "--dynamic-masking")),
        ("sequences_per_pack", Flag("--max-sequences-per-pack", type=groups.sequences_per_pack, default=None,
                                    help=f"instances a row may hold, 1..{packing.MAX_SEQUENCES_PER_PACK}: more packs "
                                         "tighter (bench/bench_packing.py prints the efficiency of each). Default "
                                         f"{groups.DEFAULT_K}")),
        ("made_with", GoogleShards("recorded for the trainer and verify")),
        ("masked_lm_prob", Flag("--masked-lm-prob", type=probability, default=masking.MaskRecipe.masked_lm_prob,
                                help="shards without a manifest: the masked_lm_prob they were masked with, which "
                                     "sizes a row's masked slots (a row that would need more is split, and "
                                     "counted)")),
        ("seed", Seed()),
        ("num_shards", NumShards("TFRecord shards (0: from the input's size, ~128 MiB each). Each file is packed on "
                                 "its own, in one worker's memory: fewer, bigger files pack a little tighter")),
        ("run", Output()))),
    "convert": Command("pipeline.jobs.convert", (
        ("input", Flag("--input", required=True,
                       help="masked-LM shards (a `mask`/`prepare`/`pack` output: google's layout or packed, any "
                            "objective; or google-made shards as a glob, with --max-seq-length, "
                            "--max-predictions-per-seq and --vocab), or pair records (a `pairs` output: unmasked "
                            "rows for trainers that mask as they load). A validation set beside them is converted "
                            "too")),
        (None, Format()),
        ("made_with", GoogleShards("its size picks input_ids' type, its [CLS] and [SEP] the special tokens")),
        ("run", Output(shuffles=False)))),
    "dedup": Command("pipeline.jobs.dedup", (
        ("input", Flag("--input", required=True, help=DOCUMENTS_INPUT)),
        ("allow_incomplete", AllowIncomplete(DOCUMENTS_WITHOUT_MANIFEST)),
        ("params", Dedup(switch=False)), ("seed", Seed()),
        ("parallelism", Flag("--pair-parallelism", type=flags.nonnegative_int,
                             default=groups.default(settings.Pairing, "parallelism"),
                             help="work items per shuffle are 4 per worker: this many workers (0: the local worker "
                                  "count, or 32 on a distributed runner); the output does not depend on it")),
        ("num_shards", NumShards(DOCUMENT_FILES)), ("run", Output()))),
    "decontaminate": Command("pipeline.jobs.decontaminate", (
        ("input", Flag("--input", required=True, help=DOCUMENTS_INPUT)),
        ("allow_incomplete", AllowIncomplete(DOCUMENTS_WITHOUT_MANIFEST)),
        ("decontamination", Decontaminate(switch=False)), ("seed", Seed()),
        ("num_shards", NumShards(DOCUMENT_FILES)), ("run", Output()))),
}


def adder(command: str):
    """The `add_arguments` of a Beam command's parser."""
    return COMMANDS[command].add
