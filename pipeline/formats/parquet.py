"""Parquet files of exported columns (pipeline/formats/columns.py), as Hugging Face `datasets` reads them, and the
dataset card that lets the directory be pushed to a hub as it is.

A file is one Arrow table of the conversion's columns: every array column a list of its value type (uint16 ids,
int32 labels, ...), a label a row an int8. zstd compressed (padding and 0/1 columns shrink to almost nothing),
row groups of about ROW_GROUP_BYTES of uncompressed rows: `datasets` in streaming mode and other readers read a row
group at a time, so memory stays at one row group. The bytes depend only on the rows and pyarrow's version (no
time, no path is written).
"""
from __future__ import annotations

import os
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.formats import columns as cols

ROW_GROUP_BYTES = 16 << 20    # uncompressed rows a row group holds, about: 16k rows of L=128, 4k of L=512
COMPRESSION = "zstd"


def arrow_schema(wanted: dict[str, np.dtype], kind: str) -> pa.Schema:
    fields = []
    for name, dtype in wanted.items():
        value = pa.from_numpy_dtype(dtype)
        fields.append(pa.field(name, value if cols.scalar(kind, name) else pa.list_(value), nullable=False))
    return pa.schema(fields)


def table(batch: dict, schema: pa.Schema, kind: str) -> pa.Table:
    """A batch of columns -> an Arrow table of `schema`; (B, L) arrays become lists of L, Ragged rows lists."""
    arrays = []
    for f in schema:
        value = batch[f.name]
        if cols.scalar(kind, f.name):
            arrays.append(pa.array(value, f.type))
            continue
        if isinstance(value, cols.Ragged):
            flat, offsets = value.values, value.offsets
        else:
            flat = value.reshape(-1)
            offsets = np.arange(len(value) + 1, dtype=np.int64) * value.shape[1]
        arrays.append(pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(flat, f.type.value_type)))
    return pa.Table.from_arrays(arrays, schema=schema)


class _Stream:
    """A writable file as pyarrow wants one (write, tell, flush, closed); counts the bytes written through it."""

    def __init__(self, f):
        self.f, self.bytes, self.closed = f, 0, False

    def write(self, data) -> int:
        data = bytes(data)
        self.bytes += len(data)
        self.f.write(data)
        return len(data)

    def tell(self) -> int:
        return self.bytes

    def flush(self) -> None:
        self.f.flush()

    def close(self) -> None:   # the caller closes the file itself
        self.closed = True


class Writer:
    """Rows appended in batches -> one Parquet file in `f`, a row group each time ROW_GROUP_BYTES have gathered."""

    def __init__(self, f, wanted: dict[str, np.dtype], kind: str, row_bytes: int):
        self.kind, self.schema = kind, arrow_schema(wanted, kind)
        self.stream = _Stream(f)
        self.writer = pq.ParquetWriter(self.stream, self.schema, compression=COMPRESSION)
        self.group_rows = max(1, ROW_GROUP_BYTES // max(1, row_bytes))
        self.pending: list[pa.Table] = []
        self.rows = self.pending_rows = 0

    def add(self, batch: dict) -> None:
        t = table(batch, self.schema, self.kind)
        self.pending.append(t)
        self.pending_rows += t.num_rows
        self.rows += t.num_rows
        if self.pending_rows >= self.group_rows:
            self._flush(self.group_rows)

    def _flush(self, rows: int) -> None:
        whole = pa.concat_tables(self.pending)
        self.writer.write_table(whole.slice(0, rows), row_group_size=rows)
        rest = whole.slice(rows)
        self.pending, self.pending_rows = ([rest] if rest.num_rows else []), rest.num_rows

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, kind, error, trace) -> None:
        if error is not None:   # the file is abandoned: close pyarrow's writer now, not in its __del__ (which
            try:                # would print a traceback once the file under it is closed)
                self.writer.close()
            except Exception:
                pass

    def close(self) -> int:
        """Writes what is left and the footer; returns the file's bytes."""
        while self.pending_rows:
            self._flush(min(self.pending_rows, self.group_rows))
        self.writer.close()
        return self.stream.bytes


def read(f, kind: str, batch_rows: int = 1024) -> Iterator[dict]:
    """A Parquet file of exported columns (a path or a seekable file) -> batches of columns as `table` takes them:
    (B, L) arrays where every row has one length, Ragged rows otherwise, a label a row as (B,)."""
    parquet = pq.ParquetFile(f)
    for record_batch in parquet.iter_batches(batch_size=batch_rows):
        yield batch_of(record_batch, kind)


