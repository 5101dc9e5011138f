"""Stored data: plants, and the API tokens that may create them."""

from functools import cache

from django.db import connections, models, router
from django.db.models.base import ModelState
from django.db.models.sql import InsertQuery
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

    # DRF's IsAuthenticated asks request.user this; the token is the API's user.
    is_authenticated = True
    is_anonymous = False

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


# The hot path's two statements are plain functions, not manager methods: a manager call builds a
# QuerySet and its Query on every call before any SQL is sent (profiled for BENCHMARKS.md). Each runs
# on Django's cursor for the router's database, so transactions, connection.queries, the error
# translation (IntegrityError, OperationalError) and the connection health check all apply.


def plant_insert(plant: Plant, *, using: str | None = None) -> None:
    """INSERT `plant` as a new row: one statement, raising IntegrityError if its id is taken.

    What `Plant.objects.create()` sends: the SQL is the ORM's own, compiled once per database,
    and each value is prepared as the ORM prepares it (`pre_save`, then `get_db_prep_save`),
    so both follow the model. Plant has no save() override and no signal receivers to skip.
    """
    alias = using or router.db_for_write(Plant, instance=plant)
    connection = connections[alias]
    sql, fields = _insert_plant(alias)
    values = [field.get_db_prep_save(field.pre_save(plant, True), connection) for field in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
    plant._state.adding, plant._state.db = False, alias


def token_by_digest(digest: str, *, using: str | None = None) -> ApiToken | None:
    """The token with this digest, or None, read from the database on every call.

    Every API request looks its token up, so a revoked or expired token is refused from the
    first request that starts after the change commits. The SQL and the column types are the
    ORM's own, compiled once per database: they follow the model. Only the columns
    authentication and the throttle read are loaded (AUTHENTICATION_FIELDS).
    """
    alias = using or router.db_for_read(ApiToken)
    connection = connections[alias]
    sql, columns, attnames, converted = _select_by_digest(alias)
    with connection.cursor() as cursor:
        cursor.execute(sql, [digest])
        row = cursor.fetchone()
    if row is None:
        return None
    if converted:  # e.g. SQLite's naive datetimes made aware; none on PostgreSQL
        row = list(row)
        for index in converted:
            column = columns[index]
            for convert in connection.ops.get_db_converters(column) + column.get_db_converters(connection):
                row[index] = convert(row[index], column, connection)
    return _token_from_row(alias, attnames, row)


def _token_from_row(alias: str, attnames: list[str], row) -> ApiToken:
    """What `ApiToken.from_db()` makes of the row, the unloaded fields deferred, without Model.__init__.

    __init__ would walk every field of the model to skip the deferred ones, and send pre_init and
    post_init, which nothing receives for ApiToken (tests/test_authentication.py checks both).
    """
    token = ApiToken.__new__(ApiToken)
    token.__dict__.update(zip(attnames, row, strict=True))
    token._state = state = ModelState()
    state.adding, state.db = False, alias
    return token


@cache
def _select_by_digest(alias: str) -> tuple[str, list, list[str], list[int]]:
    """The SQL, its selected columns, their model attribute names, and which columns the backend converts."""
    query = ApiToken.objects.filter(digest="").only(*AUTHENTICATION_FIELDS).order_by().query
    compiler = query.get_compiler(alias)
    sql, params = compiler.as_sql()
    assert params == ("",), params
    columns = [column for column, _, _ in compiler.select]
    connection = connections[alias]
    converted = [
        index
        for index, column in enumerate(columns)
        if connection.ops.get_db_converters(column) + column.get_db_converters(connection)
    ]
    return sql, columns, [column.target.attname for column in columns], converted


@cache
def _insert_plant(alias: str) -> tuple[str, list]:
    """The INSERT of one plant (every column, no RETURNING: the client chose the key) and its fields."""
    fields = Plant._meta.local_concrete_fields
    query = InsertQuery(Plant)
    query.insert_values(fields, [Plant(id=0, name="")])
    [(sql, _)] = query.get_compiler(alias).as_sql()
    return sql, list(fields)
