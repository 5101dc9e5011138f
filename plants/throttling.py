"""Per-token request throttling, with its state in Django's cache."""

import time

from django.conf import settings
from django.core.cache import cache
from rest_framework.throttling import BaseThrottle

from plants.models import ApiToken

PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_rate(rate: str) -> tuple[int, int]:
    """'600/minute' -> (600, 60): DRF's rate syntax."""
    count, period = rate.split("/")
    return int(count), PERIODS[period[0]]


class TokenRateThrottle(BaseThrottle):
    """At most PLANTS_THROTTLE_RATE requests per token per fixed window.

    A counter per token and window, bumped with the cache's atomic add/incr: with Redis as
    the cache every app server counts against the same limit.
    """

    def allow_request(self, request, view) -> bool:
        rate = settings.PLANTS_THROTTLE_RATE
        if not rate or not isinstance(request.auth, ApiToken):
            return True
        limit, period = parse_rate(rate)
        now = time.time()
        window = int(now // period)
        key = f"throttle:token:{request.auth.pk}:{window}"
        self.retry_after = (window + 1) * period - now
        try:
            count = cache.incr(key)  # the common case: one cache operation
        except ValueError:  # the first request of this window
            if cache.add(key, 1, timeout=period + 1):
                return True
            count = cache.incr(key)  # another request created the key meanwhile
        return count <= limit

    def wait(self) -> float:
        return self.retry_after
