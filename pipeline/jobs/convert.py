"""`bertprep convert`: masked shards (google's layout or packed, any objective) or pair records -> Parquet for
Hugging Face `datasets` / `transformers`, or MDS for MosaicML streaming / ModernBERT (pipeline/formats/columns.py).

    ListFiles | SpreadFiles | ConvertFile | Publish (index.json, README.md, manifest.json)

One output file per input file (MDS: one or more shards of --mds-shard-mb), rows in the input's order. A validation
set the input carries (OUTPUT/validation/ of `prepare`, `mask`, `pack`) is converted too, beside it.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import apache_beam as beam

from pipeline.algorithms import masking
from pipeline.beam import convert, sizing
from pipeline.beam import split as splitting
from pipeline.beam.publish import Output, Publication, Publish
from pipeline.formats import columns as cols
from pipeline.formats import heldout, manifest, mds, parquet, schema, storage
from pipeline.jobs import inputs, launch, outputs, settings
from pipeline.jobs.errors import Refused
from pipeline.text import tokenization

FORMATS = {"parquet": manifest.PARQUET, "mds": manifest.MDS}


@dataclass(frozen=True)
class Plan:
    """Everything `convert` does, decided before it runs; what the input holds comes from its manifest, or for
    google's own shards from `made_with`."""
    run: settings.Running
    input: str
    format: str                                   # parquet | mds
    hf_dataset_card: bool = False
    mds_shard_mb: float = float(mds.DEFAULT_SHARD_MB)
    made_with: settings.MadeWith = settings.MadeWith()


@dataclass(frozen=True)
class Side:
    """One output of the job (the training set, or the validation set beside it): its manifest, how its files
    convert, what it reads, its counters' namespace."""
    job: Publication
    conversion: convert.Conversion
    opened: manifest.Opened
    namespace: str


def run(plan: Plan, options) -> dict | None:
    made = inputs.open_made(plan.input, (manifest.SHARDS, manifest.PAIRS), plan.made_with)
    sides = [side(plan, made, plan.run.output, "train", made.carried and (made.carried[1], "training"))]
    if made.carried:
        held = inputs.open_made(made.carried[0], (made.opened.format,), settings.MadeWith(),
                                 what="its validation set", carry=False)
        sides.insert(0, side(plan, held, storage.join(plan.run.output, heldout.SUBDIRECTORY), "validation",
                             (made.carried[1], "validation")))
    size = sum(sizing.local_sizes(made.opened.files).values())
    launch.choose_workers(options, sizing.pair_tokens(size) if made.opened.format == manifest.PAIRS
                          else sizing.shard_tokens(size))
    launch.prepare_output(plan.run, options)

    p = beam.Pipeline(options=options)
    stats = tuple(p | f"{'Validation' if s.namespace.endswith('validation') else ''}ConvertFiles" >>
                  convert.ConvertFiles(s.job.out.directory, s.opened.files, s.conversion, s.namespace) for s in sides)
    if made.carried:   # the list of the validation set's documents goes with it
        p | "CopyValidationList" >> splitting.CopyHeldOutList(
            [storage.join(d, heldout.NAME) for d in made.carried[0].split(",")], sides[0].job.out.directory)
    stats | "Publish" >> Publish(*(s.job for s in sides))
    training, c = sides[-1].job, sides[-1].conversion
    records = sum(made.opened.records.values())
    basis = f"{records:,} records" if records else f"{training.out.estimated_bytes / 1e6:,.1f} MB of input"
    what = f"convert: {manifest.KIND[made.opened.format]} -> {plan.format} ({c.kind} rows, objective " \
           f"{c.objective}, input_ids {cols.ids_dtype(c.vocab_size).name})"
    return launch.run_job("convert", p, training, None, basis, plan.run, notes=(what,))


def side(plan: Plan, made: inputs.Input, directory: str, prefix: str, split: tuple[dict, str] | None) -> Side:
    """The output converting `made`'s files into `directory` (Parquet files named `prefix`-...), and how."""
    m, opened = made.made, made.opened
    kind, shape, vocab, objective = _source(plan, made)
    ids = vocab.get("ids") or {}
    c = convert.Conversion(kind, objective, int(vocab["size"]), int(ids.get("cls_id", 101)),
                           int(ids.get("sep_id", 102)), shape, plan.format, prefix, len(opened.files),
                           int(plan.mds_shard_mb * (1 << 20)))
    size = sum(sizing.local_sizes(opened.files).values())
    fmt = FORMATS[plan.format]
    out = Output(directory, prefix if plan.format == "parquet" else "shard", len(opened.files),
                 manifest.EXTENSION[fmt], size, plan.input)
    namespace = "convert_validation" if split and split[1] == "validation" else "convert"
    head = {"format": fmt, "stage": "convert", "objective": objective, "vocab": vocab,
            "max_seq_length": shape.max_seq_length,
            "columns": {name: dtype.name for name, dtype in c.columns.items()} if plan.format == "parquet"
            else dict(zip(c.mds_columns.names, c.mds_columns.encodings)),
            "parameters": {"format": plan.format, **({"mds_shard_mb": plan.mds_shard_mb} if plan.format == "mds"
                                                     else {"row_group_bytes": parquet.ROW_GROUP_BYTES,
                                                           "compression": parquet.COMPRESSION})},
            "source": {"kind": kind, "path": plan.input, "format": opened.format,
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
    finish = functools.partial(_finish, plan.format, plan.hf_dataset_card and not held,
                               storage.join(directory, heldout.SUBDIRECTORY) if split and not held else None)
    job = Publication(out, describe, checks=(functools.partial(_rows_lost, namespace, expected),),
                      side_files=(heldout.NAME,) if held else (), finish=finish,
                      why_empty=lambda counts: "the input holds no records")
    return Side(job, c, opened, namespace)


def _source(plan: Plan, made: inputs.Input) -> tuple[str, schema.Shape, dict, str]:
    """(columns kind, the input's record shape, its vocab entry, objective) from its manifest, or for google's own
    shards from --max-seq-length, --max-predictions-per-seq and --vocab."""
    m, given = made.made, plan.made_with
    if m is None:
        return cols.MASKED, made.shape, made.vocab, made.objective
    for flag, value in given.lengths():
        if value:
            raise Refused(f"{flag}: {plan.input} has a {manifest.NAME}, which says what its records hold")
    inputs.check_vocab(given.vocab, m, plan.input)
    if made.opened.format == manifest.PAIRS and manifest.packed(m):
        raise Refused(f"{plan.input} holds packed pair records, which convert does not export: convert the pairs "
                      "they were packed from")
    vocab = m["vocab"]
    if "ids" not in vocab and given.vocab:
        vocab = {**vocab, "ids": masking.VocabIds.from_vocab(tokenization.read_vocab(given.vocab)).to_json()}
    kind = cols.PAIRS if made.opened.format == manifest.PAIRS else cols.PACKED if made.shape.packed else cols.MASKED
    return kind, made.shape, vocab, made.objective


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
