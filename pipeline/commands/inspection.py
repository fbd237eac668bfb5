"""`bertprep inspect DIR`: what an output directory holds: counts, length and masking statistics, examples.

Works on documents, pairs and shard directories (by their manifest), packed shards included (their rows, and
their instances taken out of the rows). Reads every record of pair and shard directories (CRC-checked), so its
figures are measured, not copied from the manifest; it says when they differ.
"""
from __future__ import annotations

import itertools
import json
import os

import numpy as np

from pipeline.algorithms import masking, packing
from pipeline.commands import flags, verify
from pipeline.formats import (columns, decontamination_report, dedup_report, documents, example_proto, manifest,
                              pair_records, schema, storage, tfrecord)
from pipeline.jobs import settings
from pipeline.text import tokenization, vocab_fit, vocabularies


# Skews `inspect` flags in NSP and SOP instances (google's rule followed, nothing broken, but worth knowing):
SKEW_MIN_INSTANCES = 1_000   # fewer: a share's noise alone (1.6 points at 1,000 for one half) could pass a flag
NEXT_SHARE_DRIFT = 0.05      # the random-next (or swapped) share this far from one half
SHORT_TARGET_SHARE = 0.20    # two adjacent histogram buckets below the top holding more than this share of the
# instances: one short target (drawn once per document and dupe pass) filled a whole pass of a long document (books),
# its instances spread from the target to a sentence past it, across a bucket edge. Measured with --dupe-factor 5:
# 9.9% at most on the shared books (L=512) and the enwiki sample (9.2%; 7.0% at L=128); the bundled books at L=512
# 0.4% (seed 12345) and 32.2% (seed 2: bryant-stories' third pass at a target of 113). Google's rule over many
# documents expects at most ~10% in two adjacent buckets (a short share of 0.1 ln(b/a) per bucket pair [a, b))


def _edges(top: int) -> list[int]:
    edges = [0, 16, 32, 64, 96, 128, 192, 256, 384, 512, 1 << 30]
    return [e for e in edges if e < top] + [top + 1]


def _histogram(lengths: np.ndarray, top: int) -> str:
    edges = _edges(top)
    counts, _ = np.histogram(lengths, bins=edges)
    total = max(1, len(lengths))
    return "\n".join(f"    {lo:>4}-{hi - 1:<4} {c:>9,}  {100 * c / total:5.1f}%"
                     for lo, hi, c in zip(edges[:-1], edges[1:], counts))


def _decode(decode, ids) -> str:
    """Ids as text, as the vocabulary's decoder gives them (google's vocab.txt its WordPieces, a tokenizer.json the
    text its decoder makes: GPT-2's bytes back to text); no vocab: their numbers."""
    if decode is None:
        return " ".join(map(str, ids))
    return decode([int(i) for i in ids])


def inspect_documents(paths: list[str], m: dict, examples: int) -> None:
    n = paragraphs = chars = 0
    shown = 0
    for path in paths:
        for doc in documents.read_file(path):
            n += 1
            paragraphs += len(doc.paragraphs)
            chars += sum(map(len, doc.paragraphs))
            if shown < examples:
                shown += 1
                print(f"\n  [{doc.id}] {doc.title}\n    " + "\n    ".join(p[:160] for p in doc.paragraphs[:2]))
    print(f"\n  documents {n:,}  paragraphs {paragraphs:,}  characters {chars:,}"
          f"  (manifest: {m['counts'].get('documents')})")


