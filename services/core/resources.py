"""What one pod of a podSet counts against quota: Kueue's excluded resources and resource transformations.

Kueue computes a workload's requests once (``totalRequestsFromPodSets`` in
``pkg/workload/workload.go``): resources whose names start with an excluded prefix are dropped,
then the Configuration's ``resources.transformations`` turn each named input into outputs:

- every output is the input's quantity times the output's factor per unit of input (times the
  quantity of ``multiplyBy`` when the pod requests it); outputs of several inputs, and an
  output that shares a name with a request, are summed;
- a negative factor is an allowance: it cancels other outputs of the same name, but a total
  below zero is zero, so it never reaches a request the pod made directly;
- strategy ``Retain`` keeps the input as requested (not multiplied), ``Replace`` drops it.

The arithmetic is exact (fractions) and the result is rounded the way Kueue turns a quantity
into an amount (cpu in milli-units, everything else rounded up), saturating at int64.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction

from events import objects as o
from events.quantity import MILLI_RESOURCES
from events.validation import INT64_MAX


def _exact(resource: str, amount: int) -> Fraction:
    return Fraction(amount, 1000) if resource in MILLI_RESOURCES else Fraction(amount)


def _amount(resource: str, value: Fraction) -> int:
    scaled = value * 1000 if resource in MILLI_RESOURCES else value
    rounded = -((-scaled.numerator) // scaled.denominator)
    return max(0, min(INT64_MAX, rounded))


def per_pod_requests(
    requests: Iterable[tuple[str, int]], excluded: tuple[str, ...],
    transformations: tuple[o.ResourceTransformation, ...],
) -> dict[str, int]:
    """One pod's requests as Kueue counts them, from its requests as written (amounts)."""
    kept = {res: v for res, v in requests if not any(res.startswith(p) for p in excluded)}
    by_input = {t.input: t for t in transformations}
    if not any(res in by_input for res in kept):
        return kept
    exact = {res: _exact(res, v) for res, v in kept.items()}
    retained: dict[str, Fraction] = {}
    generated: dict[str, Fraction] = {}
    for res in sorted(exact):
        t = by_input.get(res)
        if t is None:
            retained[res] = exact[res]
            continue
        base = exact[res] * exact[t.multiply_by] if t.multiply_by in exact else exact[res]
        for out, num, den in t.outputs:
            generated[out] = generated.get(out, Fraction(0)) + base * Fraction(num, den)
        if t.strategy == "Retain":
            retained[res] = exact[res]
    for out, value in generated.items():
        retained[out] = retained.get(out, Fraction(0)) + max(value, Fraction(0))
    return {res: _amount(res, value) for res, value in sorted(retained.items())}
