"""The BERT model config: one dataclass, the paper's presets, and its JSON form (stored in every checkpoint)."""
from __future__ import annotations

import dataclasses
import difflib
import json
import os
from dataclasses import dataclass


@dataclass
class BertConfig:
    vocab_size: int = 30522              # bert-base-uncased's WordPiece vocab; the trainer sets it from the shards
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072         # the FFN's inner width, 4 * hidden in every preset
    max_position_embeddings: int = 512    # learned positions; must be >= the shards' max_seq_length
    type_vocab_size: int = 2              # segment A / segment B
    dropout: float = 0.1                  # google uses 0.1 both after attention probs and on hidden states
    # On attention probabilities: None is `dropout` (google's), so configs from before the field read as they were.
    # 0 (ModernBERT's, MosaicBERT's) lets packed rows run varlen FlashAttention, which has no dropout (model/bert.py).
    attention_dropout: float | None = None
    layer_norm_eps: float = 1e-12         # google's value (torch's default 1e-5 changes results)
    initializer_range: float = 0.02       # std of the truncated normal every weight starts from
    # A tokenizer.json's entries where the embedding has more rows (rounded up to whole 64-row tiles:
    # Vocabulary.embedding_rows): the MLM head predicts these only (model/bert.py). None: every row is a token.
    # Left out of the JSON while None, so the configs of vocab.txt runs read and write as they always have.
    tokenizer_size: int | None = None

    def __post_init__(self):
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of num_heads {self.num_heads}")
        if self.tokenizer_size is not None and not 0 < self.tokenizer_size < self.vocab_size:
            raise ValueError(f"tokenizer_size {self.tokenizer_size} is not below vocab_size {self.vocab_size} (None: "
                             "no padded rows)")
        if self.attention_dropout is not None and not 0.0 <= self.attention_dropout < 1.0:
            raise ValueError(f"attention_dropout {self.attention_dropout} is not in [0, 1)")

    @property
    def attention_probs_dropout(self) -> float:
        """The dropout applied to attention probabilities: attention_dropout, or dropout where that is None."""
        return self.dropout if self.attention_dropout is None else self.attention_dropout

    @property
    def num_tokens(self) -> int:
        """The ids the data holds and the MLM head predicts: the rows below tokenizer_size, else all of them."""
        return self.tokenizer_size or self.vocab_size

    def to_json(self) -> str:
        fields = dataclasses.asdict(self)
        if self.tokenizer_size is None:
            del fields["tokenizer_size"]
        return json.dumps(fields, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "BertConfig":
        fields = json.loads(text)
        unknown = set(fields) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown BertConfig fields: {sorted(unknown)}")
        return cls(**fields)


# The paper's BERT-Base/Large and the small sizes of google's "Well-Read Students" release (L/H/A, I = 4H).
PRESETS = {
    "tiny": dict(num_layers=2, hidden_size=128, num_heads=2, intermediate_size=512),
    "mini": dict(num_layers=4, hidden_size=256, num_heads=4, intermediate_size=1024),
    "base": dict(num_layers=12, hidden_size=768, num_heads=12, intermediate_size=3072),
    "large": dict(num_layers=24, hidden_size=1024, num_heads=16, intermediate_size=4096),
}


def from_name_or_json(spec: str, vocab_size: int | None = None) -> BertConfig:
    """A preset name (tiny|mini|base|large) or the path of a config JSON; `vocab_size` overrides the vocab."""
    if spec in PRESETS:
        config = BertConfig(**PRESETS[spec])
    elif os.path.isfile(spec):
        with open(spec) as f:
            config = BertConfig.from_json(f.read())
    else:
        near = difflib.get_close_matches(spec, PRESETS, n=1, cutoff=0.6)
        raise ValueError(f"--model {spec!r}: neither a preset ({'|'.join(PRESETS)}) nor a config JSON file"
                         + (f"; did you mean {near[0]}?" if near else ""))
    if vocab_size is not None:
        config = dataclasses.replace(config, vocab_size=vocab_size)
    return config
