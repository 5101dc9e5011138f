"""Business rules: creating plants (with safe retries) and issuing and revoking tokens."""

import functools
from contextlib import nullcontext
from datetime import timedelta

from django.db import IntegrityError, connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from plants import metrics
from plants.exceptions import DuplicatePlantId
from plants.models import ApiToken, Plant, quoted_names
from plants.tokens import DISPLAY_PREFIX_LENGTH, generate_token, token_digest


def plant_create(*, id: int, name: str, tag: str | None = None) -> Plant:
    """Store a new plant, or return the stored one if this is a retry of the same create.

    The primary key decides duplicates: one INSERT, no SELECT before it, so concurrent
    creates of one id cannot both win. Only a conflicting INSERT reads the stored row.
    Raises DuplicatePlantId when the id is taken by another name or tag.
    """
    plant = Plant(id=id, name=name, tag=tag)  # created_at: the field's default, now
    try:
        with _savepoint_if_nested():
            _insert(plant)
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


def _insert(plant: Plant) -> None:
    """`plant`'s INSERT on a cursor: what `plant.save(force_insert=True)` sends, without compiling it
    afresh on every create (docs/decisions/hot-path.md); the values adapted as the ORM adapts them."""
    created_at = connection.ops.adapt_datetimefield_value(plant.created_at)
    with connection.cursor() as cursor:
        cursor.execute(insert_sql(connection.vendor), [plant.id, plant.name, plant.tag, created_at])


@functools.cache
def insert_sql(vendor: str) -> str:
    """The plant's INSERT on this kind of database, with the table's and columns' names from the model, quoted."""
    table, *columns = quoted_names(Plant, "id", "name", "tag", "created_at")
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES (%s, %s, %s, %s)"


def _savepoint_if_nested():
    # In autocommit (every API request) the INSERT is its own transaction. Inside an outer
    # transaction a failed INSERT would poison it, so a savepoint contains the failure.
    return transaction.atomic() if connection.in_atomic_block else nullcontext()


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
