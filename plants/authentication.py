"""Bearer token authentication for the API (RFC 6750)."""

from datetime import timedelta

from django.db.models import Q
from django.utils import timezone
from rest_framework import HTTP_HEADER_ENCODING
from rest_framework.authentication import BaseAuthentication

from plants import metrics
from plants.exceptions import InvalidToken, MalformedCredentials
from plants.models import ApiToken, TokenStatus
from plants.statements import token_by_digest
from plants.tokens import MAX_TOKEN_LENGTH, token_digest

# last_used_at is written at most this often per token, so the hot path stays one SELECT and the INSERT.
LAST_USED_RESOLUTION = timedelta(minutes=1)
# Why a token that exists is refused, by its status.
REFUSED_BECAUSE = {TokenStatus.REVOKED: "The token has been revoked.", TokenStatus.EXPIRED: "The token has expired."}


def authorization_header(request) -> bytes:
    """The Authorization header as bytes, as DRF's get_authorization_header() returns it, read from
    META: that function reads `request.headers`, which first copies every header of the request."""
    header = request.META.get("HTTP_AUTHORIZATION", b"")
    return header.encode(HTTP_HEADER_ENCODING) if isinstance(header, str) else header


class BearerTokenAuthentication(BaseAuthentication):
    """Clients send an API token issued by `manage.py token issue`:

        Authorization: Bearer plnt_hV1Xo2dYk3...

    The scheme name is case-insensitive. Another scheme, or no header, is left to other
    authenticators (and ends as 401 `UNAUTHENTICATED`); a malformed Bearer header or an
    unknown, expired or revoked token fails at once with 401.
    """

    keyword = b"bearer"
    realm = "plants"

    def authenticate(self, request):
        parts = authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword:
            # The API's only authenticator: this request ends as 401 UNAUTHENTICATED.
            metrics.AUTH_FAILURE["missing"].inc()
            return None
        if len(parts) != 2:
            metrics.AUTH_FAILURE["malformed"].inc()
            raise MalformedCredentials()
        try:
            secret = parts[1].decode("ascii")
        except UnicodeDecodeError:
            metrics.AUTH_FAILURE["malformed"].inc()
            raise MalformedCredentials() from None
        token = self.authenticate_credentials(secret)
        return token, token

    def authenticate_credentials(self, secret: str) -> ApiToken:
        token = None if len(secret) > MAX_TOKEN_LENGTH else token_by_digest(token_digest(secret))
        if token is None:
            metrics.AUTH_FAILURE["unknown"].inc()
            raise InvalidToken("The token is not valid.")
        now = timezone.now()
        status = token.status(now)
        if status != TokenStatus.ACTIVE:
            metrics.AUTH_FAILURE[status].inc()
            raise InvalidToken(REFUSED_BECAUSE[status])
        if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
            # Conditional, so that workers reading the same stale value write it once between them.
            stale = Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
            ApiToken.objects.filter(stale, pk=token.pk).update(last_used_at=now)
            token.last_used_at = now
        return token

    def authenticate_header(self, request) -> str:
        return f'Bearer realm="{self.realm}"'
