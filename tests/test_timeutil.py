"""Times given on the command line or in a URL: whatever their size, a bound the ledger can use."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentledger.timeutil import EARLIEST_MS, LATEST_MS, parse_time


@given(st.one_of(st.integers(min_value=0, max_value=10**30).map(str), st.just("9" * 5000)), st.sampled_from("smhdw"))
def test_an_age_of_any_size_is_a_usable_bound(digits, unit):
    since = parse_time(f"{digits}{unit}", now_ms=1_795_000_000_000)
    assert EARLIEST_MS <= since <= LATEST_MS


def test_dates_beyond_the_ledger_are_its_first_and_last_moments():
    assert parse_time("0001-01-01") == EARLIEST_MS
    assert parse_time("1969-12-31T23:59:59Z") == EARLIEST_MS
    assert parse_time("9999-12-31T23:59:59.999Z") == LATEST_MS
    assert parse_time("9999-12-31T23:00:00-05:00") == LATEST_MS
    assert parse_time("2026-11-01") == 1_793_491_200_000


@pytest.mark.parametrize("day", ["2026-11-01", "20261101", "2026-W44-7", "2026W447"])
def test_until_a_day_in_any_form_iso_gives_it_is_that_whole_day(day):
    # Only the YYYY-MM-DD form was taken as a day: --until 20261101 covered its first millisecond.
    assert parse_time(day, end=True) == 1_793_577_599_999
    assert parse_time(day) == 1_793_491_200_000


@pytest.mark.parametrize("week", ["2026-W44", "2026W44"])
def test_a_week_is_from_its_monday_until_its_sunday_whole(week):
    # --until 2026-W44 ended on its Monday: Tuesday to Sunday were left out without a word.
    assert parse_time(week) == 1_792_972_800_000  # 2026-10-26, its Monday
    assert parse_time(week, end=True) == 1_793_577_599_999  # the end of 2026-11-01, its Sunday