def inspect_dedup(directory: str, m: dict) -> None:
    """A deduplicated output's totals: what each pass removed, as the manifest counts them and as its report
    lists them."""
    d = m.get("dedup")
    if not d:
        return
    print(f"\n  dedup: {d['documents_in']:,} documents in, {d['kept']:,} kept; removed: {d['removed_exact']:,} exact "
          f"and {d['removed_near']:,} near duplicates in {d['clusters']:,} clusters, {d['removed_emptied']:,} left "
          f"with no paragraph, {d.get('removed_fragments', 0):,} cut by more than "
          f"{d['parameters'].get('max_paragraph_loss', 1):g} of their bytes (fragments); "
          f"{d['paragraphs_dropped']:,} paragraphs dropped ({d['repeated_paragraphs']:,} "
          f"repeated ones); {d['empty_documents']:,} documents with no words (kept, never clustered)")
    if d.get("report"):
        found = dedup_report.totals(storage.join(directory, d["report"]))
        differs = any(found[k] != d[k] for k in dedup_report.compared(d))
        print(f"  report {d['report']}: {found['clusters']:,} clusters, {found['removed_exact']:,} exact, "
              f"{found['removed_near']:,} near, {found['removed_emptied']:,} emptied, {found['removed_fragments']:,} "
              "fragments" + ("  <-- DIFFERS from the manifest" if differs else ""))


def inspect_decontamination(directory: str, m: dict) -> None:
    """A decontaminated output's totals, as the manifest counts them and as its report lists them."""
    d = m.get("decontamination")
    if not d:
        return
    print(f"\n  decontamination against {d['examples']:,} examples ({d['short_examples']:,} shorter than an n-gram) "
          f"of {', '.join(a['name'] for a in d['against'])}: {d['documents_in']:,} documents in, {d['untouched']:,} "
          f"untouched, {d['cut']:,} cut, {d['dropped']:,} dropped; {d['matches']:,} matching "
          f"{d['parameters']['ngram']}-grams, {d['characters_removed']:,} characters removed")
    found = decontamination_report.totals(storage.join(directory, d["report"]))
    differs = any(found[k] != d[k] for k in found)
    print(f"  report {d['report']}: {found['cut']:,} cut, {found['dropped']:,} dropped"
          + ("  <-- DIFFERS from the manifest" if differs else ""))


def inspect_split(directory: str, m: dict) -> None:
    """An output of a validation split: how its documents were split, and the other side (from its manifest)."""
    split = m.get("split")
    if not split:
        return
    how = (f"{split['documents']:,} documents" if split.get("documents") else f"fraction {split.get('fraction')}")
    cut = f" ({split['cut_documents']:,} cut in two, a part each side)" if split.get("cut_documents") else ""
    print(f"\n  split by document ({how}, seed {split['seed']}): {split['training_documents']:,} training, "
          f"{split['validation_documents']:,} validation documents{cut}; this is the {split['role']} side")
    for kind, c in (split.get("corpora") or {}).items():   # tokens before dupe passes; absent before 2026-11-27
        print(f"    {kind:<16} {c['training_documents']:>8,} + {c['validation_documents']:>6,} documents, "
              f"{c['training_tokens']:>12,} + {c['validation_tokens']:>10,} tokens: "
              f"{1 - c['validation_token_share']:.3f} training / {c['validation_token_share']:.3f} validation"
              + split_mark(split, c))
    other = storage.join(directory, split.get("validation") or split.get("training"))
    try:
        om = manifest.read(other)
    except manifest.ManifestError as e:
        print(f"  the other side: {e}")
        return
    recipe = masking.MaskRecipe.from_manifest(om)
    print(f"  the {'validation' if split['role'] == 'training' else 'training'} side, {other}: "
          + (f"{om['counts']['rows']:,} rows" if "rows" in om["counts"] and "instances" not in om["counts"]
             else f"{om['counts'].get('instances', 0):,} instances of {om['counts'].get('documents')} documents")
          + (f", masked at {recipe.masked_lm_prob:g}" if recipe else "")
          + f"; documents listed in {split['held_out_list']}")


def split_mark(split: dict, c: dict) -> str:
    """A corpus's held-out share where the job warned of it (outputs.split_warning): off a fraction, or most of
    the corpus for a count."""
    share, fraction = c["validation_token_share"], split.get("fraction")
    if fraction and (not c["validation_documents"] or abs(share - fraction) > settings.SHARE_OFF):
        return f"  <-- not {fraction:g}: documents too large to cut between paragraphs (--max-document-bytes)"
    if split.get("documents") and share > settings.HELD_OUT_ABOVE:
        return f"  <-- over {settings.HELD_OUT_ABOVE:g} of its tokens (--validation-fraction holds out a share)"
    return ""


