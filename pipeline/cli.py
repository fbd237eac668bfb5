"""`bertprep`: the one console script. Parses options once and hands plain values to the stages.

Flags bertprep does not know are Beam's: they go to PipelineOptions after the `--preset` flags, so
`--runner`, `--direct_num_workers`, `--project`, ... work as Beam users expect.
"""
from __future__ import annotations

import argparse
import logging
import sys

COMMANDS = {
    "extract": "corpus files -> documents (gzip JSON Lines)",
    "vocab": "documents -> a WordPiece vocab.txt",
    "pairs": "documents -> NSP pair records (tokenized, unmasked)",
    "mask": "pair records -> TFRecord shards in google's schema (re-mask without re-tokenizing)",
    "prepare": "corpus files -> TFRecord shards in one Beam pipeline (extract + pairs + mask)",
    "inspect": "counts, length/masking stats and decoded examples of an output directory",
    "verify": "read every record of an output directory: framing, CRCs, schema, invariants, counts",
    "train": "train BERT on the shards (PyTorch)",
    "export-hf": "convert a training run to a HuggingFace BertForPreTraining checkpoint",
    "plot": "draw a training run's loss/accuracy curves to PNG",
    "demo": "everything above on the bundled sample, then a short CPU training run",
}
BEAM_COMMANDS = ("extract", "pairs", "mask", "prepare")


def _quiet_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(message)s")
    # Beam warns at import time about optional GCP client libraries; it is noise for local runs.
    logging.getLogger().addFilter(lambda r: "apitools" not in r.getMessage())
    for name in ("apache_beam", "absl"):
        logging.getLogger(name).setLevel(logging.INFO if verbose else logging.ERROR)


def _add_output(p: argparse.ArgumentParser) -> None:
    p.add_argument("--output", required=True, help="output directory (local path or gs://...)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output set in --output")
    p.add_argument("--preset", default="local", help="Beam option preset from beam_options/ (local, local-1, "
                                                     "...) or a file of Beam flags; explicit Beam flags win")
    p.add_argument("--gcs-bucket", default=None,
                   help="dataflow preset: gs://BUCKET[/prefix] for temp_location and staging_location")
    p.add_argument("--retries", type=int, default=0,
                   help="run the whole pipeline again up to N times if it fails (local runners do not retry a "
                        "failed bundle; Dataflow does)")
    p.add_argument("-v", "--verbose", action="store_true", help="Beam's and bertprep's INFO logging")


def _add_allow_incomplete(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--allow-incomplete", action="store_true",
                   help=f"read {what} anyway (no manifest.json: its stage did not finish or it was copied in part)")


def _names(value: str) -> tuple[str, ...]:
    """"A,B" -> ("A", "B"); an empty name is refused."""
    names = tuple(name.strip() for name in value.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"a comma-separated list of names, got {value!r}")
    return names


def _add_corpus(p: argparse.ArgumentParser, with_kind: bool = True) -> None:
    if with_kind:
        p.add_argument("corpus", choices=("wikipedia", "books", "text"))
    p.add_argument("--input", required=True, help="GLOB[,GLOB...] of corpus files (books: also directories)")
    p.add_argument("--wiki-index", default=None,
                   help="wikipedia: the multistream index (default: found beside the dump when present)")
    p.add_argument("--keep-disambiguation", action="store_true", help="wikipedia: keep disambiguation pages")
    p.add_argument("--disambiguation-templates", type=_names, default=(), metavar="NAME,...",
                   help="wikipedia: more templates that mark a disambiguation page, for wikis whose own the "
                        "built-in table lacks (English names and __DISAMBIG__ always count)")
    p.add_argument("--max-document-bytes", type=int, default=None,
                   help="books: split books larger than this into documents of at most this size")
    p.add_argument("--skip-bad-files", action="store_true",
                   help="count and skip corrupt input files instead of failing the job")


def _add_pairs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--vocab", required=True, help="google-format vocab.txt")
    p.add_argument("--cased", action="store_true", help="cased vocab: no lowercasing, accents kept")
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--dupe-factor", type=int, default=5, help="passes over each document, each with new randomness")
    p.add_argument("--short-seq-prob", type=float, default=0.1)
    p.add_argument("--bucket-docs", type=int, default=10_000,
                   help="documents per random-next pool: random B segments come from the same bucket (google's "
                        "pool is the whole corpus; a pool of thousands is statistically the same for NSP)")
    p.add_argument("--pair-parallelism", type=int, default=0,
                   help="workers that pair a corpus of few buckets, each spilling a copy of the pool, and that "
                        "tokenize an input of few files (0: the local worker count, or 32 on a distributed runner); "
                        "the output does not depend on it")
    p.add_argument("--seed", type=int, default=12345)


