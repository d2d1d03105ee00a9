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

from events.validation import quantity_text

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
    too_long = quantity_text(value)
    if too_long:
        raise QuantityError(too_long)  # before any int() of its digits: Python refuses over 4300
    m = _QUANTITY_RE.fullmatch(value.strip())
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


_DECIMAL_SUFFIX: Final = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_BINARY_SUFFIX: Final = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def _is_binary(resource: str) -> bool:
    """Byte-valued resources, which Kueue prints with binary suffixes (``resources.ResourceQuantity``)."""
    return resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-")


def _decimal_si(value: int, exponent: int) -> str:
    """``value * 10**exponent`` as Kubernetes' canonical DecimalSI string (``1500m``, ``2``, ``100k``, ``1G``).

    The exponent is kept a multiple of 3 and at most 18 (``E``), the largest suffix; past that
    the mantissa grows instead, so every integer has an exact, parseable form."""
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    value = abs(value)
    while value % 10 == 0 and exponent < 18:
        value //= 10
        exponent += 1
    shift = exponent % 3
    value, exponent = value * 10**shift, exponent - shift
    return f"{sign}{value}{_DECIMAL_SUFFIX[exponent]}"


def format_amount(resource: str, amount: int) -> str:
    """Canonical quantity string for an integer amount, as Kueue prints it in messages and
    ``resourceUsage`` (``resources.ResourceQuantityString``): cpu as a milli quantity in DecimalSI
    (``500m``, ``2``, ``1k``), memory / ephemeral-storage / hugepages-* in BinarySI when a binary
    suffix is exact (``1Gi``, ``1536Mi``) and DecimalSI otherwise (``1G``, ``1500``), every other
    resource in DecimalSI (``8``, ``1k``). The inverse of :func:`to_amount`."""
    if resource in MILLI_RESOURCES:
        return _decimal_si(amount, -3)
    if _is_binary(resource) and abs(amount) >= 1024:
        mantissa, power = amount, 0
        while mantissa % 1024 == 0 and power < len(_BINARY_SUFFIX) - 1:
            mantissa //= 1024
            power += 1
        if power:
            return f"{mantissa}{_BINARY_SUFFIX[power]}"
    return _decimal_si(amount, 0)