def inspect_corpora(m: dict) -> None:
    """A multi-corpus job's mix, as its manifest counts it: what each corpus gave after dedup and its dupe passes."""
    corpora = (m.get("counts") or {}).get("corpora")
    if not corpora:
        return
    passes = {c["kind"]: c for c in (m.get("parameters") or {}).get("corpora", [])}
    print("\n  corpora (manifest)  documents    instances        tokens  share of tokens  weight  dupe passes")
    for kind, c in corpora.items():
        p = passes.get(kind, {})
        print(f"    {kind:<16} {c['documents']:>10,} {c['instances']:>12,} {c['tokens']:>13,}  "
              f"{100 * c['token_share']:>14.1f}%  {p.get('weight', '')!s:>6}  {p.get('dupe_factor', '')!s:>11}")


def unknown_id(vocab: vocabularies.Vocabulary) -> int | None:
    """The id of [UNK] to count in the records (None: it has none); None where the vocab could not be read."""
    try:
        return vocab.unknown_id()
    except OSError:
        return None


def _unknown(unk_id: int | None, ids: np.ndarray, real: np.ndarray, rows, positions, labels) -> int:
    """[UNK] among the real tokens of instances (ids (N, L), real (N, L) bool) as they were before masking: the
    labels put back at their positions (rows, positions, labels: (K,) each)."""
    if unk_id is None:
        return 0
    ids = ids.copy()
    ids[rows, positions] = labels
    return int(((ids == unk_id) & real).sum())


def shard_statistics(paths: list[str], shape: schema.Shape, mask_id: int, examples: int = 0,
                     unk_id: int | None = None) -> dict:
    """Measured statistics of masked-LM shards (ours or google's): every record is read and CRC-checked; [UNK]
    counted where `unk_id` is given."""
    lengths, masked, random_next, shown = [], [], [], []
    unk = 0
    kinds = np.zeros(3, np.int64)   # masked positions: [MASK], random, kept
    for path in paths:
        for record in tfrecord.read_file(path):
            r = schema.decode(record, shape)
            n, k = int(r["input_mask"].sum()), int(r["masked_lm_weights"].sum())
            pos, ids = r["masked_lm_positions"][:k], r["masked_lm_ids"][:k]
            got = r["input_ids"][pos]
            kinds += [(got == mask_id).sum(), ((got != mask_id) & (got != ids)).sum(), (got == ids).sum()]
            unk += _unknown(unk_id, r["input_ids"][None, :n], np.ones((1, n), bool), 0, pos, ids)
            lengths.append(n)
            masked.append(k)
            random_next.append(int(r["next_sentence_labels"][0]))
            if len(shown) < examples:
                shown.append((r["input_ids"][:n], pos, ids, int(r["next_sentence_labels"][0])))
    lengths = np.array(lengths)
    return {"instances": len(lengths), "lengths": lengths,
            "mean_length": float(lengths.mean()) if len(lengths) else 0.0,
            "random_next_fraction": float(np.mean(random_next)) if random_next else 0.0,
            "mean_masked": float(np.mean(masked)) if masked else 0.0,
            "masked_kinds": kinds / max(1, kinds.sum()), "examples": shown, "unk": unk if unk_id is not None else None}


