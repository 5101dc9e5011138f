"""Per-token rate limits: the rule, the counting of a window in the store, and the RateLimit headers that show them."""

import functools
import logging
import math
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from rest_framework.throttling import BaseThrottle

from plants import metrics, rate_stores
from plants.exceptions import RateLimitStoreUnavailable
from plants.log_format import log_outage
from plants.models import ApiToken

logger = logging.getLogger(__name__)

# The clock of every window; tests move it instead of waiting for the top of an hour.
clock = time.time

# The one policy a token has, named in both headers (draft-ietf-httpapi-ratelimit-headers-10).
POLICY_NAME = "default"


@dataclass(frozen=True)
class RatePolicy:
    """`limit` requests per token per fixed window of `window` seconds."""

    limit: int
    window: int

    @property
    def header(self) -> str:
        return f'"{POLICY_NAME}";q={self.limit};w={self.window}'


# DRF's rate syntax: the period is read by its first letter ("minute", "min" and "m" alike).
PERIOD_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@functools.lru_cache(maxsize=8)
def rate_policy(rate: str, setting: str = "PLANTS_THROTTLE_RATE") -> RatePolicy | None:
    """A rate setting as DRF reads a rate ('600/minute' -> 600 per 60 s); None when empty."""
    if not rate:
        return None
    count, _, period = rate.partition("/")
    window = PERIOD_SECONDS.get(period[:1]) if "/" not in period else None
    limit = int(count) if count.isdecimal() and count.isascii() else 0
    if limit < 1 or window is None:
        raise ImproperlyConfigured(
            f"{setting} must look like 600/minute (a positive count per second, minute, hour or day), not {rate!r}."
        )
    return RatePolicy(limit, window)


@dataclass(frozen=True)
class RateLimitCount:
    """Where one request left its token's quota: its place in the window and the seconds to the reset."""

    policy: RatePolicy
    count: int
    reset: int

    @property
    def allowed(self) -> bool:
        return self.count <= self.policy.limit

    def headers(self) -> dict[str, str]:
        remaining = max(0, self.policy.limit - self.count)
        return {"RateLimit-Policy": self.policy.header, "RateLimit": f'"{POLICY_NAME}";r={remaining};t={self.reset}'}


def rate_limit_count(token: ApiToken, policy: RatePolicy) -> RateLimitCount | None:
    """Count one request of `token` in the current fixed window: one atomic increment in the store.

    Keyed by the token's digest (loaded with it: AUTHENTICATION_FIELDS), unique and never reused.
    """
    return window_count(token.digest, policy)


# What the outage's log line adds when the limits fail open (PLANTS_RATE_LIMIT_FAILURE_MODE).
FAILING_OPEN = " (the limits fail open: served uncounted)"


@dataclass(frozen=True)
class Window:
    """The fixed window of `policy` that an event at `now` (the clock's seconds) counts in."""

    policy: RatePolicy
    now: float

    @property
    def start(self) -> int:
        return int(self.now // self.policy.window) * self.policy.window

    def counted(self, count: int) -> RateLimitCount:
        """Where the event left its key's quota: `count` is the window's count with it."""
        return RateLimitCount(self.policy, count, reset=max(1, math.ceil(self.start + self.policy.window - self.now)))


def window_count(key: str, policy: RatePolicy) -> RateLimitCount | None:
    """Count one event of `key` in the current fixed window of `policy`. A store that fails is a 503
    (PLANTS_RATE_LIMIT_FAILURE_MODE closed), or None: the event goes uncounted (open)."""
    window = Window(policy, clock())
    try:
        count = rate_stores.increment(key, window.start, policy.window)
    except rate_stores.StoreError as error:
        fails_open = settings.PLANTS_RATE_LIMIT_FAILURE_MODE == "open"
        cause = type(error.__cause__ or error).__name__
        log_outage(logger, "rate-limit store unavailable: %s%s", cause, FAILING_OPEN if fails_open else "", error=error)
        if fails_open:
            metrics.UNCOUNTED.inc()
            return None
        raise RateLimitStoreUnavailable() from None
    return window.counted(count)


class TokenRateThrottle(BaseThrottle):
    """At most PLANTS_THROTTLE_RATE requests per token per fixed window, across every worker.

    The count is left on the request (`request.rate_limit`) for add_rate_limit_headers. A store that cannot be reached
    passes the request uncounted, without the headers (PLANTS_RATE_LIMIT_FAILURE_MODE open), or fails
    it closed: 503 SERVICE_UNAVAILABLE.
    """

    def allow_request(self, request, view) -> bool:
        policy = rate_policy(settings.PLANTS_THROTTLE_RATE)
        if policy is None or not isinstance(request.auth, ApiToken):
            return True
        counted = self.counted = request.rate_limit = rate_limit_count(request.auth, policy)
        return counted is None or counted.allowed

    def wait(self) -> float:
        return self.counted.reset


def add_rate_limit_headers(request, response) -> None:
    """RateLimit-Policy and RateLimit on every answer to a request the throttle counted, 429 included."""
    counted = getattr(request, "rate_limit", None)
    if counted is not None:
        for name, value in counted.headers().items():
            response[name] = value
