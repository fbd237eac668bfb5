"""`bertprep convert`: masked shards (google's layout or packed, any objective) or pair records -> Parquet for
Hugging Face `datasets` / `transformers`, or MDS for MosaicML streaming / ModernBERT (pipeline/formats/columns.py).

    ListFiles | SpreadFiles | ConvertFile | Publish (index.json, README.md, manifest.json)

One output file per input file (MDS: one or more shards of --mds-shard-mb), rows in the input's order. A validation
set the input carries (OUTPUT/validation/ of `prepare`, `mask`, `pack`) is converted too, beside it.
"""
from __future__ import annotations

import functools

import apache_beam as beam

from pipeline.algorithms import masking
from pipeline.beam import convert, sizing
from pipeline.beam import split as splitting
from pipeline.beam.publish import Output, Publication, Publish
from pipeline.formats import columns as cols
from pipeline.formats import heldout, manifest, mds, parquet, schema, storage
from pipeline.jobs import launch, outputs, sources
from pipeline.text import tokenization

FORMATS = {"parquet": manifest.PARQUET, "mds": manifest.MDS}


def run(args, options) -> dict:
    google = bool(args.max_seq_length or args.max_predictions_per_seq or args.vocab)
    opened = manifest.open_output(args.input, (manifest.SHARDS, manifest.PAIRS), foreign=google,
                                  advice="for shards made by google's tool pass --max-seq-length, "
                                         "--max-predictions-per-seq and --vocab")
    carried = sources.held_out_input(opened, args.input) if opened.manifest is not None else None
    job, c = plan(args, opened, args.output, "train", carried and (carried[1], "training"))
    outputs_ = [(job, c, opened, "convert")]
    if carried:
        held = manifest.open_output(carried[0], (opened.format,), what="its validation set")
        held_job, held_c = plan(args, held, storage.join(args.output, heldout.SUBDIRECTORY), "validation",
                                (carried[1], "validation"))
        outputs_.insert(0, (held_job, held_c, held, "convert_validation"))
    launch.prepare_output(args, options)

    p = beam.Pipeline(options=options)
    stats = tuple(p | f"{'Validation' if ns.endswith('validation') else ''}ConvertFiles" >> convert.ConvertFiles(
        out.out.directory, o.files, conv, ns) for out, conv, o, ns in outputs_)
    if carried:   # the list of the validation set's documents goes with it
        p | "CopyValidationList" >> splitting.CopyHeldOutList(
            [storage.join(d, heldout.NAME) for d in carried[0].split(",")], outputs_[0][0].out.directory)
    stats | "Publish" >> Publish(*(out for out, _, _, _ in outputs_))
    records = sum(opened.records.values())
    basis = f"{records:,} records" if records else f"{job.out.estimated_bytes / 1e6:,.1f} MB of input"
    what = f"convert: {manifest.KIND[opened.format]} -> {args.format} ({c.kind} rows, objective {c.objective}, " \
           f"input_ids {cols.ids_dtype(c.vocab_size).name})"
    return launch.run_job("convert", p, job, None, basis, args, notes=(what,))


def plan(args, opened: manifest.Opened, directory: str, prefix: str,
         split: tuple[dict, str] | None) -> tuple[Publication, convert.Conversion]:
    """The output converting `opened`'s files into `directory` (Parquet files named `prefix`-...), and how."""
    m = opened.manifest
    kind, shape, vocab, objective = _source(args, opened)
    ids = vocab.get("ids") or {}
    c = convert.Conversion(kind, objective, int(vocab["size"]), int(ids.get("cls_id", 101)),
                           int(ids.get("sep_id", 102)), shape, args.format, prefix, len(opened.files),
                           int(args.mds_shard_mb * (1 << 20)))
    size = sum(sizing.local_sizes(opened.files).values())
    fmt = FORMATS[args.format]
    out = Output(directory, prefix if args.format == "parquet" else "shard", len(opened.files),
                 manifest.EXTENSION[fmt], size, args.input)
    namespace = "convert_validation" if split and split[1] == "validation" else "convert"
    head = {"format": fmt, "stage": "convert", "objective": objective, "vocab": vocab,
            "max_seq_length": shape.max_seq_length,
            "columns": {name: dtype.name for name, dtype in c.columns.items()} if args.format == "parquet"
            else dict(zip(c.mds_columns.names, c.mds_columns.encodings)),
            "parameters": {"format": args.format, **({"mds_shard_mb": args.mds_shard_mb} if args.format == "mds"
                                                     else {"row_group_bytes": parquet.ROW_GROUP_BYTES,
                                                           "compression": parquet.COMPRESSION})},
            "source": {"kind": kind, "path": args.input, "format": opened.format,
                       "stage": (m or {}).get("stage"), "parameters": (m or {}).get("parameters", {}),
                       "counts": {k: v for k, v in ((m or {}).get("counts") or {}).items() if k != "counters"},
                       **({"packing": m["packing"]} if m and m.get("packing") else {}),
                       **({"max_predictions_per_seq": int((m or {}).get("max_predictions_per_seq")
                                                          or shape.max_predictions_per_seq)}
                          if kind != cols.PAIRS else {})}}
    expected = sum(opened.records.values()) if len(opened.records) == len(opened.files) else None
    describe = functools.partial(_describe, head, namespace, opened.inputs)
    if split:
        describe = outputs.with_split(describe, *split)
    held = bool(split) and split[1] == "validation"
    finish = functools.partial(_finish, args.format, bool(args.hf_dataset_card) and not held,
                               storage.join(directory, heldout.SUBDIRECTORY) if split and not held else None)
    job = Publication(out, describe, checks=(functools.partial(_rows_lost, namespace, expected),),
                      side_files=(heldout.NAME,) if held else (), finish=finish,
                      why_empty=lambda counts: "the input holds no records")
    return job, c