def packed_statistics(paths: list[str], shape: schema.Shape, max_predictions_per_seq: int, mask_id: int,
                      examples: int = 0, unk_id: int | None = None) -> dict:
    """shard_statistics' figures for packed shards, measured on the instances taken out of the rows, plus the rows:
    their count, instances per row and the share of real tokens."""
    lengths, masked, random_next, per_row, shown = [], [], [], [], []
    unk = 0
    kinds = np.zeros(3, np.int64)
    for path in paths:
        records = tfrecord.read_file(path)
        while batch := list(itertools.islice(records, 1024)):
            rows = schema.decode_plain(batch, shape)
            if rows is None:   # not the plain encoding: one at a time
                decoded = [schema.decode(record, shape) for record in batch]
                rows = {name: np.stack([d[name] for d in decoded]) for name in shape.features}
            per_row.append((rows["next_sentence_weights"] != 0).sum(axis=1))
            r, _ = packing.unpack(rows, max_predictions_per_seq)
            n, w = r["input_mask"].sum(axis=1), r["masked_lm_weights"] != 0
            got = np.take_along_axis(r["input_ids"], r["masked_lm_positions"], 1)[w]
            want = r["masked_lm_ids"][w]
            kinds += [(got == mask_id).sum(), ((got != mask_id) & (got != want)).sum(), (got == want).sum()]
            at = np.nonzero(w)
            unk += _unknown(unk_id, r["input_ids"], np.arange(r["input_ids"].shape[1]) < n[:, None], at[0],
                            r["masked_lm_positions"][at], want)
            lengths.append(n)
            masked.append(w.sum(axis=1))
            random_next.append(r["next_sentence_labels"])
            for i in range(min(len(n), examples - len(shown))):
                shown.append((r["input_ids"][i][:n[i]], r["masked_lm_positions"][i][w[i]],
                              r["masked_lm_ids"][i][w[i]], int(r["next_sentence_labels"][i])))
    lengths, per_row = np.concatenate(lengths or [[]]).astype(np.int64), np.concatenate(per_row or [[]])
    masked, random_next = np.concatenate(masked or [[]]), np.concatenate(random_next or [[]])
    return {"instances": len(lengths), "lengths": lengths, "rows": len(per_row), "per_row": per_row.astype(np.int64),
            "efficiency": packing.efficiency(int(lengths.sum()), len(per_row), shape.max_seq_length),
            "mean_length": float(lengths.mean()) if len(lengths) else 0.0,
            "random_next_fraction": float(random_next.mean()) if len(random_next) else 0.0,
            "mean_masked": float(masked.mean()) if len(masked) else 0.0,
            "masked_kinds": kinds / max(1, kinds.sum()), "examples": shown, "unk": unk if unk_id is not None else None}


def _print_packing(m: dict, stats: dict) -> None:
    packing_entry, L = m.get("packing", {}), m["max_seq_length"]
    listed = packing_entry.get("rows")
    unpacked = packing.efficiency(int(stats["lengths"].sum()), stats["instances"], L)
    print(f"\n  packed rows {stats['rows']:,}  (manifest: {listed})" + ("" if listed in (None, stats["rows"])
                                                                       else "  <-- DIFFERS")
          + f"   k {packing_entry.get('max_sequences_per_pack')}"
          + (f"   M {packing_entry['max_predictions_per_row']}" if "max_predictions_per_row" in packing_entry else
             "   unmasked (the trainer masks them)"))
    print(f"  real tokens {100 * stats['efficiency']:.2f}% of the positions (unpacked: {100 * unpacked:.2f}%);  "
          f"rows per instance {stats['rows'] / max(1, stats['instances']):.3f}")
    counts = np.bincount(stats["per_row"], minlength=2)[1:]
    print("  instances per row: " + "  ".join(f"{j}: {c:,}" for j, c in enumerate(counts, 1) if c))


