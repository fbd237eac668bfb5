"""Counts that travel as data, so that the job itself can check them and publish its output.

Beam's counters reach only the launcher, and only once the job has ended (on Dataflow, only if the launcher waits).
A job that publishes itself (pipeline/beam/publish.py) needs its counts inside the job: every step that counts is
a `tally.DoFn`. Its counts go to Beam's counters (the runner's UI, the launcher's summary) and, once per bundle, to
its `tally` output as one {"namespace/name": n} dict. A runner keeps the outputs of the bundles it commits and
drops those of a bundle that failed or ran twice, so the tallies summed (`total`) are the committed counters, on
any runner.

    out = pcoll | "Step" >> tally.ParDo(MyFn())       # MyFn(tally.DoFn) calls self.count("ns", "name", n)
    out = pcoll | "Step" >> tally.FlatMap(fn, arg)    # fn(element, arg, count=...) counts through `count`
    self.count(*tally.parts(TOKENIZED))               # a count other modules read: its full name, a constant
    counts = tally.total(pipeline)                    # the last step built: one dict of every tally, summed
    self.count("jsonl", "not_json", where=("a.jsonl:3",))   # and where: the first few kept (counts[WHERE])
    self.most("lengths", "books_longest", n)          # the largest n seen (a Beam distribution's max), not a sum

A ParDo registers its tally with its pipeline; `total` takes every one registered, so it is built last (a
registration after it is refused).
"""
from __future__ import annotations

import re
import weakref
from typing import Callable, Iterable

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from pipeline.formats.documents import WHERE_SHOWN

TAG = "tally"
Counts = dict[str, int]   # "namespace/name" -> n; and under WHERE, {"namespace/name": [where, ...]}
WHERE = "@where"          # not a counter: the places counts were made at (Count.where), the first WHERE_SHOWN each
MOST = "@most"            # the largest values seen ({"namespace/name": n}), folded into the total as plain counts

_REGISTERED: "weakref.WeakKeyDictionary[beam.Pipeline, list]" = weakref.WeakKeyDictionary()
_CLOSED = object()


class DoFn(beam.DoFn):
    """A DoFn that counts with `self.count(namespace, name, n)`: a Beam counter, and its bundle's tally."""

    def count(self, namespace: str, name: str, n: int = 1, where: tuple[str, ...] = ()) -> None:
        key = f"{namespace}/{name}"
        tally = self.__dict__.setdefault("_tally", {})
        tally[key] = tally.get(key, 0) + n
        if where:
            places = tally.setdefault(WHERE, {}).setdefault(key, [])
            places.extend(where[:WHERE_SHOWN - len(places)])
        metrics = self.__dict__.setdefault("_metrics", {})
        counter = metrics.get(key)
        if counter is None:
            counter = metrics[key] = Metrics.counter(namespace, name)
        counter.inc(n)

    def most(self, namespace: str, name: str, n: int) -> None:
        """Records n if it is the largest seen under namespace/name (a longest document): a Beam distribution, and
        its bundle's tally, whose maxima the total keeps (never summed)."""
        key = f"{namespace}/{name}"
        found = self.__dict__.setdefault("_tally", {}).setdefault(MOST, {})
        found[key] = max(found.get(key, n), n)
        metrics = self.__dict__.setdefault("_distributions", {})
        distribution = metrics.get(key)
        if distribution is None:
            distribution = metrics[key] = Metrics.distribution(namespace, name)
        distribution.update(n)

    def start_bundle(self):
        """A bundle's counts start at nothing, whatever an earlier bundle of this instance left (a subclass with its
        own start_bundle calls this)."""
        self.__dict__.pop("_tally", None)

    def finish_bundle(self):
        """The bundle's counts on the `tally` output (a subclass with its own finish_bundle yields from this)."""
        tally = self.__dict__.pop("_tally", None)
        if tally:
            yield beam.pvalue.TaggedOutput(TAG, GlobalWindows.windowed_value(tally))


class _Calls(DoFn):
    """A function of (element, *args, count=...) -> the elements it yields."""

    def __init__(self, fn: Callable[..., Iterable], args: tuple, kwargs: dict):
        self.fn, self.args, self.kwargs = fn, args, kwargs

    def process(self, element):
        return self.fn(element, *self.args, count=self.count, **self.kwargs)


def parts(counter: str) -> tuple[str, str]:
    """A count's full name ("namespace/name", as the tallies, the manifest and other modules read it) -> (namespace,
    name): a count named by a constant is counted as count(*parts(C), n)."""
    namespace, _, name = counter.partition("/")
    return namespace, name


