"""The rate limits' clock, set by the tests (the `clock` fixture): no test waits for, or straddles, a window's end."""

HOUR = 3600
# 1000 s into an hourly window: 2600 s until it resets.
WINDOW_START = 1_800_000_000 - 1_800_000_000 % HOUR
NOW = WINDOW_START + 1000


class Clock:
    """Stands in for plants.throttling.clock: the time is what the test sets."""

    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now