def _print_stats(m: dict, stats: dict, decode) -> None:
    total, listed = stats["instances"], m["counts"].get("instances")
    print(f"\n  instances {total:,}  (manifest: {listed})" + ("" if listed in (None, total) else "  <-- DIFFERS"))
    if not total:
        return
    lengths, objective = stats["lengths"], manifest.objective(m)
    L = int(m.get("max_seq_length") or lengths.max())
    second = {"nsp": f"random next {stats['random_next_fraction']:.3f}",
              "sop": f"sentence order swapped {stats['random_next_fraction']:.3f}",
              "none": f"row fill {100 * lengths.sum() / (len(lengths) * L):.2f}% of {L} positions"}[objective]
    print(f"  objective {objective}   documents {m['counts'].get('documents')}   {second}   "
          f"mean length {stats['mean_length']:.1f}   tokens {lengths.sum():,}")
    if "mean_masked" in stats:
        share, recipe = stats["masked_kinds"], masking.MaskRecipe.from_manifest(m)
        realised = stats["mean_masked"] * total / max(1, lengths.sum())
        print(f"  masked per instance {stats['mean_masked']:.2f}   masked share {100 * realised:.2f}% of tokens "
              f"(asked {f'{100 * recipe.masked_lm_prob:g}%' if recipe else 'unknown'}; at most "
              f"{m.get('max_predictions_per_seq')} an instance)   of masked: [MASK] {share[0]:.3f}  "
              f"random {share[1]:.3f}  kept {share[2]:.3f}")
    _print_unknown(m, stats)
    print("  real length histogram:\n" + _histogram(lengths, L))
    for warning in skews(objective, stats["random_next_fraction"], lengths, L):
        flags.warn(warning)
    for ids, pos, labels, is_random in stats["examples"]:
        label = {"nsp": f"next_sentence_label={is_random}: ", "sop": f"sentence_order_label={is_random}: ",
                 "none": ""}[objective]
        print(f"\n  {label}{_decode(decode, ids)}")
        if len(pos):
            print("    masked: " + ", ".join(f"{p}={_decode(decode, [l])}" for p, l in zip(pos, labels)))


def skews(objective: str, next_share: float, lengths: np.ndarray, max_seq_length: int) -> list[str]:
    """The skews of NSP or SOP instances worth a warning: a random-next (swapped) share more than NEXT_SHARE_DRIFT
    from one half, and a length histogram one short target dominates (SHORT_TARGET_SHARE); none under
    SKEW_MIN_INSTANCES instances."""
    n = len(lengths)
    if objective not in ("nsp", "sop") or n < SKEW_MIN_INSTANCES:
        return []
    found = []
    if abs(next_share - 0.5) > NEXT_SHARE_DRIFT:
        what = "random next" if objective == "nsp" else "sentence order swapped"
        why = (f" (google's rule: a chunk of one sentence always takes a random next segment, and at max_seq_length "
               f"{max_seq_length} many chunks hold one; 128 or more keeps it near half)"
               if objective == "nsp" and next_share > 0.5 else "")
        found.append(f"{what} in {100 * next_share:.1f}% of the {n:,} instances, more than "
                     f"{100 * NEXT_SHARE_DRIFT:g} points from 50%{why}")
    edges = _edges(max_seq_length)
    counts, _ = np.histogram(lengths, bins=edges)
    pairs = counts[:-2] + counts[1:-1]   # two adjacent buckets, both below the top one
    if len(pairs) and pairs.max() > SHORT_TARGET_SHARE * n:
        at = int(np.argmax(pairs))
        found.append(f"{100 * pairs[at] / n:.1f}% of the {n:,} instances are {edges[at]}-{edges[at + 2] - 1} tokens "
                     f"long (the full length is {max_seq_length}): one short target (drawn with --short-seq-prob once "
                     "per document and dupe pass) filled a whole pass of a long document; shorter documents "
                     "(books: --max-document-bytes) spread it")
    return found


def _print_unknown(m: dict, stats: dict) -> None:
    """The share of [UNK] measured in the instances, and as the job counted it at tokenization (its manifest);
    a warning line above vocab_fit.UNK_WARNING_SHARE."""
    tokenized = m["counts"].get("unk_share")
    if stats.get("unk") is not None:
        tokens = int(stats["lengths"].sum())
        share, where = stats["unk"] / max(1, tokens), "in the instances"
        line = vocab_fit.unk_line(stats["unk"], tokens, where) + (
            "" if tokenized is None else f"; tokenized: {100 * tokenized:.2f}% (manifest)")
    elif tokenized is not None:
        share, where = tokenized, "tokenized"
        line = f"[UNK] {100 * tokenized:.2f}% of the tokens tokenized (manifest)"
    else:
        return
    print(f"  {line}")
    warning = vocab_fit.unk_warning(share, where)
    if warning:
        print(f"  warning: {warning}")