def batch_of(record_batch: pa.RecordBatch, kind: str) -> dict:
    out = {}
    for name, column in zip(record_batch.schema.names, record_batch.columns):
        if not pa.types.is_list(column.type) and not pa.types.is_large_list(column.type):
            out[name] = column.to_numpy(zero_copy_only=False)
            continue
        offsets = column.offsets.to_numpy().astype(np.int64)
        values = column.values.to_numpy(zero_copy_only=False)[offsets[0]:offsets[-1]]
        offsets -= offsets[0]
        lengths = np.diff(offsets)
        if cols.ragged(kind, name) or len(set(lengths.tolist())) > 1:
            out[name] = cols.Ragged(values, offsets)
        else:
            out[name] = values.reshape(len(lengths), -1)
    return out


def file_schema(f) -> pa.Schema:
    return pq.read_schema(f)


# ---------------------------------------------------------------------------------------------------- dataset card

_MEANING = {
    "input_ids": "token ids ([CLS] A [SEP] B [SEP]); masked exports: with [MASK], random and kept tokens in place",
    "token_type_ids": "segment ids: 0 for [CLS] A [SEP], 1 for B [SEP]",
    "attention_mask": "1 on real tokens, 0 on padding",
    "labels": "-100 except at masked positions, which hold the original id (BertForMaskedLM / BertForPreTraining)",
    "next_sentence_label": "nsp: 1 = B is a random segment; sop: 1 = A and B swapped (packed rows: one per "
                           "instance)",
    "position_ids": "0 at each instance's [CLS], counting up inside it (DataCollatorWithFlattening's convention)",
    "sequence_index": "1-based index of the instance a position belongs to, 0 for padding",
    "special_tokens_mask": "1 on [CLS] and [SEP] (DataCollatorForLanguageModeling never masks them)",
}


def dataset_card(m: dict, validation: dict | None) -> str:
    """README.md for a Parquet export `m` (its manifest; `validation`: its validation set's, if any): the YAML
    `configs` that make `datasets.load_dataset(DIR)` find its splits, the features, the counts and the bertprep
    parameters the data was made with."""
    splits = [("train", "train-*.parquet", m)]
    if validation:
        splits.append(("validation", "validation/validation-*.parquet", validation))
    lines = ["---", "configs:", "- config_name: default", "  data_files:"]
    for split, path, _ in splits:
        lines += [f"  - split: {split}", f"    path: \"{path}\""]
    lines += ["tags:", "- bertprep", "- bert", "- masked-language-modeling", "---", "",
              f"# BERT pretraining data ({m['source']['kind']} rows, objective {m['objective']})", "",
              f"Made by {m.get('created_by', 'bertprep')} (`bertprep convert --format parquet`) from "
              f"`{_name(m['source']['path'])}`. Load it with `datasets.load_dataset(\"parquet\", data_files=...)` or "
              "`datasets.load_dataset(DIR)`.", "",
              "| split | rows | files |", "|---|---:|---:|"]
    for split, _, sm in splits:
        lines.append(f"| {split} | {sm['counts']['rows']:,} | {len(sm['files'])} |")
    lines += ["", "## Features", "", "| column | type | meaning |", "|---|---|---|"]
    for name, dtype in m["columns"].items():
        lines.append(f"| `{name}` | {dtype} | {_MEANING.get(name, '')} |")
    source = m["source"]
    lines += ["", "## How it was made", "",
              f"- vocab: `{_name(m['vocab'].get('path'))}` ({m['vocab'].get('size'):,} ids, sha256 "
              f"`{m['vocab'].get('sha256')}`, lowercase {m['vocab'].get('lowercase')})",
              f"- max_seq_length {m['max_seq_length']}"]
    if source.get("parameters"):
        lines.append(f"- parameters of the stage that made the source (`{source.get('stage')}`): "
                     + ", ".join(f"`{k}={v}`" for k, v in sorted(source["parameters"].items())))
    if source.get("counts"):
        counts = {k: v for k, v in source["counts"].items() if not isinstance(v, (dict, list))}
        lines.append("- source counts: " + ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}"
                                                     for k, v in counts.items()))
    lines += ["", "The licence of the corpora it was made from applies to this data.", ""]
    return "\n".join(lines)


def _name(path: str | None) -> str | None:
    """A file's or directory's name without where it lay: a card is published, its machine's paths are not."""
    return path and os.path.basename(path.rstrip("/"))
