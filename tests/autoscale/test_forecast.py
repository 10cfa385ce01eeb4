"""The arrival forecast behind the predictive floor: a seasonal shape plus the trend of what it does not explain."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.autoscale.forecast import ArrivalForecast

SEASON = 3600.0


def _fed(rate: object, seconds: float, every: float = 10.0, season: float = SEASON) -> ArrivalForecast:
    forecast = ArrivalForecast(season)
    t = 0.0
    while t < seconds:
        forecast.observe(t, rate(t))  # type: ignore[operator]
        t += every
    return forecast


@settings(max_examples=40, deadline=None)
@given(
    constant=st.floats(0.0, 1e4),
    season=st.sampled_from([600.0, 3600.0, 86400.0]),
    seasons=st.floats(1.05, 3.0),
    ahead=st.floats(0.0, 900.0),
)
def test_a_constant_history_forecasts_the_constant(
    constant: float, season: float, seasons: float, ahead: float
) -> None:
    every = season / 120
    forecast = _fed(lambda _t: constant, season * seasons, every, season)
    predicted = forecast.predict(season * seasons, ahead)
    assert predicted is not None
    assert predicted.rate == pytest.approx(constant, rel=1e-9, abs=1e-9)


@settings(max_examples=25, deadline=None)
@given(seconds=st.floats(0.0, SEASON - 11.0), rate=st.floats(0.0, 100.0))
def test_less_than_one_season_of_history_forecasts_nothing(seconds: float, rate: float) -> None:
    forecast = _fed(lambda _t: rate, seconds + 1.0)
    assert forecast.predict(seconds, 120.0) is None
    assert forecast.history_s(seconds) < SEASON


def test_a_season_counts_from_the_first_rate_observed_not_from_missing_ones() -> None:
    forecast = ArrivalForecast(SEASON)
    for t in range(0, 1800, 10):
        forecast.observe(float(t), None)  # the source could not say
    for t in range(1800, 3600, 10):
        forecast.observe(float(t), 5.0)
    assert forecast.history_s(3590.0) == pytest.approx(1790.0)
    assert forecast.predict(3590.0, 60.0) is None


def test_a_periodic_load_with_a_trend_is_forecast_one_start_up_ahead() -> None:
    # a day's shape (here an hour) riding on a slow rise: the forecast sees the coming peak, where the rate now
    # (or a line through the last minutes) does not
    def rate(t: float) -> float:
        return 10.0 + 8.0 * math.sin(2 * math.pi * t / SEASON) + t / 1800.0

    forecast = _fed(rate, 4 * SEASON)
    for now in (4 * SEASON + 600.0 * k for k in range(6)):
        forecast.observe(now, rate(now))
        predicted = forecast.predict(now, 300.0)
        assert predicted is not None
        assert predicted.rate == pytest.approx(rate(now + 300.0), abs=0.6), now
        assert predicted.seasonal + predicted.residual == pytest.approx(predicted.rate)


def test_a_level_above_the_usual_season_is_carried_into_the_forecast() -> None:
    # two ordinary seasons, then today runs 5 req/s above them: the residual carries it
    def usual(t: float) -> float:
        return 10.0 + 8.0 * math.sin(2 * math.pi * t / SEASON)

    forecast = _fed(usual, 2 * SEASON)
    for t in range(int(2 * SEASON), int(2 * SEASON + 900), 10):
        forecast.observe(float(t), usual(t) + 5.0)
    predicted = forecast.predict(2 * SEASON + 900.0, 300.0)
    assert predicted is not None
    assert predicted.residual == pytest.approx(5.0, abs=0.8)
    assert predicted.rate == pytest.approx(usual(2 * SEASON + 1200.0) + 5.0, abs=1.0)


def test_hours_of_zero_forecast_zero() -> None:
    forecast = _fed(lambda _t: 0.0, 6 * SEASON)
    predicted = forecast.predict(6 * SEASON, 300.0)
    assert predicted is not None and predicted.rate == 0.0


@pytest.mark.parametrize("season", [600.0, 1000.0, 10000.0, 12345.0, 86400.0, 100000.0])
def test_each_bin_of_the_season_learns_its_own_rate(season: float) -> None:
    # bins of a fraction of a second (100000 / 144), or a season that is no whole number of them (1000 / 60):
    # every bin's rate lands in that bin, none in its neighbour
    forecast = ArrivalForecast(season)
    t = 0.0
    while t < 2 * season + forecast.bin_s:
        forecast.observe(t, float(int((t % season) // forecast.bin_s)))
        t += 7.0
    bins = math.ceil(season / forecast.bin_s)
    assert [forecast.seasonal((i + 0.5) * forecast.bin_s) for i in range(bins)] == [float(i) for i in range(bins)]


def test_a_season_must_be_positive() -> None:
    with pytest.raises(ValueError, match="season_s must be > 0"):
        ArrivalForecast(0.0)