def inspect_records(paths: list[str], m: dict, examples: int, decode, unk_id: int | None) -> None:
    if m["format"] == manifest.SHARDS and manifest.packed(m):
        stats = packed_statistics(paths, manifest.shard_shape(m), m["max_predictions_per_seq"],
                                  m["vocab"]["ids"]["mask_id"], examples, unk_id)
        _print_packing(m, stats)
    elif m["format"] == manifest.SHARDS:
        shape = schema.Shape(m["max_seq_length"], m["max_predictions_per_seq"])
        stats = shard_statistics(paths, shape, m["vocab"]["ids"]["mask_id"], examples, unk_id)
    else:
        stats = pair_statistics(paths, manifest.packed(m), int(m.get("max_seq_length") or 0), examples, unk_id)
        if manifest.packed(m):
            _print_packing(m, stats)
    _print_stats(m, stats, decode)


def pair_statistics(paths: list[str], packed: bool, max_seq_length: int, examples: int = 0,
                    unk_id: int | None = None) -> dict:
    """The instances of pair records, or of packed pair records (`packed`: then also the rows, instances per row
    and the share of real tokens, and the examples are the first rows' instances, slot by slot)."""
    lengths, random_next, per_row, shown = [], [], [], []
    unk = 0
    for path in paths:
        for record in tfrecord.read_file(path):
            row = pair_records.decode_packed(record) if packed else [pair_records.decode(record)]
            per_row.append(len(row))
            for pair in row:
                unk += int((pair.token_ids == unk_id).sum()) if unk_id is not None else 0
                lengths.append(len(pair.token_ids))
                random_next.append(int(pair.is_random_next))
                if len(shown) < examples:
                    shown.append((pair.token_ids, [], [], int(pair.is_random_next)))
    lengths = np.array(lengths, np.int64)
    return {"instances": len(lengths), "lengths": lengths, "rows": len(per_row),
            "per_row": np.array(per_row, np.int64),
            "efficiency": packing.efficiency(int(lengths.sum()), len(per_row), max_seq_length),
            "mean_length": float(np.mean(lengths)) if len(lengths) else 0.0,
            "random_next_fraction": float(np.mean(random_next)) if random_next else 0.0, "examples": shown,
            "unk": unk if unk_id is not None else None}


def inspect_converted(paths: list[str], m: dict, examples: int, decode) -> None:
    """A `convert` output: its columns, and its rows read back through our readers of its format (every row, so
    the figures are measured): rows, real tokens, masked share, the second label's share, examples."""
    kind, objective = m["source"]["kind"], manifest.objective(m)
    print(f"  {kind} rows from {m['source']['path']} ({m['source']['format']}); columns: "
          + ", ".join(f"{name} {dtype}" for name, dtype in m["columns"].items()))
    rows = tokens = masked = labelled = positive = 0
    lengths, shown = [], []
    for path in paths:
        for batch in verify.converted_batches(path, m):
            n = columns.real_lengths(kind, batch)
            rows += len(n)
            tokens += int(n.sum())
            lengths.append(n)
            if "labels" in batch:
                masked += int((batch["labels"] != columns.IGNORE).sum())
            label = batch.get("next_sentence_label")
            if label is not None:
                values = label.values if isinstance(label, columns.Ragged) else np.asarray(label)
                labelled += len(values)
                positive += int(values.sum())
            for i in range(min(examples - len(shown), len(n))):
                ids = batch["input_ids"]
                row = ids.row(i) if isinstance(ids, columns.Ragged) else ids[i, :n[i]]
                at = np.flatnonzero(batch["labels"][i] != columns.IGNORE) if "labels" in batch else []
                shown.append((row, [(int(p), int(batch["labels"][i][p])) for p in at]))
    print(f"\n  rows {rows:,}  (manifest: {m['counts'].get('rows')})" +
          ("" if m["counts"].get("rows") == rows else "  <-- DIFFERS") + f"   real tokens {tokens:,}")
    if "labels" in m["columns"]:
        print(f"  masked {masked:,} = {100 * masked / max(1, tokens):.2f}% of real tokens (labels != -100)")
    if labelled:
        what = {"nsp": "B random", "sop": "swapped"}.get(objective, "1")
        print(f"  next_sentence_label: {labelled:,} labels, {what} {positive / labelled:.3f}")
    if lengths:
        print("  real length histogram:\n" + _histogram(np.concatenate(lengths), int(m["max_seq_length"])))
    for row, labels in shown:
        print(f"\n  {_decode(decode, row.tolist())}")
        if labels:
            print("    masked: " + ", ".join(f"{p}={_decode(decode, [l])}" for p, l in labels))


