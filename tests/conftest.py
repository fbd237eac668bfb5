import os
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "corpora" / "samples"
UNCASED_VOCAB = SAMPLES / "vocab-uncased.txt"


@pytest.fixture(scope="session")
def uncased_vocab() -> list[str]:
    from pipeline import tokenization

    return tokenization.read_vocab(str(UNCASED_VOCAB))
