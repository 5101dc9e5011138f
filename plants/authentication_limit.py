"""The limit on failed authentication per client address: counted in the shared store, never in a valid token's way.

Each request to the API that fails authentication (no token, a malformed header, an unknown,
expired or revoked token) counts once for its client's address, in the rate-limit store every
worker and server shares (plants/rate_stores.py), as a token's requests do. A request with a valid
token is never counted and costs nothing more.

Once an address has spent PLANTS_ANONYMOUS_THROTTLE_RATE's failures in a window, the worker that
counted the last one remembers it until the window ends, and answers the address's failures there
with 429 instead of 401, without counting them again (no write to the store). A request from that
address with no token or a malformed header is refused without a lookup; one with a token goes on
to its lookup as any other, so a valid token is served whatever its address has done, whichever
worker it reaches and however new the token: many clients may share one address (a NAT, a proxy
not listed in PLANTS_TRUSTED_PROXIES), and one retrying a revoked token shuts out no other. Another worker learns the address is over its limit
from the next failure it counts itself, so across W workers an address's failures cost the store
at most its limit plus W - 1 writes per window; past that, each costs its token's lookup alone.
"""

import threading

from django.conf import settings

from plants import rate_stores, throttling
from plants.clients import client_ip
from plants.exceptions import TooManyAuthenticationFailures

SETTING = "PLANTS_ANONYMOUS_THROTTLE_RATE"
# The store's keys of these counts, beside the tokens' digests (64 hex digits, never with a colon).
KEY_PREFIX = "client:"
# The counter table's key holds 64 characters; an IPv6 address in text is at most 45.
MAX_ADDRESS_LENGTH = 64 - len(KEY_PREFIX)
# Addresses this process refuses, with the end of the window they spent; bounded, so that clients
# on many addresses cannot grow it without end: past it, the ended windows are forgotten, and if
# none has ended, all (each is learnt again from its next failure).
MAX_REFUSED_ADDRESSES = 10_000

refused_until: dict[str, float] = {}
refused_lock = threading.Lock()
# The newest window whose ended counts this process has deleted from the database.
pruned_window = 0


def failure_policy() -> throttling.RatePolicy | None:
    return throttling.rate_policy(settings.PLANTS_ANONYMOUS_THROTTLE_RATE, SETTING)


def authentication_failed(request) -> None:
    """Count a failed authentication for the client's address; past the limit, refuse the address here.

    Raises TooManyAuthenticationFailures (429) instead of counting when this process knows the
    address is over its limit: the caller's 401 is not sent.
    """
    policy, address = failure_policy(), client_ip(request)
    if policy is None or address is None:  # no limit, or no address to keep it for
        return
    if refused_until and (until := refused_until.get(address)) is not None:
        left = until - throttling.clock()
        if left > 0:
            raise TooManyAuthenticationFailures(wait=left)
    counted = throttling.window_count(KEY_PREFIX + address[:MAX_ADDRESS_LENGTH], policy)
    if counted is None:  # the store failed, and the limits fail open
        return
    if counted.count >= policy.limit:
        remember_refused(address, throttling.clock() + counted.reset)
    if counted.count == 1:  # a new window for this address: a moment to clear the ended ones
        forget_ended_windows(policy)


def remember_refused(address: str, until: float) -> None:
    with refused_lock:
        if len(refused_until) >= MAX_REFUSED_ADDRESSES:
            now = throttling.clock()
            for old, old_until in list(refused_until.items()):
                if old_until <= now:
                    del refused_until[old]
            if len(refused_until) >= MAX_REFUSED_ADDRESSES:
                refused_until.clear()
        refused_until[address] = until


def forget_ended_windows(policy: throttling.RatePolicy) -> None:
    """Delete the database's counts of addresses whose window ended, at most once per window per process.

    A token's row is reused from window to window, but clients come from ever new addresses: without
    this the table would keep a row for every address that ever failed. Redis expires its keys itself.
    """
    global pruned_window
    window_start = int(throttling.clock() // policy.window) * policy.window
    if rate_stores.RATE_LIMIT_CACHE in settings.CACHES or pruned_window >= window_start:
        return
    pruned_window = window_start
    rate_stores.database_forget(KEY_PREFIX, before=window_start - policy.window)
