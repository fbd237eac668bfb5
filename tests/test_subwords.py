"""Any tokenizer.json (issue 37, its first part): BERT's special roles found in a real published tokenizer once
`bertprep vocab --extend` has added them (GPT-2's byte-level BPE, as ModernBERT extended OLMo's), in a Unigram
trained here and in BERT's own WordPiece; casing read off the normalizer; what lacks a role refused in one line;
real text encoded sentence by sentence into the ids of its whole span."""
import json

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from pipeline.commands import cli
from pipeline.text import subwords
from tests.conftest import REPO

GPT2 = REPO / "tests" / "data" / "tokenizers" / "gpt2-tokenizer.json"


def vocab(*argv) -> int:
    return cli.main(["vocab", *(str(a) for a in argv)])


def refusal(capsys, *argv) -> str:
    capsys.readouterr()
    try:
        code = vocab(*argv)
    except SystemExit as e:   # a flag problem exits as argparse's own do
        code = e.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("bertprep vocab: error: "), err
    return err


def test_gpt2_extended_as_modernbert_extended_olmo(tmp_path, capsys):
    plain = subwords.load(str(GPT2))
    with pytest.raises(subwords.TokenizerError,
                       match=r"has no cls / sep / mask / pad token .*`bertprep vocab --extend"):
        subwords.find_specials(plain, str(GPT2))

    out = tmp_path / "bert-gpt2.json"
    assert vocab("--extend", GPT2, "--output", out, "--pad-to-multiple", "64") == 0
    assert f"wrote {out}: 50,304 tokens (BPE), 47 added ([UNK], [CLS], [SEP], [PAD], [MASK], ...)" in \
        capsys.readouterr().out
    extended = subwords.load(str(out))
    size = extended.get_vocab_size(with_added_tokens=True)
    assert size == 50304 and size % 64 == 0   # 50,257 + 5 specials + 42 unused
    specials = subwords.find_specials(extended, str(out))
    assert specials == subwords.Specials(cls=50258, sep=50259, mask=50261, pad=50260, unk=50257)
    # GPT-2's own ids are untouched, its bytes round-trip, and a pair is framed as BERT's
    text = " Hello world. It's 1924, naïve café — ok"
    assert extended.encode(text, add_special_tokens=False).ids == plain.encode(text, add_special_tokens=False).ids
    pair = extended.encode(text, " Next one.")
    assert pair.ids[0] == specials.cls and pair.ids.count(specials.sep) == 2 and pair.ids[-1] == specials.sep
    assert set(pair.type_ids[:pair.ids.index(specials.sep) + 1]) == {0} and pair.type_ids[-1] == 1
    assert extended.decode(extended.encode(text, add_special_tokens=False).ids) == text
    long = " ".join(["word"] * 300)   # the published file truncates at 50 tokens: never here, nor in its extension
    assert len(extended.encode(long, add_special_tokens=False).ids) == 300
    assert json.loads(out.read_text())["truncation"] is None
    assert extended.encode("a [MASK] b", add_special_tokens=False).ids.count(specials.mask) == 1   # one token
    assert not subwords.lowercases(extended)   # byte-level BPE keeps case
    info = json.loads((tmp_path / "bert-gpt2.json.json").read_text())
    assert info["size"] == 50304 and info["model"] == "BPE" and info["added"][-1] == "[unused41]"
    assert info["special_ids"]["mask_id"] == 50261

    again = tmp_path / "again.json"   # the same file from the same input
    assert vocab("--extend", GPT2, "--output", again, "--pad-to-multiple", "64") == 0
    assert again.read_bytes() == out.read_bytes()
    assert vocab("--extend", out, "--output", tmp_path / "twice.json") == 0   # nothing left to add
    assert subwords.load(str(tmp_path / "twice.json")).get_vocab_size(with_added_tokens=True) == 50304


def unigram(tmp_path, lowercase: bool) -> str:
    """A SentencePiece-style Unigram (Metaspace) trained here on the bundled book, <s> </s> <pad> <mask> <unk>
    special, RoBERTa's framing: every role found by its usual name, none added."""
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC()] + ([normalizers.Lowercase()] if lowercase else []))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    text = (REPO / "corpora" / "samples" / "books" / "carroll-alice.txt").read_text(encoding="utf-8")
    tok.train_from_iterator(text.split("\n\n")[:400], trainers.UnigramTrainer(
        vocab_size=800, special_tokens=["<s>", "</s>", "<pad>", "<mask>", "<unk>"], unk_token="<unk>"))
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")),
                                                      ("<s>", tok.token_to_id("<s>")))
    path = tmp_path / f"unigram-{lowercase}.json"
    tok.save(str(path))
    return str(path)


def test_a_unigram_finds_its_roles_by_name_and_reads_its_casing(tmp_path):
    for lowercase in (False, True):
        path = unigram(tmp_path, lowercase)
        tok = subwords.load(path)
        specials = subwords.find_specials(tok, path)
        assert specials == subwords.Specials(cls=0, sep=1, pad=2, mask=3, unk=4)
        assert subwords.lowercases(tok) is lowercase and subwords.model_type(tok) == "Unigram"
    named = subwords.find_specials(tok, path, subwords.parse_overrides("cls=</s>, sep=<s>"))
    assert (named.cls, named.sep) == (1, 0)


