"""Reading a Prometheus text page (``/metrics``): the one parser the autoscaler, the operator and ``shoal up`` use.

``prometheus_client``'s own text parser does the reading, so exposition details (escaping, ``_total``/``_bucket``
suffixes, label order) are the library's business, not ours; a page that is not Prometheus text raises
:class:`PromTextError` whatever the parser tripped on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from prometheus_client.parser import text_string_to_metric_families


class PromTextError(ValueError):
    """The page is not Prometheus text."""


class Sample(NamedTuple):
    """One line of a page: its family (``x`` for ``x_total`` or ``x_bucket``), its own name, labels and value."""

    family: str
    name: str
    labels: dict[str, str]
    value: float


def samples(text: str) -> Iterator[Sample]:
    """Every sample on the page, in page order."""
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                yield Sample(family.name, sample.name, sample.labels, sample.value)
    except (ValueError, KeyError, IndexError, TypeError) as error:
        raise PromTextError(f"not Prometheus text: {error}") from error


def samples_named(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample called ``name`` (``_total``/``_bucket`` included) with its labels."""
    return [(sample.labels, sample.value) for sample in samples(text) if sample.name == name]


def family_sum(text: str, family: str) -> float:
    """The sum of a family's samples (a gauge summed over its label sets); 0 when the page has none."""
    return sum(sample.value for sample in samples(text) if sample.family == family)
