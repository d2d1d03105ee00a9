"""Properties of quantity parsing and printing: exact, integer, and each the inverse of the other."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import example, given
from hypothesis import strategies as st

from events.quantity import format_amount, parse_fraction, to_amount

# Every kind of resource the printer treats differently: milli (cpu), byte-valued (binary
# suffixes when exact), and plain counts (decimal suffixes only).
RESOURCES = st.sampled_from(
    [
        "cpu",
        "memory",
        "ephemeral-storage",
        "hugepages-2Mi",
        "hugepages-1Gi",
        "pods",
        "nvidia.com/gpu",
        "example.com/foo",
    ]
)
BINARY = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}
DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}


def _ceil(f: Fraction) -> int:
    return -((-f.numerator) // f.denominator)


# Amounts with structure (multiples of powers of 1000 and 1024) as well as arbitrary ones, so that
# every suffix branch of the printer is exercised, not only plain digits.
AMOUNTS = st.one_of(
    st.integers(min_value=0),
    st.integers(min_value=0, max_value=10**6).flatmap(
        lambda m: st.sampled_from([1, 1000, 10**6, 10**9, 10**18, 10**21, *BINARY.values(), 1 << 70]).map(
            lambda scale: m * scale
        )
    ),
)


@given(resource=RESOURCES, amount=AMOUNTS)
@example(resource="cpu", amount=1500)
@example(resource="memory", amount=3 * 10**18)
@example(resource="memory", amount=1000)
@example(resource="pods", amount=1024)
def test_to_amount_of_format_amount_is_the_identity(resource, amount):
    text = format_amount(resource, amount)
    assert isinstance(text, str)
    assert to_amount(resource, text) == amount


@given(resource=RESOURCES, amount=AMOUNTS)
def test_format_amount_is_canonical_so_printing_twice_changes_nothing(resource, amount):
    text = format_amount(resource, amount)
    assert format_amount(resource, to_amount(resource, text)) == text


@given(resource=RESOURCES, amount=AMOUNTS)
def test_format_amount_never_prints_a_decimal_point_or_an_exponent_sign(resource, amount):
    text = format_amount(resource, amount)
    assert "." not in text
    assert "+" not in text
    assert text == text.strip()


@given(mantissa=st.integers(min_value=0, max_value=10**12), suffix=st.sampled_from(sorted(BINARY)))
def test_binary_suffixes_parse_exactly(mantissa, suffix):
    assert parse_fraction(f"{mantissa}{suffix}") == mantissa * BINARY[suffix]
    assert to_amount("memory", f"{mantissa}{suffix}") == mantissa * BINARY[suffix]


@given(
    whole=st.integers(min_value=0, max_value=10**9),
    digits=st.text(alphabet="0123456789", min_size=0, max_size=12),
    suffix=st.sampled_from(sorted(DECIMAL)),
    resource=RESOURCES,
)
def test_decimal_strings_parse_exactly_and_round_up(whole, digits, suffix, resource):
    text = f"{whole}.{digits}{suffix}" if digits else f"{whole}{suffix}"
    exact = (Fraction(whole) + (Fraction(int(digits), 10 ** len(digits)) if digits else 0)) * DECIMAL[suffix]
    assert parse_fraction(text) == exact
    scale = 1000 if resource == "cpu" else 1
    got = to_amount(resource, text)
    assert type(got) is int
    assert got == _ceil(exact * scale)
    assert got - 1 < exact * scale <= got


@given(mantissa=st.integers(min_value=-(10**15), max_value=10**15), exponent=st.integers(min_value=-20, max_value=20))
def test_exponent_notation_is_exact(mantissa, exponent):
    assert parse_fraction(f"{mantissa}e{exponent}") == mantissa * Fraction(10) ** exponent


@given(value=st.integers(min_value=0, max_value=10**30), resource=RESOURCES)
def test_yaml_integers_are_taken_as_they_are(value, resource):
    assert parse_fraction(value) == value
    assert to_amount(resource, value) == (value * 1000 if resource == "cpu" else value)


@given(value=st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False))
def test_yaml_floats_are_read_as_the_decimal_they_were_written_as(value):
    """A YAML ``0.1`` is a tenth, not 0.1000000000000000055511151231257827: the shortest
    decimal that prints as the float, as YAML's text had it."""
    got = parse_fraction(value)
    assert got == Fraction(repr(value))
    assert float(got) == value
    assert to_amount("cpu", value) == _ceil(Fraction(repr(value)) * 1000)


@given(
    value=st.one_of(st.integers(min_value=0, max_value=10**15), st.floats(min_value=0, max_value=1e9)),
    resource=RESOURCES,
)
def test_to_amount_is_always_an_int_never_a_float(value, resource):
    got = to_amount(resource, value)
    assert type(got) is int
