"""`prepare` with a tokenizer.json (GPT-2's byte-level BPE, extended as ModernBERT extended OLMo's) against google's
uncased vocab.txt, on the same books in the same run: CPU, wall, peak RSS, tokens; with --fidelity, issue 37's
fidelity numbers on the books and the Wikipedia sample.

Input: ../shared/corpora/books/ (17 Project Gutenberg books) read as `books:`, max_seq_length 128, dupe factor 5,
--preset local-1 (one worker: CPU is the job's, not the pool's). Target (issue 37): the BPE run's CPU at most
1.3x the vocab.txt run's. Also each tokenizer alone, encode_batch on the books' sentences as the pipeline sends them
(the floor under each job).

    .venv/bin/python bench/bench_tokenizers.py [--repeat 3] [--fidelity]

--fidelity: the 17 books and ../shared's Wikipedia sample extracted, then paired with the extended GPT-2 tokenizer
(NSP at L=128, objective none at L=1024, dupe factor 1): the share of segments that decode to text of the source
(whitespace collapsed) and re-encode to the same ids, the exceptions by cause; masked with --masked-lm-prob 0.3
(none) and --whole-word-mask (NSP): the masked share, random replacements that are special tokens, and masked
words masked whole. tests/test_tokenizer_data.py asserts the same on the bundled sample with these functions.
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import SHARED, measure, table  # noqa: E402

VOCAB = SHARED / "vocab" / "bert-base-uncased-vocab.txt"
GPT2 = SHARED / "tokenizers" / "gpt2-tokenizer.json"
BOOKS = SHARED / "books"
BERTPREP = str(Path(sys.executable).parent / "bertprep")


WIKI = SHARED / "wikipedia" / "enwiki-sample-pages-articles.xml.bz2"


def collapse(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def segments(directory: Path, sep_id: int):
    """(key, ids) of each segment (the ids between [CLS]/[SEP] and the next [SEP]) of every pair record."""
    import numpy as np
    from pipeline.formats import pair_records, tfrecord

    for f in sorted(directory.glob("*.tfrecord")):
        for record in tfrecord.read_file(str(f)):
            pair = pair_records.decode(record)
            cuts = [0] + np.flatnonzero(pair.token_ids == sep_id).tolist()
            for a, b in zip(cuts, cuts[1:]):
                yield pair.key, pair.token_ids[a + 1:b].tolist()


class Source:
    """The documents' text, whitespace collapsed, and whether a segment's text is found in it: in the document its
    key names, else in the document an 8-word run of it (its second to ninth words: the first may be a part) is
    first seen in, else anywhere (a search of everything: slow, for the few segments left)."""

    ANCHOR = 8

    def __init__(self, document_files: list[Path]):
        from pipeline.formats import documents

        self.texts = {d.id: collapse("\n".join(d.paragraphs)) for f in document_files
                      for d in documents.read_file(str(f))}
        self.first_seen: dict[int, str] = {}
        for doc_id, text in self.texts.items():
            words = text.split(" ")
            for i in range(len(words) - self.ANCHOR + 1):
                self.first_seen.setdefault(hash(tuple(words[i:i + self.ANCHOR])), doc_id)
        self.everything = "\0".join(self.texts.values())

    def holds(self, text: str, key: str) -> bool:
        text = collapse(text)
        if text in self.texts.get(key.split("|", 1)[0], ""):
            return True
        words = text.split(" ")
        if len(words) > self.ANCHOR + 1:
            doc_id = self.first_seen.get(hash(tuple(words[1:1 + self.ANCHOR])))
            if doc_id is not None and text in self.texts[doc_id]:
                return True
        return text in self.everything   # short, or its words are in several documents (a verse, an article twice)


def fidelity(pairs_dir: Path, document_files: list[Path], tokenizer: Path) -> tuple[int, int, collections.Counter]:
    """(segments, those that decode to text of the source and re-encode to their ids, why the others do not)."""
    from pipeline.formats import manifest
    from pipeline.text import subwords

    tok = subwords.for_documents(subwords.load(str(tokenizer)))
    source = Source(document_files)
    sep = json.loads((pairs_dir / manifest.NAME).read_text())["vocab"]["ids"]["sep_id"]
    total, faithful, why = 0, 0, collections.Counter()
    for key, ids in segments(pairs_dir, sep):
        total += 1
        text = tok.decode(ids, skip_special_tokens=False)
        found, same = source.holds(text, key), tok.encode(text, add_special_tokens=False).ids == ids
        if found and same:
            faithful += 1
        else:   # google's truncation removes a token at a time: it may cut a character's UTF-8 bytes apart
            why["a character cut by truncation (U+FFFD)" if "\ufffd" in text else
                f"found in the source {found}, same ids {same}"] += 1
    return total, faithful, why


def masked_arrays(directory: Path) -> dict:
    """Every record of a directory of shards, decoded: (N, L) and (N, P) arrays."""
    import numpy as np
    from pipeline.formats import manifest, schema, tfrecord

    shape = manifest.shard_shape(json.loads((directory / manifest.NAME).read_text()))
    arrays = [schema.decode_plain(list(tfrecord.read_file(str(f))), shape) for f in sorted(directory.glob("*.tfrecord"))]
    return {k: np.concatenate([a[k] for a in arrays]) for k in arrays[0]}


def masking_figures(directory: Path, special: set[int], mask_id: int) -> tuple[float, int, int]:
    """(masked share of the real tokens, random replacements, those that are special ids) of masked shards."""
    import numpy as np

    r = masked_arrays(directory)
    live = r["masked_lm_weights"] != 0
    rows = np.repeat(np.arange(len(live)), live.sum(1))
    now, labels = r["input_ids"][rows, r["masked_lm_positions"][live]], r["masked_lm_ids"][live]
    replaced = now[(now != mask_id) & (now != labels)]
    return float(live.sum() / r["input_mask"].sum()), len(replaced), int(np.isin(replaced, list(special)).sum())


def whole_words(pairs: list, vocab_ids: dict, max_seq_length: int) -> tuple[int, int]:
    """(masked words, those masked whole) when `pairs` are masked with --whole-word-mask (masking.mask_batch, as the
    job does): a word runs from a word start to the next, [CLS] and the [SEP]s ending it."""
    import numpy as np
    from pipeline.algorithms import masking

    vocab = masking.VocabIds.from_json(vocab_ids)
    params = masking.MaskRecipe(whole_word_mask=True)   # P the default at max_seq_length
    words = whole = 0
    for at in range(0, len(pairs), 512):
        batch = pairs[at:at + 512]
        b = masking.mask_batch(batch, params, vocab, 12345, max_seq_length)
        for i, pair in enumerate(batch):
            hit = set(b.masked_lm_positions[i][b.masked_lm_weights[i] != 0].tolist())
            text = np.ones(len(pair.token_ids), bool)
            text[[0, pair.num_tokens_a + 1, len(pair.token_ids) - 1]] = False
            starts = np.flatnonzero(pair.word_starts | ~text | np.roll(~text, 1)).tolist()
            for lo, hi in zip(starts, starts[1:] + [len(text)]):
                inside = hit & set(range(lo, hi))
                if inside:
                    words += 1
                    whole += inside == set(range(lo, hi))
    return words, whole


def fidelity_rows(tmp: Path, extended: Path) -> list[list]:
    """Issue 37's fidelity figures on the 17 books and the Wikipedia sample (module doc)."""
    from pipeline.formats import manifest, pair_records, tfrecord

    measure([BERTPREP, "extract", "books", "--input", str(BOOKS), "--output", str(tmp / "docs" / "books")])
    measure([BERTPREP, "extract", "wikipedia", "--input", str(WIKI), "--output", str(tmp / "docs" / "wiki")])
    files = sorted((tmp / "docs").glob("*/documents-*.jsonl.gz"))
    rows = []
    for name, flags in (("nsp", ["--max-seq-length", "128"]),
                        ("none", ["--max-seq-length", "1024", "--objective", "none"])):
        out = tmp / f"pairs-{name}"
        measure([BERTPREP, "pairs", "--input", ",".join(map(str, files)), "--tokenizer", str(extended),
                 "--dupe-factor", "1", "--output", str(out), *flags])
        total, faithful, why = fidelity(out, files, extended)
        rows.append([f"{name}: segments faithful", f"{faithful:,} / {total:,}", f"{100 * faithful / total:.3f}%",
                     "; ".join(f"{n} {w}" for w, n in why.items()) or "no exception"])
        entry = json.loads((out / manifest.NAME).read_text())["vocab"]
        if name == "none":
            measure([BERTPREP, "mask", "--input", str(out), "--masked-lm-prob", "0.3", "--output", str(tmp / "m")])
            ranges = entry["ids"]["replacement_ranges"]
            drawn = {i for a, b in ranges for i in range(a, b)}
            special = set(range(entry["size"])) - drawn
            share, replaced, bad = masking_figures(tmp / "m", special, entry["ids"]["mask_id"])
            rows.append(["none, --masked-lm-prob 0.3: masked share", "", f"{100 * share:.2f}%", "target 30% +/- 0.5"])
            rows.append(["none: random replacements that are special", f"{bad:,} / {replaced:,}", "", "target 0"])
        else:
            pairs = [pair_records.decode(r) for f in sorted(out.glob("*.tfrecord")) for r in tfrecord.read_file(str(f))]
            words, whole = whole_words(pairs, entry["ids"], 128)
            rows.append(["nsp, --whole-word-mask: words masked whole", f"{whole:,} / {words:,}",
                         f"{100 * whole / words:.2f}%", "target 100%"])
    return rows


