"""The DRF peer's rate limit, in its equal-work variant: a throttle class counting per token in the database."""

from rest_framework import throttling

from bench.peers.rate_limit import LIMIT, count_request, seconds_to_next_window


class TokenRateThrottle(throttling.BaseThrottle):
    """At most LIMIT requests per token per fixed window, each counted by one atomic upsert.

    DRF runs throttles after authentication and permissions: request.auth is the ApiToken.
    """

    def allow_request(self, request, view) -> bool:
        return count_request(f"drf:{request.auth.pk}") <= LIMIT

    def wait(self) -> float:
        return seconds_to_next_window()
