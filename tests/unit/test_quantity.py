"""Kubernetes quantities parsed exactly into integers, and printed back the way Kueue prints them.

Kueue keeps quota as ``resources.ResourceValue``: cpu in milli-units (``Quantity.MilliValue``),
every other resource in whole units (``Quantity.Value``), both rounded up. Messages and
``resourceUsage`` print them back with ``resources.ResourceQuantityString``.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from events.quantity import QuantityError, format_amount, parse_fraction, to_amount

Ki, Mi, Gi, Ti, Pi, Ei = (1 << 10, 1 << 20, 1 << 30, 1 << 40, 1 << 50, 1 << 60)


@pytest.mark.parametrize(
    ("value", "want"),
    [
        pytest.param("100m", Fraction(1, 10), id="milli suffix: 100m is a tenth"),
        pytest.param("36Gi", 36 * Gi, id="binary suffix: 36Gi is 36 * 2^30"),
        pytest.param("1Gi", Gi, id="1Gi is 1073741824"),
        pytest.param("1G", 10**9, id="1G is decimal: 10^9, not 2^30"),
        pytest.param("1k", 1000, id="lower-case k is kilo"),
        pytest.param("1Ki", 1024, id="Ki is 1024"),
        pytest.param("2Mi", 2 * Mi, id="Mi"),
        pytest.param("1Ti", Ti, id="Ti"),
        pytest.param("1Pi", Pi, id="Pi"),
        pytest.param("1Ei", Ei, id="Ei"),
        pytest.param("1M", 10**6, id="M is mega"),
        pytest.param("1T", 10**12, id="T"),
        pytest.param("1P", 10**15, id="P"),
        pytest.param("1E", 10**18, id="a bare E is the exa suffix, not an exponent"),
        pytest.param("1n", Fraction(1, 10**9), id="n is nano"),
        pytest.param("1u", Fraction(1, 10**6), id="u is micro"),
        pytest.param("1e3", 1000, id="decimal exponent 1e3"),
        pytest.param("1E3", 1000, id="upper-case exponent 1E3"),
        pytest.param("2e+2", 200, id="exponent with an explicit plus sign"),
        pytest.param("1e-3", Fraction(1, 1000), id="negative exponent"),
        pytest.param("1.5", Fraction(3, 2), id="decimal string 1.5"),
        pytest.param("1.5Gi", 3 * Gi // 2, id="fractional mantissa with a binary suffix is exact"),
        pytest.param(".5", Fraction(1, 2), id="leading dot"),
        pytest.param("5.", 5, id="trailing dot"),
        pytest.param("+1", 1, id="explicit plus sign"),
        pytest.param("-1", -1, id="negative numbers parse (manifests refuse them, not the parser)"),
        pytest.param(" 4 ", 4, id="surrounding whitespace is trimmed as the JSON decoder does"),
        pytest.param("4\n", 4, id="a trailing newline (YAML block scalar) is trimmed too"),
        pytest.param(0.5, Fraction(1, 2), id="YAML float 0.5"),
        pytest.param(0.1, Fraction(1, 10), id="YAML float 0.1 is exactly a tenth, not its binary expansion"),
        pytest.param(1.1, Fraction(11, 10), id="YAML float 1.1 is exactly 11/10"),
        pytest.param(4, 4, id="YAML int"),
        pytest.param(10**30, 10**30, id="big YAML int stays exact"),
        pytest.param("0", 0, id="zero"),
    ],
)
def test_parse_fraction_is_exact(value, want):
    got = parse_fraction(value)
    assert isinstance(got, Fraction)
    assert got == want


@pytest.mark.parametrize(
    ("value", "want_message"),
    [
        pytest.param("abc", "'abc' is not a quantity (expected e.g. 500m, 4, 36Gi, 1e3)", id="letters"),
        pytest.param("1.2.3", "'1.2.3' is not a quantity", id="two decimal points"),
        pytest.param("", "'' is not a quantity", id="empty string"),
        pytest.param("   ", "'   ' is not a quantity", id="only whitespace"),
        pytest.param("5 Gi", "'5 Gi' is not a quantity", id="space between number and suffix"),
        pytest.param("1K", "'1K' is not a quantity", id="upper-case K is not a suffix"),
        pytest.param("1ki", "'1ki' is not a quantity", id="lower-case ki is not a suffix"),
        pytest.param("1Kii", "'1Kii' is not a quantity", id="suffix with trailing garbage"),
        pytest.param("Gi", "'Gi' is not a quantity", id="suffix without a number"),
        pytest.param("e3", "'e3' is not a quantity", id="exponent without a mantissa"),
        pytest.param("--1", "'--1' is not a quantity", id="two signs"),
        pytest.param("0x10", "'0x10' is not a quantity", id="hexadecimal"),
        pytest.param("1_000", "'1_000' is not a quantity", id="Python digit separators"),
        pytest.param("\u0661", "is not a quantity", id="non-ASCII digit"),
        pytest.param("1e61", "'1e61': exponent out of range", id="absurd exponent"),
        pytest.param(True, "True is not a quantity", id="YAML boolean true"),
        pytest.param(False, "False is not a quantity", id="YAML boolean false"),
        pytest.param(None, "None is not a quantity", id="YAML null"),
        pytest.param([1], "[1] is not a quantity", id="a list"),
        pytest.param(float("inf"), "inf is not a quantity", id="YAML .inf"),
        pytest.param(float("nan"), "nan is not a quantity", id="YAML .nan"),
    ],
)
def test_parse_fraction_refuses_what_is_not_a_quantity(value, want_message):
    with pytest.raises(QuantityError) as err:
        parse_fraction(value)
    assert want_message in str(err.value)
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize(
    ("resource", "value", "want"),
    [
        pytest.param("cpu", "100m", 100, id="cpu 100m is 100 milli-cpu"),
        pytest.param("cpu", "1", 1000, id="cpu 1 is 1000 milli-cpu"),
        pytest.param("cpu", 0.5, 500, id="cpu YAML float 0.5 is 500m"),
        pytest.param("cpu", "1.5", 1500, id="cpu 1.5 is 1500m"),
        pytest.param("cpu", "1e3", 1_000_000, id="cpu 1e3 is a thousand cores"),
        pytest.param("cpu", "0.0001", 1, id="cpu 0.0001 rounds up to 1m"),
        pytest.param("cpu", "1n", 1, id="cpu 1n rounds up to 1m"),
        pytest.param("cpu", "1500001u", 1501, id="cpu rounds up to the next milli"),
        pytest.param("cpu", "0", 0, id="cpu zero"),
        pytest.param("memory", "36Gi", 36 * Gi, id="memory 36Gi in bytes"),
        pytest.param("memory", "1G", 10**9, id="memory 1G is 10^9 bytes"),
        pytest.param("memory", "1Gi", Gi, id="memory 1Gi is 2^30 bytes"),
        pytest.param("memory", "100m", 1, id="memory 100m rounds up to one byte"),
        pytest.param("memory", "1.5", 2, id="memory 1.5 rounds up to 2 bytes"),
        pytest.param("memory", 0.5, 1, id="memory YAML float 0.5 rounds up to 1 byte"),
        pytest.param("memory", "1e3", 1000, id="memory 1e3 bytes"),
        pytest.param("nvidia.com/gpu", 2, 2, id="extended resource in whole units"),
        pytest.param("nvidia.com/gpu", "0.0001", 1, id="a fraction of a gpu rounds up to a whole one"),
        pytest.param("pods", "5", 5, id="pods in whole units"),
        pytest.param("example.com/foo", "1k", 1000, id="extended resource with a decimal suffix"),
    ],
)
def test_to_amount_is_milli_for_cpu_and_whole_units_otherwise(resource, value, want):
    got = to_amount(resource, value)
    assert type(got) is int
    assert got == want


def test_to_amount_passes_the_parse_error_on():
    with pytest.raises(QuantityError) as err:
        to_amount("cpu", "1.2.3")
    assert str(err.value) == "'1.2.3' is not a quantity (expected e.g. 500m, 4, 36Gi, 1e3)"


@pytest.mark.parametrize(
    ("resource", "amount", "want"),
    [
        pytest.param("cpu", 0, "0", id="cpu zero"),
        pytest.param("cpu", 1, "1m", id="cpu 1m"),
        pytest.param("cpu", 100, "100m", id="cpu 100m"),
        pytest.param("cpu", 500, "500m", id="cpu 500m"),
        pytest.param("cpu", 1000, "1", id="cpu whole core"),
        pytest.param("cpu", 1500, "1500m", id="cpu 1.5 cores print as 1500m, never 1.5"),
        pytest.param("cpu", 9000, "9", id="cpu 9 cores"),
        pytest.param("cpu", 2_500_000, "2500", id="cpu 2500 cores"),
        pytest.param("cpu", 1_000_000, "1k", id="cpu a thousand cores print as 1k, like Kubernetes"),
        pytest.param("memory", 0, "0", id="memory zero"),
        pytest.param("memory", 1000, "1k", id="memory under 1Ki prints in DecimalSI"),
        pytest.param("memory", 1023, "1023", id="memory 1023 bytes"),
        pytest.param("memory", 1024, "1Ki", id="memory 1Ki"),
        pytest.param("memory", 1500, "1500", id="memory not a multiple of 1Ki nor of 1k"),
        pytest.param("memory", 128_000, "125Ki", id="memory prefers the binary suffix when it is exact"),
        pytest.param("memory", 100_000, "100k", id="memory falls back to DecimalSI when no binary suffix is exact"),
        pytest.param("memory", 10**9, "1G", id="memory 10^9 bytes is 1G"),
        pytest.param("memory", Gi, "1Gi", id="memory 2^30 bytes is 1Gi"),
        pytest.param("memory", 36 * Gi, "36Gi", id="memory 36Gi"),
        pytest.param("memory", 1536 * Mi, "1536Mi", id="memory 1.5Gi prints as 1536Mi"),
        pytest.param("memory", 3 * 10**18, "2929687500000000Ki", id="memory keeps the largest exact binary suffix"),
        pytest.param("memory", 1024 * Ei, "1024Ei", id="memory past Ei grows the mantissa"),
        pytest.param("ephemeral-storage", 10 * Gi, "10Gi", id="ephemeral-storage is byte-valued too"),
        pytest.param("hugepages-2Mi", 2 * Mi, "2Mi", id="hugepages are byte-valued"),
        pytest.param("nvidia.com/gpu", 8, "8", id="gpu count"),
        pytest.param("nvidia.com/gpu", 1024, "1024", id="a count is never printed with a binary suffix"),
        pytest.param("pods", 1000, "1k", id="pods in DecimalSI"),
        pytest.param("pods", 2048, "2048", id="pods 2048 stays decimal"),
        pytest.param("example.com/foo", 10**21, "1000E", id="past E the mantissa grows"),
        pytest.param("cpu", -1500, "-1500m", id="negative cpu keeps its sign"),
        pytest.param("memory", -Ki, "-1Ki", id="negative memory keeps its sign"),
    ],
)
def test_format_amount_prints_as_kueue_does(resource, amount, want):
    assert format_amount(resource, amount) == want


@pytest.mark.parametrize(
    ("resource", "text"),
    [
        pytest.param("cpu", "500m", id="cpu 500m"),
        pytest.param("cpu", "2", id="cpu 2"),
        pytest.param("cpu", "1k", id="cpu 1k"),
        pytest.param("memory", "36Gi", id="memory 36Gi"),
        pytest.param("memory", "1G", id="memory 1G"),
        pytest.param("memory", "125Ki", id="memory 125Ki"),
        pytest.param("nvidia.com/gpu", "8", id="gpu 8"),
    ],
)
def test_canonical_strings_survive_a_round_trip(resource, text):
    assert format_amount(resource, to_amount(resource, text)) == text


@pytest.mark.parametrize(
    ("resource", "text", "want"),
    [
        pytest.param("cpu", "0.5", "500m", id="cpu 0.5 is canonically 500m"),
        pytest.param("cpu", "1000m", "1", id="cpu 1000m is canonically 1"),
        pytest.param("memory", "1024Mi", "1Gi", id="memory 1024Mi is canonically 1Gi"),
        pytest.param("memory", "1e9", "1G", id="memory 1e9 is canonically 1G"),
        pytest.param("memory", "0.5Ki", "512", id="memory half a Ki is 512 bytes"),
        pytest.param("nvidia.com/gpu", "1e3", "1k", id="gpu 1e3 is canonically 1k"),
    ],
)
def test_non_canonical_input_is_printed_canonically(resource, text, want):
    assert format_amount(resource, to_amount(resource, text)) == want
