"""T9k's maxDuration grammar (seed 002): the parser takes exactly what the seed's regex takes (up to
Go's maximum duration), and a duration built from units reads back as their sum (a year 365 days,
a week 7)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from events import t9k

SEED_REGEX = re.compile(r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$")
UNITS = (("y", 365 * 86_400_000), ("w", 604_800_000), ("d", 86_400_000), ("h", 3_600_000), ("m", 60_000),
         ("s", 1000), ("ms", 1))


@given(st.text(alphabet="0123456789ywdhms.-+ ", max_size=16))
def test_the_parser_accepts_exactly_what_the_seed_regex_accepts(text: str) -> None:
    try:
        t9k.max_duration_ms(text)
    except ValueError as e:
        assert SEED_REGEX.fullmatch(text) is None or "longer than" in str(e)
    else:
        assert SEED_REGEX.fullmatch(text) is not None


@given(st.lists(st.one_of(st.none(), st.integers(min_value=0, max_value=999)), min_size=7, max_size=7))
def test_a_duration_reads_back_as_the_sum_of_its_units(amounts: list[int | None]) -> None:
    text = "".join(f"{n}{unit}" for n, (unit, _) in zip(amounts, UNITS, strict=True) if n is not None)
    want = sum(n * ms for n, (_, ms) in zip(amounts, UNITS, strict=True) if n is not None)
    if want > t9k.MAX_DURATION_MS:  # past what a Go time.Duration holds (about 292 years)
        try:
            t9k.max_duration_ms(text)
        except ValueError as e:
            assert "Go's maximum duration" in str(e)
        else:
            raise AssertionError(f"{text!r} should be refused")
        return
    assert t9k.max_duration_ms(text) == (want if text else None)
