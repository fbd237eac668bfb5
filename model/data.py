"""The shard reader: masked-LM TFRecord shards (pipeline/formats/schema.py) -> batches of fixed-shape torch
tensors, in either of the schema's layouts: google's (one instance a row) or packed (up to k a row), as the
manifest says; files without a manifest (google's) are google's layout.

No tensorflow and no Beam: files are opened with plain `open`, framed and CRC-checked by pipeline.formats.tfrecord
(a damaged byte raises CorruptRecordError naming the file and the record), and decoded a batch at a time by the
schema's vectorised reader (pipeline.formats.schema.decode_plain, ~10x the generic decoder). A batch it does not
recognise goes through the generic pipeline.formats.schema.decode record by record, which also words the error
when a record does not fit the schema.

Order: the file list is shuffled per epoch with a seeded generator (same on every rank), split across DDP ranks and
DataLoader workers, and each worker runs a seeded shuffle buffer. `Loader` turns that into an endless stream of
batches and records exactly which batches were consumed, so a resumed run continues with the very next batch.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import signal
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from pipeline.algorithms import masking, packing
from pipeline.formats import example_proto, heldout, manifest, pair_records, schema, tfrecord
from pipeline.text import vocabularies

MANIFEST, SHARDS_FORMAT = manifest.NAME, manifest.SHARDS


class ShardSpecError(ValueError):
    """The shards do not fit what the caller asked for (missing manifest, other lengths or vocab)."""


class BadRecordError(ValueError):
    """A record framed correctly (CRC fine) but not in the schema: a feature missing, too long, out of range."""


# ----------------------------------------------------------------------------------------------------------------
# Finding the shards and checking them against the manifest

@dataclass
class ShardSet:
    files: list[str]             # in sorted order; the loader shuffles per epoch
    shape: schema.Shape
    vocab_size: int | None       # from the manifest; None for google-made shards
    records: dict[str, int]      # file -> records, where a manifest says so
    objective: str = "nsp"       # manifest.OBJECTIVES: nsp | sop | none (MLM only); google-made shards are nsp
    vocab: dict | None = None    # the manifest's vocab entry (path, sha256, size, lowercase, ids); None: google's
    validation: str | None = None   # the validation set the output was made with (DIR/validation), if any
    fingerprint: dict | None = None  # manifest.fingerprint: what a checkpoint resumes on


def open_shards(pattern: str, vocab_size: int | None = None, max_seq_length: int | None = None,
                max_predictions_per_seq: int | None = None, allow_incomplete: bool = False, what: str = "--data",
                lengths_from: str | None = None) -> ShardSet:
    """The shard files of a directory, glob or comma list (manifest.open_output), checked against their manifests.

    Every manifest must be a shards manifest whose vocab size and lengths equal the ones given (for packed shards
    too, the lengths are those of the instances: L and P); the record shape, google's layout or the packed one,
    comes from the manifest, and so does the objective (manifest.open_output refuses directories of different
    ones). Files without a manifest are refused, unless both lengths are given (google-made shards: google's
    layout, NSP) or allow_incomplete (the shape, either layout, read from the first record); packed shards are never
    read together with files that have none.

    `what` is the flag that named `pattern`. `lengths_from` names where the lengths come from when the user did not
    pass them (the training shards, "--data", for held-out ones): a mismatch then names both data sets, not flags
    never passed.
    """
    google = max_seq_length is not None and max_predictions_per_seq is not None
    if (google or allow_incomplete) and os.path.isdir(pattern) and not os.path.exists(os.path.join(pattern, MANIFEST)):
        pattern = os.path.join(pattern, "*.tfrecord")
    try:
        opened = manifest.open_output(pattern, (SHARDS_FORMAT,), allow_incomplete, what=what, foreign=google,
                                      advice="for shards made by google's tool pass --max-seq-length and "
                                             "--max-predictions-per-seq, or --allow-incomplete to read an unfinished "
                                             "output's files anyway")
    except manifest.ManifestError as e:
        if isinstance(e, manifest.WrongStage) and e.have == manifest.PAIRS:   # the trainer masks pairs itself
            if e.packed:
                raise ShardSpecError(f"{e.clause} (packed rows of them): train on it with --dynamic-masking (masked "
                                     "afresh each epoch); `bertprep mask` masks the unpacked pairs") from None
            raise ShardSpecError(f"{e.clause}: train on it with --dynamic-masking (masked afresh each epoch), or mask "
                                 "it first with `bertprep mask`") from None
        raise ShardSpecError(str(e)) from None
    m = opened.manifest
    if m is None:
        shape = (schema.Shape(max_seq_length, max_predictions_per_seq) if google
                 else _shape_of_first_record(opened.files[0]))
        return ShardSet(opened.files, shape, None, opened.records, fingerprint=manifest.fingerprint(opened))
    unlisted = [f for f in opened.files if f not in opened.records]
    if manifest.packed(m) and unlisted:
        raise ShardSpecError(f"{unlisted[0]} has no {MANIFEST} to say whether it is packed, and "
                             f"{next(iter(opened.manifests))} holds packed shards: they cannot be read as one input "
                             "(pack the other too, or give one at a time)")
    data_vocab = int(m["vocab"]["size"])
    if vocab_size is not None:
        check_vocab_size(vocabularies.of_entry(m["vocab"]), vocab_size, f"{pattern}: shards")
    lengths = (("--max-seq-length", "L", max_seq_length, int(m["max_seq_length"])),
               ("--max-predictions-per-seq", "P", max_predictions_per_seq, int(m["max_predictions_per_seq"])))
    for flag, symbol, given, have in lengths:
        if given is not None and given != have:
            if lengths_from:
                raise ShardSpecError(f"{what} {pattern} holds shards of {symbol}={have} and {lengths_from} "
                                     f"{symbol}={given}: give shards of the same lengths")
            raise ShardSpecError(f"{pattern}: {flag} {given} but the shards were made with {have}")
    return ShardSet(opened.files, manifest.shard_shape(m), data_vocab, opened.records, manifest.objective(m),
                    m["vocab"], validation_of(opened), manifest.fingerprint(opened))


def check_vocab_size(vocab: vocabularies.Vocabulary, vocab_size: int, what: str) -> None:
    """ShardSpecError where a model of `vocab_size` embedding rows cannot read data of `vocab` (a vocab.txt needs as
    many rows as it has tokens, a tokenizer.json at least as many: padded rows, model/bert.py). `what` starts the
    message: "DIR: shards", "pairs"."""
    refusal = vocab.rows_refusal(vocab_size, what)
    if refusal:
        raise ShardSpecError(refusal)


def token_rows(vocab: vocabularies.Vocabulary, vocab_size: int, what: str) -> int | None:
    """The model config's tokenizer_size for data of `vocab` in `vocab_size` embedding rows (None: every row is a
    token); ShardSpecError where the rows cannot hold its ids."""
    try:
        return vocab.token_rows(vocab_size, what)
    except vocabularies.VocabularyError as e:
        raise ShardSpecError(str(e)) from None


def validation_of(opened: manifest.Opened) -> str | None:
    """The validation set beside one training output (its manifest's `split`), where the data is one output."""
    if len(opened.manifests) != 1:
        return None
    return heldout.validation_directory(*next(iter(opened.manifests.items())))


def describe(shape: schema.Shape) -> str:
    """'packed shards (L=128, M=30, k=8)' or 'unpacked shards (L=128, P=20)': the words of a refusal and a log."""
    if shape.packed:
        return (f"packed shards (L={shape.max_seq_length}, M={shape.max_predictions_per_seq}, "
                f"k={shape.max_sequences_per_pack})")
    return f"unpacked shards (L={shape.max_seq_length}, P={shape.max_predictions_per_seq})"


def _shape_of_first_record(path: str) -> schema.Shape:
    with open(path, "rb") as f:
        for record in tfrecord.iter_records(f, name=path):
            parsed = example_proto.decode_example(record)
            k = len(parsed["next_sentence_positions"]) if "position_ids" in parsed else 0  # a packed row
            return schema.Shape(len(parsed["input_ids"]), len(parsed["masked_lm_positions"]), k)
    raise ShardSpecError(f"{path}: empty file, cannot tell the record shape")


# ----------------------------------------------------------------------------------------------------------------
# Decoding a batch of records

class BatchDecoder:
    """Turns a list of serialised records into the schema's arrays, in the layout of `shape`; records are
    (bytes, file, index) triples.

    The vectorised schema.decode_plain first; a batch it does not recognise goes through schema.decode record by
    record, whose error is raised naming the file and record. Ids and positions are range-checked either way.
    """

    def __init__(self, shape: schema.Shape, vocab_size: int | None = None):
        self.shape = shape
        self.vocab_size = vocab_size

    def __call__(self, items: list[tuple[bytes, str, int]], epoch: int = 0,
                 ordinal: int | None = None) -> dict[str, np.ndarray]:
        out = schema.decode_plain([rec for rec, _, _ in items], self.shape)
        if out is None:
            out = self._generic(items)
        self._check_ranges(out, items)
        return out

    def _generic(self, items):
        decoded = []
        for rec, path, index in items:
            try:
                decoded.append(schema.decode(rec, self.shape))
            except ValueError as e:
                raise BadRecordError(f"{path}: record {index}: {e}") from None
        out = {name: np.stack([d[name] for d in decoded]) for name in self.shape.features}
        if not self.shape.packed:  # google's [1] a record -> (B,), as decode_plain gives it
            out["next_sentence_labels"] = out["next_sentence_labels"].reshape(len(items))
        return out

    def _check_ranges(self, out, items):
        """Ids the embedding cannot look up, or positions past the sequence, fail here with their record."""
        L = self.shape.max_seq_length
        limits = {"masked_lm_positions": L}
        if self.shape.packed:  # gathered at (next_sentence_positions), looked up (position_ids < L <= the table)
            limits.update(next_sentence_positions=L, position_ids=L)
        if self.vocab_size is not None:
            limits.update(input_ids=self.vocab_size, masked_lm_ids=self.vocab_size)
        for name, limit in limits.items():
            values = out[name]
            if values.size and (values.min() < 0 or values.max() >= limit):
                row = int(np.flatnonzero(((values < 0) | (values >= limit)).any(axis=1))[0])
                _, path, index = items[row]
                raise BadRecordError(f"{path}: record {index}: {name} holds a value outside [0, {limit})")


@dataclass(frozen=True)
class MaskRate:
    """The masking rate of each micro-batch: `start`, or linear from `start` at a run's first micro-batch to `end` at
    its last (`total`: micro-batches a rank takes over the run, passed in by the trainer). A batch is placed by its
    ordinal, the batches this rank consumed before it (ShardDataset), which workers know without the optimizer's
    step, and which a resumed run gives every batch again."""
    start: float
    end: float | None = None
    total: int = 1

    def at(self, ordinal: int | None) -> float:
        if self.end is None:
            return self.start
        if ordinal is None:
            raise ShardSpecError("--masked-lm-prob-end needs every file's record count (a manifest's) to place each "
                                 "batch in the run")
        return self.start + (self.end - self.start) * min(ordinal, self.total - 1) / max(self.total - 1, 1)

    @property
    def highest(self) -> float:
        """The highest rate it masks at: the batches' prediction slots are sized for it."""
        return self.start if self.end is None else max(self.start, self.end)


class DynamicMasker:
    """RoBERTa-style dynamic masking: pair records (the `pairs` stage's output) masked afresh every epoch.

    The masks come from pipeline.algorithms.masking.mask_batch, the code `bertprep mask` runs, seeded by (seed,
    epoch) and each instance's key: a new mask every epoch, the same one again on a resumed run. The rate of a batch
    is `rate`'s at its ordinal; P is the recipe's at the highest rate (the batches' shape), which never caps a
    lower one, so an instance's masks are those `mask` draws at the batch's rate.
    """

    def __init__(self, params: masking.MaskRecipe, vocab: masking.VocabIds, shape: schema.Shape, seed: int,
                 rate: MaskRate | None = None):
        self.rate = rate or MaskRate(params.masked_lm_prob)
        self.params = dataclasses.replace(params, masked_lm_prob=self.rate.highest).at(shape.max_seq_length)
        self.vocab, self.shape, self.seed = vocab, shape, seed

    def __call__(self, items: list[tuple[bytes, str, int]], epoch: int = 0,
                 ordinal: int | None = None) -> dict[str, np.ndarray]:
        pairs = _decoded(items, pair_records.decode)
        b = self.mask(pairs, epoch, ordinal, self.shape.max_seq_length)
        return {name: np.ascontiguousarray(getattr(b, name)) for name in schema.FEATURES}

    def mask(self, pairs: list[pair_records.PairInstance], epoch: int, ordinal: int | None,
             length: int) -> schema.Batch:
        """mask_batch of `pairs` at the batch's rate, padded to `length` (the masks do not depend on it)."""
        recipe = dataclasses.replace(self.params, masked_lm_prob=self.rate.at(ordinal))
        return masking.mask_batch(pairs, recipe, self.vocab, f"{self.seed}/epoch{epoch}", length)


class PackedMasker(DynamicMasker):
    """Dynamic masking of packed pair records (`pack` of a `pairs` output): each row's instances masked exactly as
    the same instances unpacked (DynamicMasker.mask, keyed by each instance), then laid into the packed layout by
    packing.build_rows with the rows as they are (instance i of a row at sum(lengths[:i])). The shape's M is
    packing.max_row_predictions at the highest rate (`masker_for`)."""

    def __call__(self, items: list[tuple[bytes, str, int]], epoch: int = 0,
                 ordinal: int | None = None) -> dict[str, np.ndarray]:
        try:
            rows = pair_records.decode_packed_batch([rec for rec, _, _ in items])
        except ValueError:   # one at a time, to name the record
            rows = _decoded(items, pair_records.decode_packed)
        pairs = [pair for row in rows for pair in row]
        lengths = np.array([len(p.token_ids) for p in pairs], np.int64)
        b = self.mask(pairs, epoch, ordinal, int(lengths.max(initial=1)))   # (N, longest): no padding to L
        instances = packing.Instances.from_google({name: getattr(b, name) for name in schema.FEATURES})
        counts = np.array([len(row) for row in rows], np.int64)
        first = np.repeat(np.cumsum(counts) - counts, counts)   # (N,) the first instance of each one's row
        offsets = np.cumsum(lengths) - lengths                  # (N,) where each starts, the rows end to end
        slot, start = np.arange(len(pairs)) - first, offsets - offsets[first]
        a = packing.Assignment(np.repeat(np.arange(len(rows)), counts), slot, start, len(rows))
        s = self.shape
        batch = packing.build_rows(instances, a, 0, len(rows), s.max_seq_length, s.max_predictions_per_seq,
                                   s.max_sequences_per_pack)
        return {name: np.ascontiguousarray(getattr(batch, name)) for name in schema.PACKED_FEATURES}


def _decoded(items: list[tuple[bytes, str, int]], decode) -> list:
    """Each record through `decode`; one that is not what it should be raises BadRecordError naming it."""
    out = []
    for rec, path, index in items:
        try:
            out.append(decode(rec))
        except ValueError as e:
            raise BadRecordError(f"{path}: record {index}: {e}") from None
    return out


def masker_for(shape: schema.Shape, recipe: masking.MaskRecipe, vocab: masking.VocabIds, seed: int,
               rate: MaskRate | None = None) -> DynamicMasker:
    """The masker of pairs of `shape` (open_pairs'), packed or not."""
    return (PackedMasker if shape.packed else DynamicMasker)(recipe, vocab, shape, seed, rate)


def pairs_shape(length: int, k: int, recipe: masking.MaskRecipe, highest: float) -> schema.Shape:
    """The batches' shape of pairs of L=`length` (packed k a row; 0: not packed) masked by `recipe` at rates up to
    `highest`: google's (L, P), P the recipe's at that rate; packed pairs (L, M, k), M the most a row of k instances
    can need at it (packing.max_row_predictions), sized here: the data was never masked."""
    P = dataclasses.replace(recipe, masked_lm_prob=highest).predictions(length)
    if not k:
        return schema.Shape(length, P)
    return schema.Shape(length, packing.max_row_predictions(length, k, highest, P), k)


def open_pairs(pattern: str, recipe: masking.MaskRecipe = masking.MaskRecipe(), what: str = "--data",
               highest: float | None = None) -> tuple[ShardSet, masking.VocabIds]:
    """Pair files (a `pairs` output directory, a glob or a comma list; or its packed pair records, `pack`'s) for
    dynamic masking, checked by their manifests (manifest.open_output). The batches hold the recipe's P at the pairs'
    length and the `highest` rate it masks at (default its own): the one it was given, else
    masking.default_max_predictions (20 at L=128, 77 at L=512); packed ones M (pairs_shape)."""
    try:
        opened = manifest.open_output(pattern, (manifest.PAIRS,), what=what)
    except manifest.ManifestError as e:
        raise ShardSpecError(f"{e} (--dynamic-masking reads the pair records made by `bertprep pairs`)") from None
    m = opened.manifest
    k = int(m["packing"]["max_sequences_per_pack"]) if manifest.packed(m) else 0
    shape = pairs_shape(int(m["max_seq_length"]), k, recipe, recipe.masked_lm_prob if highest is None else highest)
    return (ShardSet(opened.files, shape, int(m["vocab"]["size"]), opened.records, manifest.objective(m), m["vocab"],
                     validation_of(opened), manifest.fingerprint(opened)),
            masking.VocabIds.from_json(m["vocab"]["ids"]))


# ----------------------------------------------------------------------------------------------------------------
# The dataset: one epoch of batches per DataLoader worker

def _dist_rank_world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def _read_records(files: list[str], stride: int, offset: int, expected: dict[str, int] | None = None):
    """(record, file, index) for every record of the files, keeping index % stride == offset.

    Where `expected` gives a file's record count (its manifest's), a file that ends early or late raises: a
    shard cut exactly at a record boundary passes every CRC, and only the count shows it.
    """
    for path in files:
        n = 0
        with open(path, "rb", buffering=1 << 20) as f:
            for index, record in enumerate(tfrecord.iter_records(f, name=path)):
                n = index + 1
                if index % stride == offset:
                    yield record, path, index
        if expected and path in expected and expected[path] != n:
            raise tfrecord.CorruptRecordError(
                f"{path}: {n} records, but its manifest.json lists {expected[path]} (file cut short or replaced)")


def _shuffle_buffer(items, size: int, rng: random.Random):
    """tf.data's shuffle: fill a buffer of `size`, then emit a random slot and refill it with the next item."""
    buffer = []
    for item in items:
        if len(buffer) < size:
            buffer.append(item)
            continue
        j = rng.randrange(size)
        yield buffer[j]
        buffer[j] = item
    rng.shuffle(buffer)
    yield from buffer


class ShardDataset(IterableDataset):
    """One epoch of decoded batches from this rank's and this worker's share of the shard files.

    Yields dicts of tensors in schema layout plus `worker` (the logical worker) and `index` (the batch's number in
    that worker's epoch). Files are split across ranks x workers when there are at least as many files as readers,
    else every reader reads all files and keeps every n-th record. `set_position` makes the next epoch skip the
    batches already consumed (replayed through the shuffle buffer, not decoded) and rotate which DataLoader worker
    plays which logical worker, so the DataLoader's round robin picks up exactly where it stopped.
    """

    def __init__(self, files: list[str], shape: schema.Shape, batch_size: int, *, vocab_size: int | None = None,
                 seed: int = 0, shuffle: bool = True, shuffle_buffer: int = 10_000, drop_last: bool = True,
                 records: dict[str, int] | None = None, decoder=None):
        self.files = list(files)
        self.records = dict(records or {})   # file -> record count from the manifest, checked as files end
        self.shape = shape
        self.batch_size = batch_size
        # records -> arrays: masked shards are decoded; with a DynamicMasker, pair records are masked afresh
        self.decode = decoder or BatchDecoder(shape, vocab_size)
        self.seed, self.shuffle, self.shuffle_buffer, self.drop_last = seed, shuffle, shuffle_buffer, drop_last
        self.rank, self.world_size = _dist_rank_world()  # read here: workers have no process group
        self.epoch, self.skip, self.worker_offset, self.before = 0, [], 0, 0
        self.contiguous = False   # the trainer's Loader sets it: batches as one buffer (to_buffer)

    def set_position(self, epoch: int, skip: list[int], worker_offset: int, before: int = 0) -> None:
        """The next epoch's: its number, the batches each logical worker skips, the logical worker of DataLoader
        worker 0, and the batches this rank consumed in the epochs before it (a batch's ordinal starts there)."""
        self.epoch, self.skip, self.worker_offset, self.before = epoch, list(skip), worker_offset, before

    def epoch_files(self, epoch: int) -> list[str]:
        """The files in `epoch`'s order: shuffled by (seed, epoch), the same on every rank."""
        if not self.shuffle:
            return self.files
        order = np.random.default_rng([self.seed, epoch]).permutation(len(self.files))
        return [self.files[i] for i in order]

    def worker_batches(self, epoch: int, workers: int) -> list[int] | None:
        """(workers,) the batches each of this rank's logical workers yields in `epoch`, from the files' record
        counts (their manifests'); None where a file has none."""
        files = self.epoch_files(epoch)
        if any(f not in self.records for f in files):
            return None
        readers, out = self.world_size * workers, []
        for worker in range(workers):
            reader = self.rank * workers + worker
            if len(files) >= readers:
                n = sum(self.records[f] for f in files[reader::readers])
            else:   # every reader reads every file, keeping index % readers == reader
                n = sum(len(range(reader, self.records[f], readers)) for f in files)
            out.append(n // self.batch_size if self.drop_last else -(-n // self.batch_size))
        return out

    def ordinals(self, workers: int, worker: int):
        """index -> the batch's ordinal in the run (the batches this rank consumed before it), or None where the
        record counts are unknown. The DataLoader takes its workers' batches in turn from worker 0, passing over
        the ones run dry, so before batch i of `worker` come batch j < i of every worker, and batch i of the ones
        before it: as many as each yields of those."""
        counts = self.worker_batches(self.epoch, workers)
        if counts is None:
            return lambda index: None
        counts = np.array(counts)
        before = np.arange(workers) < worker
        return lambda index: self.before + int(np.minimum(counts, index + before).sum())

    def __iter__(self):
        info = get_worker_info()
        workers = info.num_workers if info else 1
        worker = ((info.id if info else 0) + self.worker_offset) % workers
        reader, readers = self.rank * workers + worker, self.world_size * workers
        files = self.epoch_files(self.epoch)
        ordinal = self.ordinals(workers, worker)
        if len(files) >= readers:
            items = _read_records(files[reader::readers], 1, 0, self.records)
        else:
            items = _read_records(files, readers, reader, self.records)
        if self.shuffle:
            items = _shuffle_buffer(items, self.shuffle_buffer,
                                    random.Random(f"{self.seed}/{self.epoch}/{reader}/{readers}"))
        skip = self.skip[worker] if worker < len(self.skip) else 0
        batch, index = [], 0
        for item in items:
            batch.append(item)
            if len(batch) == self.batch_size:
                if index >= skip:
                    yield self._tensors(batch, worker, index, ordinal(index))
                batch, index = [], index + 1
        if batch and not self.drop_last and index >= skip:
            yield self._tensors(batch, worker, index, ordinal(index))

    def _tensors(self, batch, worker, index, ordinal):
        arrays = self.decode(batch, self.epoch, ordinal)
        if self.contiguous:   # one tensor crosses from the worker (and is pinned), not one per field
            buffer, layout = to_buffer(arrays)
            return {"buffer": buffer, "layout": layout, "worker": worker, "index": index}
        out = {name: torch.from_numpy(values) for name, values in arrays.items()}
        out["worker"], out["index"] = worker, index
        return out


def to_buffer(arrays: dict[str, np.ndarray]) -> tuple[torch.Tensor, tuple]:
    """A batch's arrays as one int32 buffer, float fields bit-cast (ids, masks and positions all fit in 31 bits), and
    its layout ((name, shape, float?), ...) for `from_buffer`."""
    layout, parts = [], []
    for name, values in arrays.items():
        floating = values.dtype.kind == "f"
        parts.append((values.astype(np.float32).view(np.int32) if floating else values.astype(np.int32)).ravel())
        layout.append((name, values.shape, floating))
    return torch.from_numpy(np.concatenate(parts)), tuple(layout)


def from_buffer(buffer: torch.Tensor, layout: tuple) -> dict[str, torch.Tensor]:
    """The fields of a `to_buffer` batch as views of it: int32 tensors, float32 where the field is a float."""
    out, at = {}, 0
    for name, shape, floating in layout:
        n = int(np.prod(shape))
        view = buffer[at:at + n].view(shape)
        out[name] = view.view(torch.float32) if floating else view
        at += n
    return out


def ignore_stop_signals(worker_id: int = 0) -> None:
    """A DataLoader worker's worker_init_fn: SIGINT is ignored, and the first SIGTERM. A terminal's Ctrl-C reaches
    the whole process group and a cluster may SIGTERM every process, but the rank decides: it finishes its step,
    saves a checkpoint (model.train.Stop) and ends its workers itself (the loader's done event). A second SIGTERM
    ends a worker as usual: the one multiprocessing sends a worker still alive at shutdown, so exit never waits on
    a worker that ignores it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _first_sigterm)


def _first_sigterm(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)   # the next one ends this worker


@contextlib.contextmanager
def batches_of(loader: DataLoader):
    """iter(loader), whose worker processes end with the block however it ends (an error, a closed generator).

    Not left to garbage collection: an error's traceback can keep the iterator alive until exit, where
    multiprocessing ends leftover workers with SIGTERM, the first of which ours ignore (ignore_stop_signals)."""
    batches = iter(loader)
    try:
        yield batches
    finally:
        if hasattr(batches, "_shutdown_workers"):  # the multi-process iterator's own clean-up (its __del__ calls it)
            batches._shutdown_workers()


class Loader:
    """Endless batches from a ShardDataset, epoch after epoch, remembering which ones the caller has taken.

    `state_dict()` is the position after the last batch handed out: (epoch, batches taken from each logical
    worker, the worker whose turn is next, and the batches taken in the epochs before: `before`, where each batch's
    ordinal starts, MaskRate's clock). `load_state_dict` restores it; the next batch is then the one an uninterrupted
    run would have produced. Resume needs the same world size and number of workers.
    """

    def __init__(self, dataset: ShardDataset, num_workers: int = 0, pin_memory: bool = False):
        self.dataset, self.num_workers, self.pin_memory = dataset, num_workers, pin_memory
        dataset.contiguous = True   # a worker hands over one buffer a batch; its fields are views of it here
        self.readers = max(1, num_workers)
        self.epoch, self.taken, self.next_worker, self.before = 0, [0] * self.readers, 0, 0

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "taken": list(self.taken), "next_worker": self.next_worker, "before": self.before,
                "readers": self.readers, "world_size": self.dataset.world_size,
                "batch_size": self.dataset.batch_size, "files": len(self.dataset.files)}

    def load_state_dict(self, state: dict) -> None:
        have = {"world_size": self.dataset.world_size, "readers": self.readers,
                "batch_size": self.dataset.batch_size, "files": len(self.dataset.files)}
        words = {"world_size": "ranks", "readers": "readers per rank (DataLoader workers, at least 1)",
                 "batch_size": "rows per rank and batch", "files": "files"}
        differ = [f"{words[key]} {state[key]} -> {have[key]}" for key in have if state[key] != have[key]]
        if differ:
            raise ShardSpecError(f"cannot resume the data position exactly ({', '.join(differ)}): use the same world "
                                 "size, --num-workers, --batch-size, --grad-accum and data")
        self.epoch, self.taken, self.next_worker = state["epoch"], list(state["taken"]), state["next_worker"]
        self.before = state["before"] if "before" in state else self._taken_before(self.epoch)

    def _taken_before(self, epoch: int) -> int:
        """The batches of the epochs before `epoch` (a checkpoint older than `before`): every batch each worker
        yields (ShardDataset.worker_batches); 0 in the first epoch, or where the files' counts are unknown (only
        --masked-lm-prob-end reads it, which such checkpoints never ran with)."""
        counts = [self.dataset.worker_batches(e, self.readers) for e in range(epoch)]
        return 0 if None in counts else sum(sum(c) for c in counts)

    def __iter__(self):
        while True:
            self.dataset.set_position(self.epoch, self.taken, self.next_worker, self.before)
            loader = DataLoader(self.dataset, batch_size=None, num_workers=self.num_workers,
                                pin_memory=self.pin_memory, worker_init_fn=ignore_stop_signals,
                                generator=torch.Generator())  # keeps the global torch RNG (dropout) untouched
            produced = False
            with batches_of(loader) as batches:
                for batch in batches:
                    produced = True
                    worker, index = batch.pop("worker"), batch.pop("index")
                    self.taken[worker] = index + 1
                    self.next_worker = (worker + 1) % self.readers
                    yield from_buffer(batch["buffer"], batch["layout"])
            if not produced and not any(self.taken):
                raise ShardSpecError(f"no full batch of {self.dataset.batch_size} in one epoch of "
                                 f"{len(self.dataset.files)} file(s) on this rank's readers: "
                                 "use a smaller --batch-size or more data")
            self.before += sum(self.taken)
            self.epoch, self.taken, self.next_worker = self.epoch + 1, [0] * self.readers, 0