def _add_mask(p: argparse.ArgumentParser) -> None:
    p.add_argument("--masked-lm-prob", type=float, default=0.15)
    p.add_argument("--max-predictions-per-seq", type=int, default=20)
    p.add_argument("--mask-token-prob", type=float, default=0.8, help="chosen tokens replaced by [MASK]")
    p.add_argument("--random-token-prob", type=float, default=0.1, help="chosen tokens replaced by a random id")
    p.add_argument("--whole-word-mask", action="store_true", help="mask whole words, one 80/10/10 draw per word")
    p.add_argument("--ngram-max", type=int, default=1, help="mask spans of 1..n whole words (weights 1/n)")
    p.add_argument("--seed", type=int, default=12345)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bertprep", description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(f"  {k:<10} {v}" for k, v in COMMANDS.items()))
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("extract", help=COMMANDS["extract"])
    _add_corpus(p)
    p.add_argument("--num-shards", type=int, default=0, help="document files to write (0: one per 64 MiB in)")
    _add_output(p)

    p = sub.add_parser("pairs", help=COMMANDS["pairs"])
    p.add_argument("--input", required=True, help="document directories or GLOBs of documents-*.jsonl.gz")
    _add_allow_incomplete(p, "the documents-*.jsonl.gz of a directory without manifest")
    _add_pairs(p)
    p.add_argument("--num-shards", type=int, default=0, help="pair files to write (0: one per 16 MiB in)")
    _add_output(p)

    p = sub.add_parser("mask", help=COMMANDS["mask"])
    p.add_argument("--input", required=True, help="a pairs directory (with its manifest.json)")
    p.add_argument("--vocab", default=None, help="optional: refuse unless the pairs were made with this vocab")
    _add_allow_incomplete(p, "the pairs-*.tfrecord of a directory without manifest (then give --vocab and "
                             "--max-seq-length)")
    p.add_argument("--max-seq-length", type=int, default=None,
                   help="with --allow-incomplete: the pairs' max_seq_length (otherwise from their manifest)")
    _add_mask(p)
    p.add_argument("--num-shards", type=int, default=0, help="TFRecord shards (0: as many as pair files)")
    _add_output(p)

    p = sub.add_parser("prepare", help=COMMANDS["prepare"])
    _add_corpus(p)
    _add_pairs(p)
    _add_mask_no_seed(p)
    p.add_argument("--num-shards", type=int, default=0, help="TFRecord shards (0: one per 8 MiB of input)")
    _add_output(p)

    p = sub.add_parser("inspect", help=COMMANDS["inspect"])
    p.add_argument("directory")
    p.add_argument("--examples", type=int, default=3, help="decoded examples to print")
    p.add_argument("--vocab", default=None, help="vocab to decode with (default: the manifest's)")
    _add_allow_incomplete(p, "the data files of a directory without manifest")

    p = sub.add_parser("verify", help=COMMANDS["verify"])
    p.add_argument("directory")
    p.add_argument("--max-seq-length", type=int, default=0, help="for shards without a manifest (google's)")
    p.add_argument("--max-predictions-per-seq", type=int, default=0, help="for shards without a manifest")
    p.add_argument("--vocab-size", type=int, default=0, help="for shards without a manifest: check ids below it")
    p.add_argument("--vocab", default=None, help="for shards without a manifest: their vocab (size, [CLS], [SEP])")
    p.add_argument("--cls-id", type=int, default=101, help="without a manifest or --vocab (google's vocabs: 101)")
    p.add_argument("--sep-id", type=int, default=102, help="without a manifest or --vocab (google's vocabs: 102)")
    p.add_argument("--pattern", default="*.tfrecord", help="files to read when there is no manifest")

    for name in ("vocab", "train", "export-hf", "plot"):
        sub.add_parser(name, help=COMMANDS[name], add_help=False)

    p = sub.add_parser("demo", help=COMMANDS["demo"])
    p.add_argument("--output", default="demo_out")
    p.add_argument("--steps", type=int, default=300, help="training steps of the tiny model")
    return parser


def _add_mask_no_seed(p: argparse.ArgumentParser) -> None:
    """The masking flags for `prepare`, whose --seed is shared with pairing."""
    scratch = argparse.ArgumentParser(add_help=False)
    _add_mask(scratch)
    for action in scratch._actions:
        if "--seed" not in action.option_strings:
            p._add_action(action)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Commands owned by other modules parse their own flags.
    if argv and argv[0] in ("vocab", "train", "export-hf", "plot"):
        _quiet_logging("-v" in argv)
        if argv[0] == "vocab":
            from pipeline import vocab
            from pipeline.manifest import ManifestError
            try:
                return vocab.main(argv[1:])
            except ManifestError as e:
                raise SystemExit(f"bertprep vocab: {e}") from None
        if argv[0] == "train":
            from model import train
            return train.main(argv[1:])
        if argv[0] == "export-hf":
            from model import export_hf
            return export_hf.main(argv[1:])
        from model import plot
        return plot.main(argv[1:])

    parser = build_parser()
    args, beam_args = parser.parse_known_args(argv)
    if args.command not in BEAM_COMMANDS and beam_args:
        parser.error(f"unrecognized arguments: {' '.join(beam_args)}")
    _quiet_logging(getattr(args, "verbose", False))

    if args.command == "verify":
        from pipeline import verify
        return verify.main(args)
    if args.command == "demo":
        from pipeline import demo
        return demo.main(args)

    from pipeline.manifest import ManifestError
    try:
        if args.command == "inspect":
            from pipeline import inspection
            return inspection.main(args)
        from pipeline import options, run
        opts = options.pipeline_options(args.preset, beam_args, gcs_bucket=args.gcs_bucket)
        stage = {"extract": run.extract, "pairs": run.make_pairs, "mask": run.mask, "prepare": run.prepare}
        if options.is_dry_run(opts) and args.overwrite:
            parser.error("--overwrite with --dry_run would delete the old output for a job that never runs")
        if options.is_dataflow(opts) and not options.is_dry_run(opts):
            keys = ("input", "output") + (("vocab",) if args.command in ("pairs", "prepare") else ())
            local = [f"--{k}" for k in keys if any("://" not in s for s in getattr(args, k).split(","))]
            if local:
                parser.error(f"Dataflow workers cannot read local paths: give gs:// paths for {', '.join(local)}")
        try:
            stage[args.command](args, opts)
        except run.DryRun as e:   # translated and staged for Dataflow, nothing ran: nothing was written
            print(e, file=sys.stderr)
            return 0
    except ManifestError as e:   # a missing or mismatched input: the message says what to do, no traceback
        raise SystemExit(f"bertprep {args.command}: {e}") from None
    print(f"wrote {args.output}/manifest.json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
