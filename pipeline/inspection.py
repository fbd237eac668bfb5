"""`bertprep inspect DIR`: what an output directory holds: counts, length and masking statistics, examples.

Works on documents, pairs and shard directories (by their manifest). Reads every record of pair and shard
directories (CRC-checked), so its figures are measured, not copied from the manifest; it says when they differ.
"""
from __future__ import annotations

import json

import numpy as np

from pipeline import manifest, pair_records, schema, shards, tfrecord, tokenization


def _histogram(lengths: np.ndarray, top: int) -> str:
    edges = [0, 16, 32, 64, 96, 128, 192, 256, 384, 512, 1 << 30]
    edges = [e for e in edges if e < top] + [top + 1]
    counts, _ = np.histogram(lengths, bins=edges)
    total = max(1, len(lengths))
    return "\n".join(f"    {lo:>4}-{hi - 1:<4} {c:>9,}  {100 * c / total:5.1f}%"
                     for lo, hi, c in zip(edges[:-1], edges[1:], counts))


def _decode(vocab: list[str] | None, ids) -> str:
    if vocab is None:
        return " ".join(map(str, ids))
    return " ".join(vocab[i] if 0 <= i < len(vocab) else f"<{i}>" for i in ids)


def inspect_documents(directory: str, m: dict, examples: int) -> None:
    n = paragraphs = chars = 0
    shown = 0
    for path in manifest.data_files(directory, m):
        for doc in shards.read_documents_file(path):
            n += 1
            paragraphs += len(doc.paragraphs)
            chars += sum(map(len, doc.paragraphs))
            if shown < examples:
                shown += 1
                print(f"\n  [{doc.id}] {doc.title}\n    " + "\n    ".join(p[:160] for p in doc.paragraphs[:2]))
    print(f"\n  documents {n:,}  paragraphs {paragraphs:,}  characters {chars:,}"
          f"  (manifest: {m['counts'].get('documents')})")


def inspect_records(directory: str, m: dict, examples: int, vocab: list[str] | None) -> None:
    is_shards = m["format"] == manifest.SHARDS
    lengths, masked, random_next = [], [], []
    kinds = np.zeros(3, np.int64)   # masked positions: [MASK], random, kept
    mask_id = m["vocab"]["ids"]["mask_id"]
    shape = schema.Shape(m.get("max_seq_length", 0), m.get("max_predictions_per_seq", 0))
    shown = []
    for path in manifest.data_files(directory, m):
        for record in tfrecord.read_file(path):
            if is_shards:
                r = schema.decode(record, shape)
                n, k = int(r["input_mask"].sum()), int(r["masked_lm_weights"].sum())
                pos, ids = r["masked_lm_positions"][:k], r["masked_lm_ids"][:k]
                got = r["input_ids"][pos]
                kinds += [(got == mask_id).sum(), ((got != mask_id) & (got != ids)).sum(), (got == ids).sum()]
                lengths.append(n)
                masked.append(k)
                random_next.append(int(r["next_sentence_labels"][0]))
                if len(shown) < examples:
                    shown.append((r["input_ids"][:n], pos, ids, int(r["next_sentence_labels"][0])))
            else:
                pair = pair_records.decode(record)
                lengths.append(len(pair.token_ids))
                random_next.append(int(pair.is_random_next))
                if len(shown) < examples:
                    shown.append((pair.token_ids, [], [], int(pair.is_random_next)))
    lengths = np.array(lengths)
    total = len(lengths)
    print(f"\n  instances {total:,}  (manifest: {m['counts'].get('instances')})"
          + ("" if total == m["counts"].get("instances") else "  <-- DIFFERS"))
    if not total:
        return
    print(f"  documents {m['counts'].get('documents')}   random next {np.mean(random_next):.3f}   "
          f"mean length {lengths.mean():.1f}   tokens {lengths.sum():,}")
    if is_shards:
        masked = np.array(masked)
        share = kinds / max(1, kinds.sum())
        print(f"  masked per instance {masked.mean():.2f}   of masked: [MASK] {share[0]:.3f}  random {share[1]:.3f}"
              f"  kept {share[2]:.3f}")
    print("  real length histogram:\n" + _histogram(lengths, int(m.get("max_seq_length", lengths.max()))))
    for ids, pos, labels, is_random in shown:
        print(f"\n  next_sentence_label={is_random}: {_decode(vocab, ids)}")
        if len(pos):
            print(f"    masked: " + ", ".join(f"{p}={_decode(vocab, [l])}" for p, l in zip(pos, labels)))


def main(args) -> int:
    m = manifest.read(args.directory)
    print(f"{args.directory}: {m['format']} written by `{m.get('stage')}` ({m.get('created_by')}), "
          f"{len(m['files'])} file(s)")
    print("  parameters " + json.dumps(m.get("parameters", {}), sort_keys=True))
    vocab = None
    if m["format"] != manifest.DOCUMENTS:
        path = args.vocab or m["vocab"]["path"]
        try:
            vocab = tokenization.read_vocab(path)
        except (OSError, IOError):
            print(f"  (vocab {path} not readable: showing ids)")
        inspect_records(args.directory, m, args.examples, vocab)
    else:
        inspect_documents(args.directory, m, args.examples)
    return 0
