"""The DRF peer's authentication: bearer tokens, looked up by digest through the ORM."""

from rest_framework import authentication, exceptions

from bench.peers.tables.models import ApiToken, token_digest


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer plnt_…`: the token row is read by its digest on every request."""

    def authenticate(self, request):
        parts = authentication.get_authorization_header(request).split()
        if not parts or parts[0].lower() != b"bearer":
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed("Invalid token header.")
        try:
            token = ApiToken.objects.active().get(digest=token_digest(parts[1]))
        except ApiToken.DoesNotExist:
            raise exceptions.AuthenticationFailed("Invalid token.") from None
        token.touch()
        return token, token

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="api"'
