"""Business rules: creating plants (with safe retries) and issuing and revoking tokens."""

from contextlib import nullcontext
from datetime import timedelta

from django.db import IntegrityError, connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from plants import metrics
from plants.exceptions import DuplicatePlantId
from plants.models import ApiToken, Plant
from plants.tokens import DISPLAY_PREFIX_LENGTH, generate_token, token_digest


def plant_create(*, id: int, name: str, tag: str | None = None) -> Plant:
    """Store a new plant, or return the stored one if this is a retry of the same create.

    The primary key decides duplicates: one INSERT, no SELECT before it, so concurrent
    creates of one id cannot both win. Only a conflicting INSERT reads the stored row.
    Raises DuplicatePlantId when the id is taken by another name or tag.
    """
    try:
        # In autocommit (every API request) the INSERT is its own transaction. Inside an outer
        # transaction a failed INSERT would poison it, so a savepoint contains the failure.
        with transaction.atomic() if connection.in_atomic_block else nullcontext():
            plant = Plant.objects.create(id=id, name=name, tag=tag)
    except IntegrityError:
        stored = Plant.objects.filter(id=id).first()
        if stored is None:
            raise  # the conflicting row is gone again (deleted in between): not a duplicate to report
        if (stored.name, stored.tag) == (name, tag):
            metrics.CREATE_OUTCOME["retry"].inc()
            return stored  # the client lost our first answer and sent the same create again
        metrics.CREATE_OUTCOME["duplicate"].inc()
        raise DuplicatePlantId(id) from None
    metrics.CREATE_OUTCOME["created"].inc()
    return plant


def token_issue(*, name: str, expires_in: timedelta | None = None) -> tuple[ApiToken, str]:
    """Create a token; return it with its secret, which is not stored and cannot be shown again."""
    secret = generate_token()
    now = timezone.now()
    token = ApiToken.objects.create(
        name=name,
        prefix=secret[:DISPLAY_PREFIX_LENGTH],
        digest=token_digest(secret),
        created_at=now,
        expires_at=now + expires_in if expires_in is not None else None,
    )
    return token, secret


def tokens_revoke(*, tokens: QuerySet[ApiToken]) -> int:
    """Revoke the active tokens among `tokens`; return how many were revoked.

    Each is refused from the first request that starts after this commits.
    """
    return tokens.active().update(revoked_at=timezone.now())
