"""Kubernetes quantities ("8Gi", "500m", "1.5") read exactly, as the apiserver and the kubelet read them."""

from __future__ import annotations

import math
from fractions import Fraction

_SUFFIXES: dict[str, int | Fraction] = {
    "": 1,
    "m": Fraction(1, 1000),
    "k": 10**3,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def quantity_value(quantity: str) -> Fraction:
    """The quantity's exact value (a ``Fraction``, so "1.1Gi" is not off by a float's last bit)."""
    number = quantity.rstrip("kKMGTPEim")
    return Fraction(number) * _SUFFIXES[quantity[len(number) :]]


def quantity_bytes(quantity: str) -> int:
    """A memory quantity (even "500m") as whole bytes, rounded up as the kubelet rounds memory."""
    return math.ceil(quantity_value(quantity))
