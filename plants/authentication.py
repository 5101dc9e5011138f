"""Bearer token authentication for the API (RFC 6750)."""

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from rest_framework.authentication import BaseAuthentication, get_authorization_header

from plants import metrics
from plants.authentication_limit import authentication_failed
from plants.exceptions import InvalidToken, MalformedCredentials
from plants.models import ApiToken, TokenStatus
from plants.tokens import MAX_TOKEN_LENGTH, token_digest

# last_used_at is written at most this often per token: the hot path reads the token, and writes it once a minute.
LAST_USED_RESOLUTION = timedelta(minutes=1)
# Why a token that exists is refused, by its status.
REFUSED_BECAUSE = {TokenStatus.REVOKED: "The token has been revoked.", TokenStatus.EXPIRED: "The token has expired."}


class TokenClient:
    """`request.user` of a request made with an API token: the client the token was issued to.

    It reads like Django's users where DRF or a view asks (`is_authenticated`, `is_active`,
    `is_staff`, `has_perm`...), but it is no account: never staff, no permission, no admin login.
    The token itself is `request.auth`.
    """

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False
    pk = id = None

    def __init__(self, token: ApiToken):
        self.name = token.name

    def __str__(self) -> str:
        return self.name

    def get_username(self) -> str:
        return self.name

    def has_perm(self, perm, obj=None) -> bool:
        return False

    def has_perms(self, perm_list, obj=None) -> bool:
        return False

    def has_module_perms(self, app_label) -> bool:
        return False


def token_for(secret: str) -> ApiToken | None:
    """The token whose secret this is, read from the database (never from a cache), or None.

    `ApiToken.objects.raw()` with the SQL `only(*AUTHENTICATION_FIELDS).get(digest=...)` compiles on
    every request (tests/test_authentication.py pins the two alike): the same row, the same instance
    with the other fields deferred, without the compiling, a sixth of a create's CPU
    (docs/decisions/hot-path.md).
    """
    if len(secret) > MAX_TOKEN_LENGTH:  # longer than any token issued: not worth hashing
        return None
    return next(iter(ApiToken.objects.raw(TOKEN_SQL, [token_digest(secret)])), None)


# The primary key and what authenticating and throttling read, by the digest's unique index.
TOKEN_SQL = "SELECT id, name, digest, expires_at, revoked_at, last_used_at FROM plants_apitoken WHERE digest = %s"


def record_use(token: ApiToken, now: datetime) -> None:
    """Write `now` as the token's last use, unless it is no longer stale or another request of the token
    is writing it: that one's commit may wait (a slow synchronous standby), and a request never queues
    behind another's bookkeeping until lock_timeout refuses it."""
    stale = Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
    unlocked = ApiToken.objects.filter(pk=token.pk).select_for_update(skip_locked=True)
    with transaction.atomic():  # one statement (SQLite's busy wait holds for it), FOR UPDATE's transaction
        ApiToken.objects.filter(stale, pk__in=unlocked).update(last_used_at=now)
    token.last_used_at = now


class BearerTokenAuthentication(BaseAuthentication):
    """Clients send an API token issued by `manage.py token issue`:

        Authorization: Bearer plnt_hV1Xo2dYk3...

    The scheme name is case-insensitive. Another scheme, or no header, is left to other
    authenticators (and ends as 401 `UNAUTHENTICATED`); a malformed Bearer header or an
    unknown, expired or revoked token fails at once with 401. The token's row is read on every
    request, so a revoked or expired token is refused from the first request after the change commits.
    """

    keyword = b"bearer"
    realm = "plants"

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword:
            # The API's only authenticator: this request ends as 401 UNAUTHENTICATED.
            self.failed(request, "missing")
            return None
        if len(parts) != 2:
            self.failed(request, "malformed")
            raise MalformedCredentials()
        try:
            secret = parts[1].decode("ascii")
        except UnicodeDecodeError:
            self.failed(request, "malformed")
            raise MalformedCredentials() from None
        token = self.authenticate_credentials(secret, request)
        return TokenClient(token), token

    def authenticate_credentials(self, secret: str, request) -> ApiToken:
        token = token_for(secret)
        if token is None:
            self.failed(request, "unknown")
            raise InvalidToken("The token is not valid.")
        now = timezone.now()
        status = token.status(now)
        if status != TokenStatus.ACTIVE:
            self.failed(request, status)
            raise InvalidToken(REFUSED_BECAUSE[status])
        if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
            record_use(token, now)
        return token

    def failed(self, request, reason: str) -> None:
        """Count a refusal by its reason, and against its client's address: 429 instead of the 401
        once the address is over its limit (plants/authentication_limit.py)."""
        metrics.AUTH_FAILURE[reason].inc()
        authentication_failed(request)

    def authenticate_header(self, request) -> str:
        return f'Bearer realm="{self.realm}"'