def encode_cpu(extended: Path) -> list[list]:
    """CPU seconds of each tokenizer alone on every book's documents (the jobs' encoders, one thread)."""
    import os
    os.environ["RAYON_NUM_THREADS"] = "1"
    from corpora.books import plan_reads, read_books
    from pipeline.formats.documents import Document
    from pipeline.text import vocabularies

    docs = [d for p in plan_reads([str(BOOKS)]) for d in read_books(p) if isinstance(d, Document)]
    rows = []
    for name, vocabulary in (("vocab.txt (google's WordPiece)", vocabularies.VocabTxt(str(VOCAB))),
                             ("tokenizer.json (GPT-2 BPE, extended)", vocabularies.TokenizerJson(str(extended)))):
        encode = vocabulary.encoder()
        start = time.process_time()
        tokens = sum(len(ids) for d in docs for ids in encode(d))
        rows.append([f"encoder alone: {name}", time.process_time() - start, "", "", tokens, ""])
    rows[1][5] = f"{rows[1][1] / rows[0][1]:.2f}x the vocab.txt CPU"
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3, help="runs of each job (the median is shown)")
    ap.add_argument("--fidelity", action="store_true", help="also issue 37's fidelity figures (module doc)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        extended = tmp / "bert-gpt2.json"
        measure([BERTPREP, "vocab", "--extend", str(GPT2), "--output", str(extended), "--pad-to-multiple", "64"])
        common = ["--input", f"books:{BOOKS}", "--max-seq-length", "128", "--dupe-factor", "5", "--preset", "local-1",
                  "--overwrite"]
        runs = {}
        for name, flag in (("vocab.txt", ["--vocab", str(VOCAB)]), ("tokenizer.json", ["--tokenizer", str(extended)])):
            runs[name] = [measure([BERTPREP, "prepare", *common, *flag, "--output", str(tmp / name)])
                          for _ in range(args.repeat)]
        rows = []
        for name, ms in runs.items():
            counts = json.loads((tmp / name / "manifest.json").read_text())["counts"]
            rows.append([f"bertprep prepare --{'vocab' if name == 'vocab.txt' else 'tokenizer'} ({name})",
                         statistics.median(m.cpu for m in ms), statistics.median(m.wall for m in ms),
                         max(m.peak_rss_mb for m in ms), counts.get("tokens", ""), ""])
        rows[1][5] = f"{rows[1][1] / rows[0][1]:.2f}x the vocab.txt CPU (target <= 1.3x)"
        rows += encode_cpu(extended)
        fidelity_table = fidelity_rows(tmp, extended) if args.fidelity else None
    print(f"input: {BOOKS} (17 books), L=128, dupe 5, --preset local-1; median of {args.repeat} runs\n")
    print(table(["job", "CPU s", "wall s", "peak RSS MB", "tokens", "note"], rows))
    if fidelity_table:
        print(f"\nfidelity: {BOOKS} and {WIKI.name}, GPT-2 BPE extended, dupe factor 1\n")
        print(table(["figure", "count", "share", "note"], fidelity_table))


if __name__ == "__main__":
    main()
