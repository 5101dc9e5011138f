"""The limit on failed authentication per client address: counted in the shared store, refused before any lookup.

Each request to the API that fails authentication (no token, a malformed header, an unknown,
expired or revoked token) counts once for its client's address, in the rate-limit store every
worker and server shares (plants/rate_stores.py), as a token's requests do. A request with a valid
token is never counted, and costs nothing more than a lookup in a dict of this process.

Once an address has spent PLANTS_ANONYMOUS_THROTTLE_RATE's failures in a window, the worker that
counted the last one remembers it until the window ends, and refuses the address's requests there
with 429 before any token is looked up: no query, no count. Another worker learns it from the next
failure it counts itself, so across W workers an address gets at most its limit plus W - 1 failed
lookups per window. A valid token from that address is not refused: the worker keeps the digests of
the tokens it authenticated lately, and a refused address's request whose token is one of them goes
on to its lookup as any other (a SHA-256 of its secret, no query, decides). Only a token the worker
has not authenticated yet waits for the window's end there.
"""

import threading

from django.conf import settings
from rest_framework.authentication import get_authorization_header

from plants import rate_stores, throttling
from plants.clients import client_ip
from plants.exceptions import TooManyAuthenticationFailures
from plants.tokens import MAX_TOKEN_LENGTH, token_digest

SETTING = "PLANTS_ANONYMOUS_THROTTLE_RATE"
# The store's keys of these counts, beside the tokens' digests (64 hex digits, never with a colon).
KEY_PREFIX = "client:"
# The counter table's key holds 64 characters; an IPv6 address in text is at most 45.
MAX_ADDRESS_LENGTH = 64 - len(KEY_PREFIX)
# Addresses this process refuses, with the end of the window they spent; bounded, so that clients
# on many addresses cannot grow it without end: past it, the ended windows are forgotten, and if
# none has ended, all (each is learnt again from its next failure).
MAX_REFUSED_ADDRESSES = 10_000

# The digests (never the secrets) of the tokens this process authenticated lately, oldest first:
# a refused address's request bearing one of them goes on to its lookup.
MAX_AUTHENTICATED_DIGESTS = 10_000

refused_until: dict[str, float] = {}
refused_lock = threading.Lock()
authenticated_digests: dict[str, None] = {}
# The newest window whose ended counts this process has deleted from the database.
pruned_window = 0


def failure_policy() -> throttling.RatePolicy | None:
    return throttling.rate_policy(settings.PLANTS_ANONYMOUS_THROTTLE_RATE, SETTING)


def refuse_if_over_limit(request) -> None:
    """429 TOO_MANY_AUTHENTICATION_FAILURES when this process knows the client's address is over its limit."""
    if not refused_until:  # the usual case: one check, no lookup
        return
    until = refused_until.get(client_ip(request) or "")
    if until is not None and failure_policy() is not None:
        left = until - throttling.clock()
        if left > 0 and bearer_digest(request) not in authenticated_digests:
            raise TooManyAuthenticationFailures(wait=left)


def bearer_digest(request) -> str | None:
    """The digest of the request's bearer token, if its header holds one; None otherwise."""
    parts = get_authorization_header(request).split()
    if len(parts) != 2 or parts[0].lower() != b"bearer" or len(parts[1]) > MAX_TOKEN_LENGTH:
        return None
    return token_digest(parts[1].decode("ascii", errors="replace"))


def authenticated(digest: str) -> None:
    """Remember that the token of `digest` authenticated here: from a refused address it still goes on."""
    if digest in authenticated_digests:
        return
    with refused_lock:
        if len(authenticated_digests) >= MAX_AUTHENTICATED_DIGESTS:
            del authenticated_digests[next(iter(authenticated_digests))]
        authenticated_digests[digest] = None


def authentication_failed(request) -> None:
    """Count a failed authentication for the client's address; past the limit, refuse the address here."""
    policy, address = failure_policy(), client_ip(request)
    if policy is None or address is None:  # no limit, or no address to keep it for
        return
    counted = throttling.window_count(KEY_PREFIX + address[:MAX_ADDRESS_LENGTH], policy)
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
