"""Bearer token secrets: how they are made and how they are digested for storage; the metrics token's setting."""

import hashlib
import secrets

TOKEN_PREFIX = "plnt_"
TOKEN_BYTES = 32
# Shown in listings so an operator can tell tokens apart; reveals 7 of ~43 random characters.
DISPLAY_PREFIX_LENGTH = len(TOKEN_PREFIX) + 7
# No token we issue is longer; a longer one is refused before it is hashed.
MAX_TOKEN_LENGTH = 128


def generate_token() -> str:
    """A new secret: `plnt_` and 32 random bytes, URL-safe base64 (48 characters in all)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)


def token_digest(token: str) -> str:
    """SHA-256 of the secret. Tokens are 256-bit random, so a fast hash is safe to store."""
    return hashlib.sha256(token.encode()).hexdigest()


def metrics_tokens(setting: str) -> list[str]:
    """PLANTS_METRICS_TOKEN's tokens: one, or two (comma-separated) while one is rotated."""
    return [token.strip() for token in setting.split(",") if token.strip()]
