"""Stored data: plants, and the API tokens that may create them."""

from django.db import connection, models
from django.utils import timezone

# Length bounds of the contract's strings, in characters. The serializer enforces them,
# the columns hold them, and the OpenAPI schema publishes them as maxLength.
PLANT_NAME_MAX_LENGTH = 200
PLANT_TAG_MAX_LENGTH = 100


class Plant(models.Model):
    """A plant, identified by the id its client chose."""

    id = models.BigIntegerField(primary_key=True)
    name = models.CharField(max_length=PLANT_NAME_MAX_LENGTH)
    # NULL means "no tag"; an empty tag is refused by the serializer, so there is one way to say it.
    tag = models.CharField(max_length=PLANT_TAG_MAX_LENGTH, null=True, blank=True)  # noqa: DJ001
    created_at = models.DateTimeField(default=timezone.now, editable=False, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["tag"], name="plant_tag_idx")]

    def __str__(self) -> str:
        return f"{self.name} (#{self.id})"


class TokenStatus(models.TextChoices):
    """Where a token stands: only an active one authenticates."""

    ACTIVE = "active"
    EXPIRED = "expired"
    REVOKED = "revoked"


class ApiTokenQuerySet(models.QuerySet):
    # The querysets of ApiToken.status(): each token is in exactly one of them.
    def active(self, now=None):
        now = now or timezone.now()
        return self.filter(revoked_at__isnull=True).filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now)
        )

    def expired(self, now=None):
        return self.filter(revoked_at__isnull=True, expires_at__lte=now or timezone.now())

    def revoked(self):
        return self.filter(revoked_at__isnull=False)


class ApiToken(models.Model):
    """A bearer token. Only the SHA-256 digest of the secret is stored, never the secret."""

    name = models.CharField(max_length=100, db_index=True, help_text="Who or what holds the token.")
    prefix = models.CharField(max_length=16, help_text="The token's first characters, to recognise it.")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    def status(self, now=None) -> TokenStatus:
        now = now or timezone.now()
        if self.revoked_at is not None:
            return TokenStatus.REVOKED
        if self.expires_at is not None and self.expires_at <= now:
            return TokenStatus.EXPIRED
        return TokenStatus.ACTIVE


# What authenticating and throttling a request read of its token (with the primary key): the
# digest keys its rate-limit counter (unique, never reused), so it is loaded, not deferred.
AUTHENTICATION_FIELDS = ["name", "digest", "expires_at", "revoked_at", "last_used_at"]


class RateLimitCounter(models.Model):
    """How many requests a token has made in its current rate-limit window (plants/rate_stores.py).

    One row per token, counted by one atomic upsert per request and reused from window to window,
    so the table never holds more rows than there are tokens that made a request; and one per client
    address that failed authentication lately (key `client:<address>`, plants/authentication_limit.py),
    deleted once its window has ended. UNLOGGED on PostgreSQL (migration 0005): a crash or a
    failover starts the counts afresh (docs/api.md, Rate limits).
    """

    key = models.CharField(primary_key=True, max_length=64, help_text="The token's digest.")
    window_start = models.BigIntegerField(help_text="The window counted: its start, in seconds since the epoch.")
    count = models.PositiveIntegerField()

    def __str__(self) -> str:
        return f"{self.count} requests in the window from {self.window_start}"


def quoted_names(model: type[models.Model], *field_names: str) -> tuple[str, ...]:
    """The model's table, then each named field's column, quoted as the database quotes them: the
    names the rate-limit count's upsert uses (plants/rate_stores.py)."""
    quote, meta = connection.ops.quote_name, model._meta
    return quote(meta.db_table), *(quote(meta.get_field(name).column) for name in field_names)
