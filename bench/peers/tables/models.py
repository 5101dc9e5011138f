"""plants_plant, plants_apitoken and plants_ratelimitcounter, as an app written against them would declare them."""

import hashlib
from datetime import timedelta

from django.db import models
from django.utils import timezone


class Plant(models.Model):
    id = models.BigIntegerField(primary_key=True)
    name = models.CharField(max_length=200)
    tag = models.CharField(max_length=100, null=True, blank=True)  # noqa: DJ001 (the service's column)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        managed = False
        db_table = "plants_plant"

    def __str__(self) -> str:
        return self.name


class ApiTokenQuerySet(models.QuerySet):
    def authenticate(self, secret: bytes):
        """The token of `secret` if neither revoked nor expired, its use recorded; else None."""
        active = self.filter(revoked_at__isnull=True).filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=timezone.now())
        )
        try:
            token = active.get(digest=hashlib.sha256(secret).hexdigest())
        except self.model.DoesNotExist:
            return None
        token.touch()
        return token


class ApiToken(models.Model):
    """A bearer token, stored as the SHA-256 hex digest of its secret."""

    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        managed = False
        db_table = "plants_apitoken"

    is_authenticated = True  # the token is the request's user: DRF's IsAuthenticated asks it this

    def __str__(self) -> str:
        return self.name

    def touch(self) -> None:
        """Record the use, at most once a minute (the service's and the FastAPI peer's rule)."""
        now = timezone.now()
        if self.last_used_at is None or now - self.last_used_at >= timedelta(minutes=1):
            ApiToken.objects.filter(pk=self.pk).update(last_used_at=now)


class RateLimitCounter(models.Model):
    """A key's request count in its current fixed window: the service's table, UNLOGGED on PostgreSQL."""

    key = models.CharField(primary_key=True, max_length=64)
    window_start = models.BigIntegerField()
    count = models.PositiveIntegerField()

    class Meta:
        managed = False
        db_table = "plants_ratelimitcounter"

    def __str__(self) -> str:
        return f"{self.key}: {self.count}"
