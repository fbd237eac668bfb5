import collections
import fnmatch
import os
from pathlib import Path

import pytest
from hypothesis import settings

from pipeline.formats.documents import Count, Document

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# Every Hypothesis test draws the same examples on every run (a seed from the test itself, no example database
# replayed from an earlier run): a failure reproduces, and the suite is seeded like the code it tests. A test's own
# @settings(max_examples=...) inherits these, being made after this file is loaded.
settings.register_profile("bertprep", derandomize=True, database=None, print_blob=True)
settings.load_profile("bertprep")

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "corpora" / "samples"
UNCASED_VOCAB = SAMPLES / "vocab-uncased.txt"


def console(argv: list, capsys) -> tuple[int, str]:
    """(exit status, stderr) as a shell shows them for `bertprep ARGV`, run in-process: a second import of Beam and
    TensorFlow costs each subprocess ~3 s, so a refusal test runs its first case as a real process (the entry point
    prints one line, no traceback) and the rest here."""
    from pipeline.commands import cli
    capsys.readouterr()
    try:
        code = cli.main([str(a) for a in argv])
    except SystemExit as e:
        err = capsys.readouterr().err
        if isinstance(e.code, str):   # Python prints the message on stderr and exits 1
            return 1, err + e.code + "\n"
        return e.code, err
    return code, capsys.readouterr().err


@pytest.fixture(scope="session")
def uncased_vocab() -> list[str]:
    from pipeline.text import tokenization

    return tokenization.read_vocab(str(UNCASED_VOCAB))


def collect(events) -> tuple[list[Document], dict[str, int]]:
    """A corpus reader's output split into its documents and its summed counters; anything else fails."""
    docs, counts = [], collections.Counter()
    for e in events:
        if isinstance(e, Document):
            docs.append(e)
        else:
            assert isinstance(e, Count)
            counts[e.name] += e.n
    return docs, dict(counts)


def documents_holding(tokens: dict[str, bytes], segment) -> set[str]:
    """The ids of the documents whose tokens ({id: little-endian int32 bytes}) contain `segment` at a token
    boundary."""
    needle = segment.astype("<i4").tobytes()
    found = set()
    for doc_id, hay in tokens.items():
        at = hay.find(needle)
        while at >= 0 and at % 4:
            at = hay.find(needle, at + 1)
        if at >= 0:
            found.add(doc_id)
    return found


def same_tree(a, b, ignore: tuple[str, ...] = ()) -> int:
    """Asserts that directories `a` and `b` hold the same files at every depth (hidden ones too), byte for byte, and
    at least one; returns how many. `ignore`: fnmatch patterns of relative paths ("manifest.json",
    "validation/*") left out of both sides, each for a reason its caller gives."""
    def files(root: Path) -> list[str]:
        names = (p.relative_to(root).as_posix() for p in Path(root).rglob("*") if p.is_file())
        return sorted(n for n in names if not any(fnmatch.fnmatch(n, pattern) for pattern in ignore))

    names = files(a)
    assert names == files(b), f"{a} and {b} hold different files"
    assert names, f"no file to compare in {a}"
    for name in names:
        assert (Path(a) / name).read_bytes() == (Path(b) / name).read_bytes(), f"{name} differs"
    return len(names)


def tf_examples(directory) -> list[dict]:
    """Every record of the *.tfrecord files in `directory` (in name order), read with TensorFlow's own reader and
    parser, not ours: {feature: numpy array of its values}."""
    import numpy as np
    import tensorflow as tf

    rows = []
    for path in sorted(Path(directory).glob("*.tfrecord")):
        for raw in tf.data.TFRecordDataset(str(path)):
            example = tf.train.Example.FromString(raw.numpy())
            rows.append({name: np.array(getattr(f, f.WhichOneof("kind")).value)
                         for name, f in example.features.feature.items()})
    return rows


@pytest.fixture
def one_thread():
    """Tiny models run fastest on one thread, and a shared CI machine then does not stall OpenMP barriers."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


# The files whose tests take longest (pytest --durations=0 on 2 cores, issue 46: 20-130 s each), run first: with
# `-n 2 --dist loadfile` a worker takes the next file as it finishes one, so a long file taken last leaves the other
# worker idle to the end. Longest first keeps both busy; order within a file is kept (its module fixtures).
FIRST = ("test_tokenizer_data.py", "test_examples.py", "test_objectives_end_to_end.py", "test_end_to_end.py",
         "test_train_ranks.py", "test_corpora_mixed.py", "test_objectstore.py", "test_convert.py",
         "test_validation.py", "test_whole_words.py", "test_runners.py", "test_shares.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))   # stable: collection order otherwise
