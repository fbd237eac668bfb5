"""`bertprep vocab`: layout, google-compatibility, determinism and sampling of the learned vocab.txt."""
import collections
import json
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from pipeline.commands import vocab
from pipeline.formats import manifest
from pipeline.formats.documents import Document, write_gzip_jsonl
from pipeline.text import tokenization

REPO = Path(__file__).resolve().parent.parent
BOOKS = REPO / "corpora" / "samples" / "books"


def book_documents() -> list[Document]:
    """The bundled books, cut into documents of 40 paragraphs (hard-wrapped lines joined)."""
    docs = []
    for path in sorted(BOOKS.glob("*.txt")):
        paragraphs = [" ".join(p.split()) for p in path.read_text(encoding="utf-8").split("\n\n") if p.strip()]
        for k in range(0, len(paragraphs), 40):
            docs.append(Document(id=f"books:{path.name}#{k // 40}", source="books", title=path.name,
                                 paragraphs=paragraphs[k:k + 40]))
    return docs


def write_shards(directory: Path, docs: list[Document], shards: int) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    for s in range(shards):
        with open(directory / f"documents-{s:05d}-of-{shards:05d}.jsonl.gz", "wb") as f:
            write_gzip_jsonl(f, docs[s::shards])
    return str(directory / "documents-*.jsonl.gz")


@pytest.fixture(scope="module")
def docs() -> list[Document]:
    return book_documents()


@pytest.fixture(scope="module")
def shards(docs, tmp_path_factory) -> str:
    return write_shards(tmp_path_factory.mktemp("docs"), docs, 3)


