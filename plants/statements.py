"""The seam of the hot path's two statements: the ORM's own SQL, recorded once per database, sent again.

Every API request reads its token and every create inserts a plant. Through the ORM, each call
builds a QuerySet (or an InsertQuery) and compiles it to the same SQL every time: a third of a
create's instructions (BENCHMARKS.md, issue 25). So each statement is recorded from the ORM call it
stands for, once per database, with Django's documented `connection.execute_wrapper()`, and then sent
again on `connection.cursor()` with the request's values: the SQL is the ORM's own, whatever the
Django version or database, and the call goes through Django's cursor, so transactions, the
connection health check, `connection.queries` and the error translation (IntegrityError,
OperationalError) all apply. A token row becomes an ApiToken by `Model.from_db()`.

What a recording checks, or refuses to start (ImproperlyConfigured): that the INSERT takes the
plant's field values in field order, as `Field.get_db_prep_save()` prepares them, and the SELECT the
digest as its one parameter. tests/test_statements.py pins, on SQLite and PostgreSQL, that what is
sent equals what `Plant.objects.create()` and `ApiToken.objects.only(...).get()` send, and that the
row stored and the token read are theirs.
"""

from datetime import UTC, datetime
from functools import cache

from django.core.exceptions import ImproperlyConfigured
from django.db import connections, router, transaction

from plants.models import AUTHENTICATION_FIELDS, ApiToken, Plant

# Values no real row has, so that a recording's parameters can be told apart.
PROBE_DIGEST = "plants.statements: a digest no token has"


class Recorded(Exception):  # noqa: N818 - not an error: the recording's way out of the ORM call
    """Raised by the recorder in place of sending the statement (the documented "blocker" pattern)."""

    def __init__(self, sql: str, params):
        super().__init__(sql)
        self.sql, self.params = sql, list(params or ())


def record_only(execute, sql, params, many, context):
    raise Recorded(sql, params)


def plant_insert(plant: Plant) -> None:
    """INSERT `plant` as a new row, as `plant.save(force_insert=True)` would: one statement, raising
    IntegrityError if its id is taken. Plant has no save() override and no signal receivers."""
    alias = router.db_for_write(Plant, instance=plant)
    connection = connections[alias]
    sql, fields = recorded_insert(alias)
    values = [field.get_db_prep_save(field.pre_save(plant, True), connection) for field in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
    plant._state.adding, plant._state.db = False, alias


def token_by_digest(digest: str) -> ApiToken | None:
    """The token with this digest, or None, read from the database on every call, as
    `ApiToken.objects.only(*AUTHENTICATION_FIELDS).get(digest=digest)` reads it.

    Every API request looks its token up, so a revoked or expired token is refused from the
    first request that starts after the change commits.
    """
    alias = router.db_for_read(ApiToken)
    connection = connections[alias]
    sql, attnames = recorded_token_select(alias)
    with connection.cursor() as cursor:
        cursor.execute(sql, [digest])
        row = cursor.fetchone()
    if row is None:
        return None
    # With USE_TZ the database holds UTC; SQLite's driver hands it back naive (the ORM makes it aware).
    values = [value.replace(tzinfo=UTC) if type(value) is datetime and value.tzinfo is None else value for value in row]
    return ApiToken.from_db(alias, attnames, values)


@cache
def recorded_insert(alias: str) -> tuple[str, list]:
    """The SQL `save(force_insert=True)` sends for a plant on this database, and the fields whose values it takes."""
    connection = connections[alias]
    probe = Plant(id=-1, name="plants.statements probe", tag="probe")
    fields = list(Plant._meta.local_concrete_fields)
    try:
        # In a transaction of its own: the ORM marks the one it is in for rollback as the recording leaves it.
        with transaction.atomic(using=alias), connection.execute_wrapper(record_only):
            probe.save(force_insert=True, using=alias)
    except Recorded as recorded:
        expected = [field.get_db_prep_save(field.pre_save(probe, True), connection) for field in fields]
        if recorded.params == expected:
            return recorded.sql, fields
        raise ImproperlyConfigured(
            "plants.statements: Django's INSERT of a plant no longer takes the fields' values in field order "
            f"({recorded.params!r}, not {expected!r}); store plants with Plant.objects.create() instead."
        ) from None
    raise ImproperlyConfigured("plants.statements: saving a plant sent no statement to record.")


@cache
def recorded_token_select(alias: str) -> tuple[str, list[str]]:
    """The SQL `ApiToken.objects.only(...).get(digest=...)` sends on this database, and its columns' attributes."""
    try:
        with transaction.atomic(using=alias), connections[alias].execute_wrapper(record_only):
            ApiToken.objects.using(alias).only(*AUTHENTICATION_FIELDS).get(digest=PROBE_DIGEST)
    except Recorded as recorded:
        if recorded.params == [PROBE_DIGEST]:
            return recorded.sql, selected_attnames(alias, recorded.sql)
        raise ImproperlyConfigured(
            "plants.statements: Django's token SELECT no longer takes the digest as its one parameter "
            f"({recorded.params!r}); read tokens with ApiToken.objects.only(...).get() instead."
        ) from None
    raise ImproperlyConfigured("plants.statements: reading a token sent no statement to record.")


def selected_attnames(alias: str, sql: str) -> list[str]:
    """The model attributes of the columns `sql` selects, in order, by the names the database gives them."""
    by_column = {field.column: field.attname for field in ApiToken._meta.concrete_fields}
    with connections[alias].cursor() as cursor:
        cursor.execute(sql, [PROBE_DIGEST])
        cursor.fetchall()
        columns = [column[0] for column in cursor.description]
    if set(columns) - by_column.keys() or {"id", *AUTHENTICATION_FIELDS} - {by_column[name] for name in columns}:
        raise ImproperlyConfigured(f"plants.statements: the token SELECT's columns are {columns!r}.")
    return [by_column[name] for name in columns]