def _stand_in_manifest(opened: manifest.Opened, vocab_path: str | None) -> dict:
    """For --allow-incomplete: the data files present, the shard shape from the first record, no counts."""
    fmt, found = opened.format, opened.files
    m = {"format": fmt, "stage": None, "created_by": f"no {manifest.NAME}: --allow-incomplete", "counts": {},
         "files": [{"file": os.path.basename(f)} for f in found]}
    if fmt == manifest.SHARDS:
        first = example_proto.decode_example(next(tfrecord.read_file(found[0])))
        m["max_seq_length"], m["max_predictions_per_seq"] = (len(first["input_ids"]),
                                                             len(first["masked_lm_positions"]))
    if fmt != manifest.DOCUMENTS:   # without a vocab, [MASK] is taken to be 103 (google's vocabs)
        ids = masking.VocabIds.from_vocab(tokenization.read_vocab(vocab_path)).to_json() if vocab_path else \
            {"mask_id": 103}
        m["vocab"] = {"path": vocab_path, "ids": ids}
    return m


def main(args) -> int:
    opened = manifest.open_output(args.directory, (manifest.DOCUMENTS, manifest.PAIRS, manifest.SHARDS,
                                                   manifest.PARQUET, manifest.MDS), args.allow_incomplete, what="DIR")
    if opened.manifest is None and opened.format in (manifest.PARQUET, manifest.MDS):
        raise SystemExit(f"{args.directory}: {manifest.KIND[opened.format]} without {manifest.NAME}: its columns and "
                         "source are not known (re-run `bertprep convert` with --overwrite)")
    m = opened.manifest or _stand_in_manifest(opened, args.vocab)
    print(f"{args.directory}: {m['format']} written by `{m.get('stage')}` ({m.get('created_by')}), "
          f"{len(opened.files)} file(s)")
    print("  parameters " + json.dumps(m.get("parameters", {}), sort_keys=True))
    if m["format"] != manifest.DOCUMENTS:
        # --vocab: a vocab.txt to decode with (vocab_file), else the vocabulary the manifest names
        vocab = (vocabularies.VocabTxt(args.vocab, casing=vocabularies.UNKNOWN) if args.vocab
                 else vocabularies.of_entry(m["vocab"]))
        decode = None
        try:
            decode = vocab.decoder() if vocab.path else None
        except (OSError, IOError):
            print(f"  (vocab {vocab.path} not readable: showing ids)")
        if m["format"] in (manifest.PARQUET, manifest.MDS):
            inspect_converted(opened.files, m, args.examples, decode)
        else:
            inspect_records(opened.files, m, args.examples, decode, unknown_id(vocab))
    else:
        inspect_documents(opened.files, m, args.examples)
    inspect_corpora(m)
    for line in manifest.where_lines(m.get("counts", {})):   # every skip, and where the first few were
        print(f"  {line}")
    if len(opened.manifests) == 1:
        inspect_split(next(iter(opened.manifests)), m)
    if len(opened.manifests) == 1:
        inspect_dedup(next(iter(opened.manifests)), m)
        inspect_decontamination(next(iter(opened.manifests)), m)
    return 0
