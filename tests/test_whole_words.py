"""Whole-word masking masks the tokenizer's own words (issue 44), checked against HF `tokenizers` itself rather than
the word starts the pipeline computed: a byte-level BPE (GPT-2's, extended with BERT's tokens), a Unigram and a
WordPiece tokenizer.json (trained by `bertprep vocab --model` on the bundled sample), `prepare --whole-word-mask` on
the bundled books and Wikipedia sample; each segment of each masked row decoded to its text and encoded again with
`Tokenizer.encode(text, add_special_tokens=False)`: every word of its `word_ids` is selected whole or not at all.
What was selected is masked_lm_positions (80/10/10 leaves a selected piece [MASK], a random id or itself).

google's truncation removes a token at a time from either end of a segment, so the word at a segment's edge may be
a part: its pieces may not encode back alone (a WordPiece "##ing" first, a Unigram piece without its "▁"). Up to
EDGE tokens are trimmed from each end until the rest encodes back to its ids; the first and last word of what is
left are not judged. Both are counted, and asserted few."""
import numpy as np
import pytest
from tokenizers import Tokenizer

from pipeline.commands import cli
from tests.conftest import REPO, SAMPLES, tf_examples

pytestmark = pytest.mark.slow
GPT2 = REPO / "tests" / "data" / "tokenizers" / "gpt2-tokenizer.json"
ONE = ["--preset", "local-1"]
INPUTS = ["--input", f"books:{SAMPLES / 'books'}", "--input", f"wikipedia:{SAMPLES / 'enwiki-sample.xml.bz2'}"]
EDGE = 12   # tokens trimmed at most from each end of a segment (a Unigram of 2,000 cuts a long word in 10)


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory) -> dict:
    """{model: its tokenizer.json}: GPT-2's extended (`vocab --extend`), and a Unigram and a WordPiece of 2,000
    tokens learned from the sample's extracted documents (`vocab --model`)."""
    root = tmp_path_factory.mktemp("tokenizers")
    assert cli.main(["extract", "books", "--input", str(SAMPLES / "books"), "--output", str(root / "books"),
                     *ONE]) == 0
    assert cli.main(["extract", "wikipedia", "--input", str(SAMPLES / "enwiki-sample.xml.bz2"),
                     "--output", str(root / "wiki"), *ONE]) == 0
    docs = f"{root / 'books'}/documents-*.jsonl.gz,{root / 'wiki'}/documents-*.jsonl.gz"
    made = {"bpe": root / "bpe.json", "unigram": root / "unigram.json", "wordpiece": root / "wordpiece.json"}
    assert cli.main(["vocab", "--extend", str(GPT2), "--output", str(made["bpe"])]) == 0
    for model in ("unigram", "wordpiece"):
        assert cli.main(["vocab", "--input", docs, "--model", model, "--vocab-size", "2000",
                         "--output", str(made[model])]) == 0
    return made


def encoded_back(tok: Tokenizer, ids: list[int]):
    """(front, back, word_ids) where ids[front:len(ids) - back], decoded to text and encoded again, gives its ids
    (the fewest tokens trimmed, at most EDGE each side); None where no trim does."""
    for cut in range(2 * EDGE + 1):
        for front in range(max(0, cut - EDGE), min(cut, EDGE) + 1):
            kept = ids[front:len(ids) - (cut - front)]
            if not kept:
                return None
            encoding = tok.encode(tok.decode(kept, skip_special_tokens=False), add_special_tokens=False)
            if encoding.ids == kept:
                return front, cut - front, encoding.word_ids
    return None


def judge_words(rows: list[dict], tok: Tokenizer, sep_id: int) -> dict:
    """Counts over every segment of `rows` (masked records): words judged, selected whole (and of those, of more
    than one piece), split (some pieces selected, not all: what must never be), edge words and trimmed tokens not
    judged, segments that do not encode back at all; and the first few split words, as tokens."""
    n = dict(segments=0, not_encoded_back=0, trimmed_tokens=0, edge_words=0, words=0, whole=0, whole_multi=0,
             split=0)
    examples = []
    for r in rows:
        length = int(r["input_mask"].sum())
        live = r["masked_lm_weights"] != 0
        selected = np.zeros(length, bool)
        selected[r["masked_lm_positions"][live]] = True
        ids = r["input_ids"][:length].copy()
        ids[r["masked_lm_positions"][live]] = r["masked_lm_ids"][live]   # the text before masking
        edges = [0] + np.flatnonzero(ids == sep_id).tolist()   # [CLS] A [SEP] B [SEP]
        for a, b in zip(edges, edges[1:]):
            n["segments"] += 1
            found = encoded_back(tok, ids[a + 1:b].tolist())
            if found is None:
                n["not_encoded_back"] += 1
                continue
            front, back, word_ids = found
            n["trimmed_tokens"] += front + back
            starts = np.array([True] + [w is None or w != v for v, w in zip(word_ids, word_ids[1:])])
            word = np.cumsum(starts) - 1                            # each token's word, 0..W-1
            pieces = np.bincount(word)
            hit = np.bincount(word, weights=selected[a + 1 + front:b - back]).astype(int)
            judged = np.arange(len(pieces))[1:-1]                   # the edge words may be parts
            n["edge_words"] += min(2, len(pieces))
            n["words"] += len(judged)
            n["whole"] += int((hit[judged] == pieces[judged]).sum())
            n["whole_multi"] += int(((hit[judged] == pieces[judged]) & (pieces[judged] > 1)).sum())
            split = judged[(hit[judged] > 0) & (hit[judged] < pieces[judged])]
            n["split"] += len(split)
            for w in split[:max(0, 3 - len(examples))]:
                tokens = ids[a + 1 + front:b - back][word == w]
                examples.append([(tok.id_to_token(int(t)), bool(s)) for t, s in
                                 zip(tokens, selected[a + 1 + front:b - back][word == w])])
    return {**n, "examples": examples}


@pytest.mark.parametrize("model", ["bpe", "unigram", "wordpiece"])
def test_each_selected_word_is_a_whole_word_of_the_tokenizers_own(tokenizers, tmp_path, model):
    out = tmp_path / "shards"
    assert cli.main(["prepare", *INPUTS, "--tokenizer", str(tokenizers[model]), "--whole-word-mask",
                     "--max-seq-length", "128", "--dupe-factor", "1", "--output", str(out), *ONE]) == 0
    tok = Tokenizer.from_file(str(tokenizers[model]))
    tok.encode_special_tokens = True   # as the pipeline encodes documents: text that spells "[SEP]" is text
    n = judge_words(tf_examples(out), tok, tok.token_to_id("[SEP]"))
    assert n["split"] == 0, (f"{n['split']} of {n['words']} words split, e.g. (piece, selected):", n["examples"])
    assert n["words"] > 50_000 and n["whole"] > 0.1 * n["words"] and n["whole_multi"] > 1000, n
    # what was not judged: segments that encode back by no trim, tokens trimmed, edge words (2 a segment)
    assert n["not_encoded_back"] <= 0.01 * n["segments"] and n["trimmed_tokens"] <= 0.5 * n["segments"], n