def test_berts_own_wordpiece_and_its_template(tmp_path):
    """HF's BertProcessing and TemplateProcessing frame a pair the same: [CLS] and [SEP] either way."""
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world"]
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(tokens)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    for post in (processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2)),
                 processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                               special_tokens=[("[CLS]", 2), ("[SEP]", 3)])):
        tok.post_processor = post
        assert subwords.find_specials(tok, "wp.json") == subwords.Specials(cls=2, sep=3, mask=4, pad=0, unk=1)
    assert subwords.lowercases(tok) and subwords.model_type(tok) == "WordPiece"


def test_bad_input_is_one_line(tmp_path, capsys):
    not_json = tmp_path / "vocab.txt"
    not_json.write_text("[PAD]\n[UNK]\n")
    assert "is not a tokenizer.json of the `tokenizers` library" in refusal(capsys, "--extend", not_json, "--output",
                                                                             tmp_path / "o.json")
    assert "no such file" in refusal(capsys, "--extend", tmp_path / "none.json", "--output", tmp_path / "o.json")
    assert "give one of --input" in refusal(capsys, "--output", tmp_path / "o.json")
    assert "give one of --input" in refusal(capsys, "--extend", GPT2, "--input", tmp_path, "--output", tmp_path / "o")
    assert "--cased is for learning a vocab.txt" in refusal(capsys, "--extend", GPT2, "--cased", "--output",
                                                             tmp_path / "o.json")
    assert "--pad-to-multiple goes with --extend" in refusal(capsys, "--input", tmp_path, "--pad-to-multiple", "64",
                                                            "--output", tmp_path / "o.txt")
    assert not (tmp_path / "o.json").exists()
    path = unigram(tmp_path, False)
    with pytest.raises(subwords.TokenizerError, match=r"--special-tokens mask=\[MASK\]: '\[MASK\]' is not in"):
        subwords.find_specials(subwords.load(path), path, {"mask": "[MASK]"})
    with pytest.raises(ValueError, match="expected ROLE=TOKEN"):
        subwords.parse_overrides("bos=<s>")


def segments(encoded, budget: int):
    """Runs of consecutive sentences, each cut where the next sentence would pass `budget` tokens, as the pairing
    fills a segment: (first sentence, last + 1)."""
    runs, start, size = [], 0, 0
    for i, (ids, _) in enumerate(encoded):
        if size and size + len(ids) > budget:
            runs.append((start, i))
            start, size = i, 0
        size += len(ids)
    return runs + ([(start, len(encoded))] if size else [])


def test_segments_of_real_text_decode_to_their_span_and_encode_back(tmp_path):
    """Issue 37's fidelity on the bundled books and Wikipedia sample with GPT-2 extended: every segment's ids
    (its sentences' ids concatenated) decode to the document's text of that span and encoding that text gives the
    same ids; word starts are where the pre-tokenizer's words start."""
    from corpora.books import plan_reads as book_reads, read_books
    from corpora.wikipedia import ReadRange, page_to_document, read_pages
    from pipeline.formats.documents import Document
    from pipeline.text import sentences

    assert vocab("--extend", GPT2, "--output", tmp_path / "t.json", "--pad-to-multiple", "64") == 0
    tok = subwords.load(str(tmp_path / "t.json"))
    docs = [d for p in book_reads([str(REPO / "corpora" / "samples" / "books")]) for d in read_books(p)
            if isinstance(d, Document)]
    pages = [p for p in read_pages(ReadRange(str(REPO / "corpora" / "samples" / "enwiki-sample.xml.bz2")))
             if type(p).__name__ == "Page"]
    docs += [d for page in pages for d in page_to_document(page) if isinstance(d, Document)]
    checked, wrong, words = 0, [], 0
    for doc in docs:
        split = [sentences.split_paragraph(p) for p in doc.paragraphs]
        texts = subwords.document_texts(split, doc.paragraphs)
        assert "".join(texts).split() == "\n\n".join(doc.paragraphs).split()   # every word, once, in order
        encoded = subwords.encode(tok, texts)
        for budget in (128, 1024):
            for a, b in segments(encoded, budget):
                ids = [i for e, _ in encoded[a:b] for i in e]
                text = "".join(texts[a:b])
                checked += 1
                if tok.decode(ids, skip_special_tokens=False) != text or \
                        tok.encode(text, add_special_tokens=False).ids != ids:
                    wrong.append((doc.id, a, text[:60]))
        for (ids, starts), text in zip(encoded, texts):
            words += sum(starts)
            assert starts[0] and len(starts) == len(ids)
    assert len(docs) == 23 and checked > 2000 and words > 200_000   # 3 books, 20 articles
    assert wrong == []   # byte-level BPE: no exception at all
