"""Beam wrapper of `bertprep convert`: each input file (masked shards or pair records) -> its rows in another format,
one output file per input file (Parquet), or one or more (MDS shards of at most --mds-shard-mb), in parallel.

    (index, path) | SpreadFiles | ConvertFile -> stats of each input file's output (Publish takes them)

The rows keep the input's order, file by file, so no shuffle is needed: the same input gives the same bytes on any
runner and worker count. Files are written under `.incomplete/` and published by the job's last step
(pipeline/beam/publish.py) with the MDS index and the dataset card.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.beam import shards, tally
from pipeline.formats import columns as cols
from pipeline.formats import mds, pair_records, parquet, schema, tfrecord

BATCH = 1024   # records read, decoded and converted together

PARQUET, MDS = "parquet", "mds"


@dataclass(frozen=True)
class Conversion:
    """What one output of a conversion reads and writes."""
    kind: str                  # columns.MASKED | PACKED | PAIRS
    objective: str
    vocab_size: int
    cls_id: int
    sep_id: int
    shape: schema.Shape        # of the input shards (pairs: max_seq_length only)
    format: str                # PARQUET | MDS
    prefix: str                # Parquet files' name: "train" or "validation"
    num_files: int             # input files (Parquet names say "of N")
    mds_size_limit: int = mds.DEFAULT_SHARD_MB << 20

    @property
    def columns(self) -> dict[str, np.dtype]:
        return cols.columns(self.kind, self.objective, self.vocab_size)

    @property
    def mds_columns(self) -> mds.Columns:
        """MDS rows: the columns cut to the real tokens (so no attention_mask), a label a row as an int, and len."""
        types = {name: None if cols.scalar(self.kind, name) else dtype
                 for name, dtype in self.columns.items() if name != "attention_mask"}
        return mds.Columns.of({**types, "len": None})

    def parquet_name(self, index: int) -> str:
        return shards.shard_name(self.prefix, index, self.num_files, ".parquet")

    @staticmethod
    def mds_name(index: int, piece: int) -> str:
        return f"shard.{index:05d}-{piece:03d}.mds"

    @property
    def row_bytes(self) -> int:
        """Uncompressed bytes of a row, about (sizes Parquet's row groups)."""
        return sum(dtype.itemsize for dtype in self.columns.values()) * self.shape.max_seq_length


def batches(path: str, c: Conversion):
    """One input file -> batches of its rows' columns, in the file's order. A record that does not fit the input's
    layout fails the job naming the file and the record."""
    records = tfrecord.read_file(path)
    index = 0
    while batch := list(itertools.islice(records, BATCH)):
        try:
            if c.kind == cols.PAIRS:
                yield cols.from_pairs([pair_records.decode(r) for r in batch], c.objective, c.vocab_size, c.cls_id,
                                      c.sep_id)
            else:
                arrays = schema.decode_plain(batch, c.shape)
                if arrays is None:   # not the plain encoding: record by record, which words what is wrong
                    decoded = []
                    for i, record in enumerate(batch):
                        try:
                            decoded.append(schema.decode(record, c.shape))
                        except ValueError as e:
                            raise ValueError(f"record {index + i}: {e}") from None
                    arrays = {f: np.stack([d[f] for d in decoded]) for f in c.shape.features}
                    if not c.shape.packed:
                        arrays["next_sentence_labels"] = arrays["next_sentence_labels"].reshape(-1)
                convert = cols.from_packed if c.kind == cols.PACKED else cols.from_shards
                yield convert(arrays, c.objective, c.vocab_size)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None
        index += len(batch)


def mds_rows(batch: dict, c: Conversion, columns: mds.Columns) -> dict:
    """A batch of columns -> MDS's (mds.encode_batch): every array column cut to the rows' real tokens, as
    (values, offsets), and `len`."""
    lengths = cols.real_lengths(c.kind, batch)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    out = {"len": lengths}
    for name in columns.names:
        if name == "len":
            continue
        value = batch[name]
        if isinstance(value, cols.Ragged):
            out[name] = (value.values, value.offsets)
        elif value.ndim == 1:
            out[name] = value
        else:   # (B, L), row-major: the real tokens of each row, rows one after another
            out[name] = (value[np.arange(value.shape[1]) < lengths[:, None]], offsets)
    return out


class _ConvertFile(tally.DoFn):
    def __init__(self, directory: str, c: Conversion, namespace: str):
        self.directory, self.c, self.namespace = directory, c, namespace

    def process(self, unit: tuple[int, str]):
        index, path = unit
        c = self.c
        rows = tokens = masked = 0
        parts, entries = [], []

        def create(name: str):
            return FileSystems.create(FileSystems.join(self.directory, shards.INCOMPLETE, name),
                                      compression_type=CompressionTypes.UNCOMPRESSED)   # a retry rewrites them

        def counted(batch: dict) -> dict:
            nonlocal rows, tokens, masked
            n = len(batch["input_ids"])
            rows += n
            tokens += int(cols.real_lengths(c.kind, batch).sum())
            if "labels" in batch:
                masked += int((batch["labels"] != cols.IGNORE).sum())
            return batch

        if c.format == PARQUET:
            name = c.parquet_name(index)
            with create(name) as f, parquet.Writer(f, c.columns, c.kind, c.row_bytes) as writer:
                for batch in batches(path, c):
                    writer.add(counted(batch))
                size = writer.close()
            parts.append({"file": name, "records": writer.rows, "bytes": size})
        else:
            columns = c.mds_columns
            builder = mds.ShardBuilder(columns, c.mds_size_limit)

            def write(done) -> None:
                data, n = done
                name = c.mds_name(index, len(parts))
                with create(name) as f:
                    f.write(data)
                parts.append({"file": name, "records": n, "bytes": len(data)})
                entries.append(mds.index_entry(columns, c.mds_size_limit, name, len(data), n))

            for batch in batches(path, c):
                for sample in mds.encode_batch(columns, mds_rows(counted(batch), c, columns)):
                    done = builder.add(sample)
                    if done:
                        write(done)
            done = builder.finish()
            if done:
                write(done)
        for name, n in (("files", 1), ("rows", rows), ("tokens", tokens), ("masked_tokens", masked)):
            self.count(self.namespace, name, n)
        yield {"shard": index, "file": parts[0]["file"] if parts else "", "records": rows,
               "bytes": sum(p["bytes"] for p in parts), "parts": parts, "mds": entries, "source": path}


class ConvertFiles(beam.PTransform):
    """Input files, in order -> one stats dict per file: {"shard": its index, "records", "bytes", "parts": the files
    written for it [{"file", "records", "bytes"}], "mds": their index entries (MDS), "source"}; counted under
    `namespace` (an output's own: a validation set beside its training set counts apart)."""

    def __init__(self, directory: str, files: list[str], conversion: Conversion, namespace: str = "convert"):
        super().__init__()
        self.directory, self.files, self.c, self.namespace = directory, list(files), conversion, namespace

    def expand(self, pipeline):
        return (pipeline
                | "ListFiles" >> beam.Create(list(enumerate(self.files)))
                | "SpreadFiles" >> beam.Reshuffle()
                | "ConvertFile" >> tally.ParDo(_ConvertFile(self.directory, self.c, self.namespace)))
