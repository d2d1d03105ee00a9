"""Kubernetes resource quantities, parsed exactly into integers.

Quota arithmetic never touches floats: a quantity such as ``500m``, ``36Gi``,
``1e3`` or ``0.5`` is parsed as an exact fraction and converted the way Kueue's
``resources.ResourceValue`` does it: cpu in milli-units, every other resource in
whole units (bytes for memory), rounding up like ``resource.Quantity.Value()``.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Final

_BINARY: Final = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}
_DECIMAL: Final = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY_RE: Final = re.compile(
    r"^(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?[0-9]+)|(?P<dec>[numkMGTPE]?))$"
)
# Resources whose unit is too coarse for requests: Kueue accounts them in milli-units.
MILLI_RESOURCES: Final = frozenset({"cpu"})


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity."""


def parse_fraction(value: object) -> Fraction:
    """The exact value of a quantity given as YAML would give it (str, int or float)."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        # YAML `0.5`: take the shortest decimal that prints as this float, never its binary expansion.
        text = repr(value)
        if "inf" in text or "nan" in text:
            raise QuantityError(f"{value!r} is not a quantity")
        return Fraction(text)
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity")
    m = _QUANTITY_RE.match(value.strip())
    if m is None or value.strip() == "":
        raise QuantityError(f"{value!r} is not a quantity (expected e.g. 500m, 4, 36Gi, 1e3)")
    number = Fraction(m.group("num"))
    if m.group("bin"):
        return number * _BINARY[m.group("bin")]
    if m.group("exp"):
        exp = int(m.group("exp")[1:])
        if abs(exp) > 60:
            raise QuantityError(f"{value!r}: exponent out of range")
        return number * Fraction(10) ** exp
    return number * _DECIMAL[m.group("dec") or ""]


def _ceil(f: Fraction) -> int:
    return -((-f.numerator) // f.denominator)


def to_amount(resource: str, value: object) -> int:
    """Integer amount of ``resource``: milli-units for cpu, whole units (rounded up) otherwise."""
    f = parse_fraction(value)
    if resource in MILLI_RESOURCES:
        return _ceil(f * 1000)
    return _ceil(f)


def format_amount(resource: str, amount: int) -> str:
    """Canonical quantity string for an integer amount (the inverse of :func:`to_amount`)."""
    if resource in MILLI_RESOURCES:
        if amount % 1000 == 0:
            return str(amount // 1000)
        return f"{amount}m"
    if amount != 0:
        for suffix, size in reversed(list(_BINARY.items())):
            if amount % size == 0:
                return f"{amount // size}{suffix}"
        if amount % 1000 == 0:
            for suffix in ("E", "P", "T", "G", "M", "k"):
                size = int(_DECIMAL[suffix])
                if amount % size == 0:
                    return f"{amount // size}{suffix}"
    return str(amount)