@pytest.fixture(scope="module")
def uncased(shards, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    assert vocab.main(["--input", shards, "--output", str(out), "--vocab-size", "2000"]) == 0
    return out


def test_layout_size_and_metadata(uncased, docs):
    tokens = tokenization.read_vocab(str(uncased))
    assert len(tokens) == 2000 and len(set(tokens)) == 2000
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert not any(t.startswith("[unused") for t in tokens)
    assert not any(c.isupper() for t in tokens[5:] for c in t)   # lowercased ...
    assert "é" not in "".join(tokens)                          # ... and accents stripped
    assert "##," not in tokens and "," in tokens                 # punctuation never continues a word
    info = json.loads(Path(str(uncased) + ".json").read_text())
    assert info["sha256"] == tokenization.vocab_sha256(str(uncased))
    assert (info["size"], info["cased"], info["unused"]) == (2000, False, 0)
    assert info["special_tokens"] == {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
    assert info["counts"]["documents"] == info["counts"]["documents_seen"] == len(docs)
    assert info["parameters"]["vocab_size"] == 2000


SENTENCES = ["Alice was beginning to get very tired of sitting by her sister on the bank.",
             "'Curiouser and curiouser!' cried Alice (she was so much surprised).",
             "Reddy Fox and Peter Rabbit walked down the Crooked Little Path, naïvely."]


def test_round_trip_through_build_tokenizer(uncased):
    tokens = tokenization.read_vocab(str(uncased))
    tok = tokenization.build_tokenizer(tokens, lowercase=True)
    normalizer, pre = tokenization.bert_normalizer(True), tokenization.bert_pre_tokenizer()
    for sentence, ids in zip(SENTENCES, tokenization.tokenize_sentences(tok, SENTENCES)):
        pieces = [tokens[i] for i in ids]
        assert tokenization.UNK not in pieces
        words = " ".join(pieces).replace(" ##", "").split(" ")
        assert words == [w for w, _ in pre.pre_tokenize_str(normalizer.normalize_str(sentence))]
        assert len(ids) > len(words) or all(p in tokens for p in words)


def google_tokenizer(path: Path, lowercase: bool):
    """google's FullTokenizer on a vocab file (its tokenize() reads an absl flag, so flags count as parsed)."""
    from absl import flags
    from bert import tokenization as google

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    return google.FullTokenizer(str(path), do_lower_case=lowercase)


def test_google_reads_the_file_with_the_same_ids(uncased):
    theirs = google_tokenizer(uncased, lowercase=True)
    assert list(theirs.vocab) == tokenization.read_vocab(str(uncased))
    ours = tokenization.build_tokenizer(tokenization.read_vocab(str(uncased)), lowercase=True)
    for sentence, ids in zip(SENTENCES, tokenization.tokenize_sentences(ours, SENTENCES)):
        assert ids.tolist() == theirs.convert_tokens_to_ids(theirs.tokenize(sentence))


def test_cased_vocab_keeps_case(shards, tmp_path):
    out = tmp_path / "cased.txt"
    assert vocab.main(["--input", shards, "--output", str(out), "--vocab-size", "2000", "--cased"]) == 0
    tokens = tokenization.read_vocab(str(out))
    assert "Alice" in tokens and len(tokens) == 2000
    assert json.loads(Path(str(out) + ".json").read_text())["cased"] is True


@pytest.mark.parametrize("unused, ids", [
    (994, {"[PAD]": 0, "[unused0]": 1, "[unused98]": 99, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103,
           "[unused99]": 104, "[unused993]": 998}),
    (3, {"[PAD]": 0, "[unused0]": 1, "[unused2]": 3, "[UNK]": 4, "[CLS]": 5, "[SEP]": 6, "[MASK]": 7}),
])
def test_unused_slots_at_googles_places(shards, tmp_path, unused, ids):
    out = tmp_path / "vocab.txt"
    assert vocab.main(["--input", shards, "--output", str(out), "--vocab-size", "3000", "--unused", str(unused)]) == 0
    tokens = tokenization.read_vocab(str(out))
    assert len(tokens) == 3000 and {t: tokens.index(t) for t in ids} == ids
    assert sum(t.startswith("[unused") for t in tokens) == unused


def test_googles_own_layout_is_reproduced():
    trained = list(tokenization.SPECIAL_TOKENS) + ["the", "##s"]
    google = tokenization.read_vocab(str(REPO / "corpora/samples/vocab-uncased.txt"))
    assert vocab.layout(trained, 994)[:999] == google[:999]


def run_in_process(args: list[str]) -> bytes:
    """One `bertprep vocab` run in a fresh Python process (hash seeds differ between processes)."""
    code = "import sys; from pipeline.commands import vocab; sys.exit(vocab.main(sys.argv[1:]))"
    subprocess.run([sys.executable, "-c", code, *args], check=True, cwd=REPO, capture_output=True)
    return Path(args[args.index("--output") + 1]).read_bytes()


def test_deterministic_across_processes(shards, tmp_path, uncased):
    # tokenizers' trainer alone gives a different vocab in each process (see pipeline/commands/vocab.py, step 4)
    again = run_in_process(["--input", shards, "--output", str(tmp_path / "again.txt"), "--vocab-size", "2000"])
    assert again == uncased.read_bytes()


def test_sample_is_chosen_by_seeded_hash_of_ids(docs, tmp_path):
    ids = [d.id for d in docs]
    one = write_shards(tmp_path / "one", docs, 1)
    many = write_shards(tmp_path / "many", docs[::-1], 4)  # other sharding, other order

    def sample(pattern, n, seed):
        counts = collections.Counter()
        chosen = [d.id for d in vocab.select_documents(vocab.input_files(pattern), n, seed, counts)]
        assert counts["documents_seen"] == len(docs)
        return chosen

    chosen = sample(one, 5, 7)
    assert len(chosen) == len(set(chosen)) == 5 and set(chosen) <= set(ids)
    assert set(sample(many, 5, 7)) == set(chosen)          # independent of shard layout and order
    assert set(sample(one, 5, 8)) != set(chosen)           # the seed matters
    assert set(sample(one, 6, 7)) > set(chosen)            # a bigger sample contains the smaller
    assert sample(one, len(docs) + 10, 7) == [d.id for d in docs]


def test_sample_docs_flag(shards, tmp_path, uncased):
    out = tmp_path / "sample.txt"
    argv = ["--input", shards, "--output", str(out), "--vocab-size", "1000", "--sample-docs", "4", "--seed", "3"]
    assert vocab.main(argv) == 0
    info = json.loads(Path(str(out) + ".json").read_text())
    assert info["counts"]["documents"] == 4 and info["parameters"]["sample_docs"] == 4
    assert info["counts"]["words"] < json.loads(Path(str(uncased) + ".json").read_text())["counts"]["words"]
    assert vocab.main(argv[:-1] + ["4"]) == 0 and info["sha256"] != tokenization.vocab_sha256(str(out))
    assert vocab.main(argv) == 0 and info["sha256"] == tokenization.vocab_sha256(str(out))


def test_extract_directory_as_input(docs, tmp_path):
    directory = tmp_path / "documents"
    write_shards(directory, docs, 2)
    files = sorted(p.name for p in directory.iterdir())
    manifest.write(str(directory), {"format": manifest.DOCUMENTS, "stage": "extract",
                                    "files": [{"file": name, "records": 0} for name in files]})
    out = tmp_path / "vocab.txt"
    assert vocab.main(["--input", str(directory), "--output", str(out), "--vocab-size", "500"]) == 0
    assert len(tokenization.read_vocab(str(out))) == 500


def test_rare_characters_are_left_out(tmp_path):
    docs = [Document(id="t:1", source="text", title="t", paragraphs=["aaa bbb ab ba abba " * 50 + "xyzzy"])]
    pattern = write_shards(tmp_path / "docs", docs, 1)
    out = tmp_path / "vocab.txt"
    assert vocab.main(["--input", pattern, "--output", str(out), "--vocab-size", "20", "--limit-alphabet", "2"]) == 0
    tokens = tokenization.read_vocab(str(out))
    assert not {"x", "y", "z", "##x"} & set(tokens) and {"a", "b", "##a", "##b"} <= set(tokens)
    assert json.loads(Path(str(out) + ".json").read_text())["counts"]["words_with_rare_characters"] == 1


def test_bad_arguments(shards, tmp_path):
    out = str(tmp_path / "v.txt")
    with pytest.raises(SystemExit):
        vocab.main(["--input", shards, "--output", out, "--vocab-size", "5"])
    with pytest.raises(SystemExit):
        vocab.main(["--input", shards, "--output", out, "--unused", "-1"])
    with pytest.raises(ValueError, match="cannot hold"):
        vocab.main(["--input", shards, "--output", out, "--vocab-size", "60"])


def test_plugs_into_a_subcommand_table(shards, tmp_path, uncased, capsys):
    """(add_arguments, run) on a subparser, as pipeline/commands/cli.py's command table calls them: same result as
    main."""
    import argparse

    parser = argparse.ArgumentParser(prog="bertprep")
    vocab.add_arguments(parser.add_subparsers(dest="command", required=True).add_parser("vocab"))
    out = tmp_path / "vocab.txt"
    assert vocab.run(parser.parse_args(["vocab", "--input", shards, "--output", str(out), "--vocab-size", "2000"])) == 0
    assert out.read_bytes() == uncased.read_bytes()
    with pytest.raises(SystemExit) as exit_:
        vocab.run(parser.parse_args(["vocab", "--input", shards, "--output", str(out), "--limit-alphabet", "0"]))
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == ["bertprep vocab: error: --limit-alphabet must be >= 1"]


def mixed_language_documents() -> list[Document]:
    """English books, the UD PUD slices in six languages (each file one document per gold paragraph), and the
    articles of the hand-written exports in eight languages as corpora/wikipedia/ extracts them."""
    from corpora import wikipedia

    docs = book_documents()[:20]
    for path in sorted((REPO / "tests/data/sentences/pud").glob("pud-*.txt")):
        for k, paragraph in enumerate(path.read_text(encoding="utf-8").strip().split("\n\n")):
            docs.append(Document(id=f"text:{path.name}:{k}", source="text", title="",
                                 paragraphs=paragraph.split("\n"), presplit=True))
    for path in sorted((REPO / "tests/data/wikipedia/languages").glob("*.xml")):
        for page in wikipedia.read_pages(wikipedia.ReadRange(str(path))):
            if isinstance(page, wikipedia.Page):
                docs += [d for d in wikipedia.page_to_document(page) if isinstance(d, Document)]
    return docs


def test_multilingual_vocab_from_a_mixed_language_corpus(tmp_path):
    docs = mixed_language_documents()
    pattern = write_shards(tmp_path / "docs", docs, 2)
    out = tmp_path / "vocab.txt"
    assert vocab.main(["--input", pattern, "--output", str(out), "--vocab-size", "6000", "--cased",
                       "--limit-alphabet", "4000"]) == 0
    tokens = tokenization.read_vocab(str(out))
    assert len(tokens) == 6000

    def script_of(token: str) -> str:
        name = unicodedata.name(token.lstrip("#")[0], "")
        return next((s for s in ("CJK", "CYRILLIC", "ARABIC", "DEVANAGARI", "LATIN") if name.startswith(s)), "")

    pieces = collections.Counter(script_of(t) for t in tokens if len(t.lstrip("#")) >= 2 or script_of(t) == "CJK")
    assert all(pieces[s] >= 50 for s in ("CJK", "CYRILLIC", "ARABIC", "DEVANAGARI", "LATIN")), pieces
    # Every language's text is tokenized with known pieces, and google's tokenizer reads the file alike.
    theirs = google_tokenizer(out, lowercase=False)
    ours = tokenization.build_tokenizer(tokens, lowercase=False)
    texts = [d.paragraphs[0] for d in docs if d.id.startswith(("text:pud", "wikipedia:"))]
    unk = tokens.index("[UNK]")
    for text, ids in zip(texts, tokenization.tokenize_sentences(ours, texts)):
        assert unk not in ids.tolist(), text
        assert ids.tolist() == theirs.convert_tokens_to_ids(theirs.tokenize(text))