def _register(pipeline: beam.Pipeline, tally) -> None:
    found = _REGISTERED.setdefault(pipeline, [])
    if found and found[-1] is _CLOSED:
        raise RuntimeError("a counting step was added after tally.total: its counts would not be published")
    found.append(tally)


class ParDo(beam.PTransform):
    """ParDo of a tally.DoFn -> its main output (or, with `outputs`, every output by tag, as ParDo.with_outputs
    gives them); its tally is registered with the pipeline for `total`."""

    def __init__(self, fn: DoFn, *args, outputs: tuple[str, ...] = (), main: str = "main", **kwargs):
        super().__init__()
        if not isinstance(fn, DoFn):
            raise TypeError(f"{type(fn).__name__} is not a tally.DoFn: its counts would not be published")
        self.fn, self.args, self.kwargs, self.outputs, self.main = fn, args, kwargs, tuple(outputs), main

    def expand(self, pcoll):
        # as ParDo.with_outputs, less one level of labels: the ParDo itself, its outputs taken by tag
        do = beam.ParDo(self.fn, *self.args, **self.kwargs)
        main = pcoll | do
        out = beam.pvalue.DoOutputsTuple(pcoll.pipeline, do, (TAG, *self.outputs), self.main)
        out.producer = main.producer.parent   # this transform, whose one part is `do`
        _register(pcoll.pipeline, out[TAG])
        return out if self.outputs else main


def FlatMap(fn: Callable[..., Iterable], *args, outputs: tuple[str, ...] = (), main: str = "main",
            **kwargs) -> ParDo:
    """beam.FlatMap of a function that counts: fn(element, *args, count=count, **kwargs)."""
    return ParDo(_Calls(fn, args, kwargs), outputs=outputs, main=main)


def Map(fn: Callable, *args, **kwargs) -> ParDo:
    """beam.Map of a function that counts: fn(element, *args, count=count, **kwargs) is the one output."""
    return FlatMap(_one, fn, *args, **kwargs)


def _one(element, fn, *args, count, **kwargs):
    yield fn(element, *args, count=count, **kwargs)


class _Sum(beam.CombineFn):
    """Dicts of counts -> their sum; merged in place, so memory is one dict whatever the number of bundles."""

    def create_accumulator(self) -> Counts:
        return {}

    def add_input(self, acc: Counts, counts: Counts) -> Counts:
        for key, n in counts.items():
            if key == WHERE:   # the first places in sorted order, whatever the bundles' order
                found = acc.setdefault(WHERE, {})
                for counter, places in n.items():
                    found[counter] = sorted(set(found.get(counter, [])) | set(places), key=_natural)[:WHERE_SHOWN]
            elif key == MOST:
                found = acc.setdefault(MOST, {})
                for counter, most in n.items():
                    found[counter] = max(found.get(counter, most), most)
            else:
                acc[key] = acc.get(key, 0) + n
        return acc

    def merge_accumulators(self, accumulators) -> Counts:
        accumulators = iter(accumulators)
        acc = next(accumulators, None) or {}
        for other in accumulators:
            self.add_input(acc, other)
        return acc

    def extract_output(self, acc: Counts) -> Counts:
        acc = dict(acc)
        acc.update(acc.pop(MOST, {}))   # a maximum reads as a count once the bundles are combined
        return dict(sorted(acc.items()))


def _natural(place: str) -> tuple:
    """"a.jsonl:10" after "a.jsonl:9": numbers compared as numbers."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", place))


def places(counts: Counts) -> tuple[Counts, dict[str, list[str]]]:
    """A total -> (its counters, the places of those that name theirs)."""
    counts = dict(counts)
    return counts, counts.pop(WHERE, {})


class _Total(beam.PTransform):
    def expand(self, tallies):
        keyed = [t | f"Key{i}" >> beam.Map(lambda counts: (None, counts)) for i, t in enumerate(tallies)]
        return (tuple(keyed)
                | "Join" >> beam.Flatten()
                | "Sum" >> beam.CombinePerKey(_Sum())
                | "Values" >> beam.Values())


def total(pipeline: beam.Pipeline, label: str = "Counts"):
    """-> one element: the sum of every tally registered in `pipeline` so far, {"namespace/name": n} (an empty dict
    when nothing counted). Closes the registry: it is the job's last count."""
    found = _REGISTERED.setdefault(pipeline, [])
    tallies = [t for t in found if t is not _CLOSED]
    found.append(_CLOSED)
    start = pipeline | f"{label}Start" >> beam.Create([{}])   # a total even when nothing counted
    return (start, *tallies) | label >> _Total()
