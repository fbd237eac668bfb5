"""How a vocab fits the text it tokenizes: the casing a google vocab.txt says (so --cased/--uncased default to it
and a flag that contradicts it is refused), and the share of [UNK] a job and `inspect` report. No HF tokenizers and
no Beam here: the command line's checks read it."""
from __future__ import annotations

from dataclasses import dataclass

# A vocab is cased when at least this share of its entries (bracketed specials apart) change when lowercased.
# google's uncased vocabs have none (their text was lowercased before the vocab was learned), their cased ones
# 29% (8,366 of 28,890 in bert-base-cased); any vocab learned on text that kept its case has thousands (names,
# sentence starts). 1%, not "any": a few capitalised entries added by hand to an uncased vocab (domain terms) do
# not make it cased, where keeping case would make every capitalised word of the text [UNK].
CASED_SHARE = 0.01


@dataclass(frozen=True)
class Casing:
    """What a vocab.txt says of casing: its entries (bracketed specials apart) and those lowercasing changes."""
    entries: int
    capitalised: int

    @classmethod
    def of(cls, vocab: list[str]) -> "Casing":
        words = [t for t in vocab if not (t.startswith("[") and t.endswith("]"))]
        return cls(len(words), sum(t != t.lower() for t in words))

    @property
    def lowercase(self) -> bool:
        return self.capitalised < CASED_SHARE * self.entries

    @property
    def name(self) -> str:
        return "uncased" if self.lowercase else "cased"

    def describe(self) -> str:
        """"an uncased vocab: none of its 29,523 entries has an upper-case letter ...", for a refusal."""
        held = ("none of its {:,} entries has" if not self.capitalised else
                f"{self.capitalised:,} of its {{:,}} entries ({100 * self.capitalised / self.entries:.2f}%) have")
        return (f"{article(self.name)} vocab: {held.format(self.entries)} an upper-case letter ([CLS]-style "
                "specials apart)")


def contradiction(casing: str | None, path: str, found: Casing) -> str | None:
    """The refusal of a --cased/--uncased (`casing`) that the vocab at `path` contradicts, or None."""
    if casing is None or (casing == "uncased") == found.lowercase:
        return None
    return (f"--{casing} with --vocab {path}: {found.describe()}; leave --{casing} out, or give "
            f"{article(casing)} vocab")


def article(word: str) -> str:
    return f"{'an' if word[0] in 'aeiou' else 'a'} {word}"


# [UNK] above this share of the tokens: the vocab does not fit the text (its casing, language or script), and the
# words it hides are lost to the model
UNK_WARNING_SHARE = 0.01


def unk_line(unk: int, tokens: int, where: str) -> str:
    """"[UNK] 0.01% of the 240,525 tokens tokenized (26)"; `where`: what was counted ("tokenized", "in the
    instances")."""
    return f"[UNK] {100 * unk / max(1, tokens):.2f}% of the {tokens:,} tokens {where} ({unk:,})"


def unk_warning(share: float, where: str) -> str | None:
    """The warning on a share of [UNK] over UNK_WARNING_SHARE (None at or under it)."""
    if share <= UNK_WARNING_SHARE:
        return None
    return (f"[UNK] is {100 * share:.2f}% of the tokens {where}, over {100 * UNK_WARNING_SHARE:g}%: the vocab does "
            "not fit this text (its casing, language or script), and the words it hides are lost to the model")
