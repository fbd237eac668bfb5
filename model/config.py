"""The BERT model config: one dataclass, the paper's presets, and its JSON form (stored in every checkpoint); and
what a model config of any architecture shares: its `architecture` field, its JSON, the padded embedding rows of a
tokenizer.json. model/architectures.py maps an architecture's name to its config class and presets.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

# The architecture a config JSON without the field is: every config written before there was a choice was BERT's.
DEFAULT_ARCHITECTURE = "bert"


def config_json(config) -> str:
    """A model config's JSON: its fields, less `architecture` where it is the default (configs written before the
    field read and write as they always have) and `tokenizer_size` while None (likewise, vocab.txt runs')."""
    fields = dataclasses.asdict(config)
    if fields.get("architecture") == DEFAULT_ARCHITECTURE:
        del fields["architecture"]
    if "tokenizer_size" in fields and fields["tokenizer_size"] is None:
        del fields["tokenizer_size"]
    return json.dumps(fields, indent=2) + "\n"


def architecture_of(text: str) -> str:
    """The architecture a config JSON names; DEFAULT_ARCHITECTURE where it names none."""
    fields = json.loads(text)
    return fields.get("architecture", DEFAULT_ARCHITECTURE) if isinstance(fields, dict) else DEFAULT_ARCHITECTURE


def config_from_json(cls, text: str):
    """A `cls` config from its JSON; ValueError naming the fields `cls` does not have."""
    fields = json.loads(text)
    unknown = set(fields) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise ValueError(f"unknown {cls.__name__} fields: {sorted(unknown)}")
    return cls(**fields)


class ModelConfig:
    """What every architecture's config dataclass shares (its fields vocab_size and tokenizer_size): the rows the MLM
    head predicts, and its JSON."""

    def check_rows(self) -> None:
        if self.tokenizer_size is not None and not 0 < self.tokenizer_size < self.vocab_size:
            raise ValueError(f"tokenizer_size {self.tokenizer_size} is not below vocab_size {self.vocab_size} (None: "
                             "no padded rows)")

    @property
    def num_tokens(self) -> int:
        """The ids the data holds and the MLM head predicts: the rows below tokenizer_size, else all of them."""
        return self.tokenizer_size or self.vocab_size

    def to_json(self) -> str:
        return config_json(self)

    @classmethod
    def from_json(cls, text: str):
        return config_from_json(cls, text)


@dataclass
class BertConfig(ModelConfig):
    vocab_size: int = 30522              # bert-base-uncased's WordPiece vocab; the trainer sets it from the shards
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072         # the FFN's inner width, 4 * hidden in every preset
    max_position_embeddings: int = 512    # learned positions; must be >= the shards' max_seq_length
    type_vocab_size: int = 2              # segment A / segment B
    dropout: float = 0.1                  # google uses 0.1 both after attention probs and on hidden states
    # On attention probabilities: None is `dropout` (google's), so configs from before the field read as they were.
    # 0 (ModernBERT's, MosaicBERT's) lets packed rows run varlen FlashAttention, which has no dropout
    # (model/attention.py).
    attention_dropout: float | None = None
    layer_norm_eps: float = 1e-12         # google's value (torch's default 1e-5 changes results)
    initializer_range: float = 0.02       # std of the truncated normal every weight starts from
    # A tokenizer.json's entries where the embedding has more rows (rounded up to whole 64-row tiles:
    # Vocabulary.embedding_rows): the MLM head predicts these only (model/bert.py). None: every row is a token.
    # Left out of the JSON while None, so the configs of vocab.txt runs read and write as they always have.
    tokenizer_size: int | None = None
    architecture: str = "bert"           # model/architectures.py's name; left out of the JSON (config_json)

    def __post_init__(self):
        if self.architecture != "bert":
            raise ValueError(f"architecture {self.architecture!r} in a BERT config (model/architectures.py maps each "
                             "architecture to its config)")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of num_heads {self.num_heads}")
        self.check_rows()
        if self.attention_dropout is not None and not 0.0 <= self.attention_dropout < 1.0:
            raise ValueError(f"attention_dropout {self.attention_dropout} is not in [0, 1)")

    @property
    def attention_probs_dropout(self) -> float:
        """The dropout applied to attention probabilities: attention_dropout, or dropout where that is None."""
        return self.dropout if self.attention_dropout is None else self.attention_dropout



# A --model config JSON's keys, BertConfig's fields, in words (`train --help` and the README list them); any left
# out take the default above, BERT-Base's.
KEYS = {
    "vocab_size": "token embedding rows: the shards' vocab size (a preset takes it from the data)",
    "hidden_size": "the width of every layer (a multiple of num_heads)",
    "num_layers": "transformer layers",
    "num_heads": "attention heads per layer",
    "intermediate_size": "the feed-forward layer's inner width (4 x hidden_size in every preset)",
    "max_position_embeddings": "learned positions, at least the shards' max_seq_length",
    "type_vocab_size": "segment ids (2: sentences A and B)",
    "dropout": "on hidden states, and on attention probabilities unless attention_dropout says otherwise",
    "attention_dropout": "on attention probabilities (null: dropout's; 0 lets packed rows run varlen FlashAttention)",
    "layer_norm_eps": "LayerNorm's epsilon",
    "initializer_range": "the standard deviation of the truncated normal every weight starts from",
    "tokenizer_size": "written by the trainer: the rows that are a tokenizer.json's tokens (leave it out)",
    "architecture": "written by the trainer where not bert (leave it out)",
}


# The paper's BERT-Base/Large and the small sizes of google's "Well-Read Students" release (L/H/A, I = 4H).
PRESETS = {
    "tiny": dict(num_layers=2, hidden_size=128, num_heads=2, intermediate_size=512),
    "mini": dict(num_layers=4, hidden_size=256, num_heads=4, intermediate_size=1024),
    "base": dict(num_layers=12, hidden_size=768, num_heads=12, intermediate_size=3072),
    "large": dict(num_layers=24, hidden_size=1024, num_heads=16, intermediate_size=4096),
}