def _source(args, opened: manifest.Opened) -> tuple[str, schema.Shape, dict, str]:
    """(columns kind, the input's record shape, its vocab entry, objective) from its manifest, or for google's own
    shards from --max-seq-length, --max-predictions-per-seq and --vocab."""
    m = opened.manifest
    given = (("--max-seq-length", args.max_seq_length), ("--max-predictions-per-seq", args.max_predictions_per_seq))
    if m is None:
        missing = [flag for flag, value in given if not value] + ([] if args.vocab else ["--vocab"])
        if missing:
            raise SystemExit(f"{args.input} has no {manifest.NAME} (shards made by google's tool?): pass "
                             f"{', '.join(missing)} to say what they were made with")
        vocab = sources.vocab_entry(args.vocab, lowercase=None)
        return cols.MASKED, schema.Shape(args.max_seq_length, args.max_predictions_per_seq), vocab, "nsp"
    for flag, value in given:
        if value:
            raise SystemExit(f"{flag}: {args.input} has a {manifest.NAME}, which says what its records hold")
    if args.vocab and tokenization.vocab_sha256(args.vocab) != m["vocab"]["sha256"]:
        raise SystemExit(f"--vocab {args.vocab} is not the vocabulary {args.input} was made with")
    vocab = m["vocab"]
    if "ids" not in vocab and args.vocab:
        vocab = {**vocab, "ids": masking.VocabIds.from_vocab(tokenization.read_vocab(args.vocab)).to_json()}
    objective = manifest.objective(m)
    if opened.format == manifest.PAIRS:
        return cols.PAIRS, schema.Shape(int(m["max_seq_length"]), 0), vocab, objective
    shape = manifest.shard_shape(m)
    return (cols.PACKED if shape.packed else cols.MASKED), shape, vocab, objective


def _describe(head: dict, namespace: str, inputs: list[dict], files: list[dict], counts: dict) -> dict:
    rows = sum(f["records"] for f in files)
    tokens = counts.get(f"{namespace}/tokens", 0)
    out = {**head, "counts": {"rows": rows, "tokens": tokens}, "files": files, "inputs": inputs}
    if "labels" in head["columns"]:
        out["counts"]["masked_tokens"] = counts.get(f"{namespace}/masked_tokens", 0)
    out["counts"]["counters"] = counts
    return out


def _rows_lost(namespace: str, expected: int | None, counts: dict) -> list[str]:
    """Every record of the input became a row (where its manifests say how many it holds)."""
    rows = counts.get(f"{namespace}/rows", 0)
    if expected is not None and rows != expected:
        return [f"{rows:,} rows written from {expected:,} input records"]
    return []


def _finish(fmt: str, card: bool, validation: str | None, m: dict, written: list[dict]) -> dict[str, bytes]:
    """The files made from the whole output: MDS's index.json; with --hf-dataset-card, Parquet's README.md."""
    if fmt == "mds":
        return {mds.INDEX: mds.index([entry for w in written for entry in w["mds"]])}
    if card:
        held = manifest.read(validation) if validation and storage.exists(manifest.path_in(validation)) else None
        return {"README.md": parquet.dataset_card(m, held).encode()}
    return {}
