"""The hot path's two statements (plants/statements.py): what they send is what the ORM sends, on every database.

These fail when Django moves under the seam: a new Django that sends another INSERT for a plant, or
reads a token otherwise, changes what the ORM sends, and the recording follows it or refuses to start.
"""

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from plants import statements
from plants.models import AUTHENTICATION_FIELDS, ApiToken, Plant
from plants.statements import plant_insert, token_by_digest
from plants.tokens import token_digest

pytestmark = pytest.mark.django_db


def sent(action) -> list[str]:
    """The statements `action` sends, values included (as the connection logs them), then undone."""
    with CaptureQueriesContext(connection) as captured, transaction.atomic():
        action()
        transaction.set_rollback(True)
    return [query["sql"] for query in captured.captured_queries if "SAVEPOINT" not in query["sql"]]


def test_insert_sends_what_plant_objects_create_sends():
    statements.recorded_insert("default")  # recorded once per database, before the first insert
    now = timezone.now()

    ours = sent(lambda: plant_insert(Plant(id=5, name="Fern", tag="fern", created_at=now)))
    orm = sent(lambda: Plant.objects.create(id=5, name="Fern", tag="fern", created_at=now))

    assert ours == orm and len(ours) == 1


def test_insert_stores_the_row_create_would_and_refuses_a_taken_id():
    plant = Plant(id=5, name="Fern")
    plant_insert(plant)

    stored = Plant.objects.get(id=5)
    assert (stored.name, stored.tag, stored.created_at) == ("Fern", None, plant.created_at)
    assert (plant._state.adding, plant._state.db) == (False, "default")
    with pytest.raises(IntegrityError), transaction.atomic():  # a savepoint: the test's transaction lives on
        plant_insert(Plant(id=5, name="Fern"))


def test_token_select_sends_what_the_orm_sends(issued_token):
    stored, secret = issued_token
    digest = token_digest(secret)
    statements.recorded_token_select("default")  # recorded once per database, before the first read

    ours = sent(lambda: token_by_digest(digest))
    orm = sent(lambda: ApiToken.objects.only(*AUTHENTICATION_FIELDS).get(digest=digest))

    assert ours == orm and len(ours) == 1


def test_token_read_equals_the_orm_s_with_the_other_fields_deferred(issued_token):
    stored, secret = issued_token
    ApiToken.objects.filter(pk=stored.pk).update(expires_at=stored.created_at, last_used_at=stored.created_at)

    token = token_by_digest(token_digest(secret))

    expected = ApiToken.objects.only(*AUTHENTICATION_FIELDS).get(pk=stored.pk)
    assert token == expected
    assert {name: getattr(token, name) for name in ["id", *AUTHENTICATION_FIELDS]} == {
        name: getattr(expected, name) for name in ["id", *AUTHENTICATION_FIELDS]
    }
    assert token.expires_at.tzinfo is not None and token.expires_at == stored.created_at
    assert token.get_deferred_fields() == expected.get_deferred_fields() == {"prefix", "created_at"}
    assert (token._state.adding, token._state.db) == (False, "default")


def test_unknown_digest_reads_no_token(db):
    assert token_by_digest(token_digest("plnt_unknown")) is None


@pytest.mark.parametrize(
    ("recording", "as_sent", "refusal"),
    [
        # As a Django that sent a plant's values in another order, or the token read with more parameters.
        ("recorded_insert", lambda params: list(reversed(params)), "no longer takes the fields' values in field order"),
        ("recorded_token_select", lambda params: [*params, 21], "no longer takes the digest as its one parameter"),
    ],
)
def test_a_recording_whose_parameters_are_not_what_it_expects_is_refused_at_once(
    monkeypatch, recording, as_sent, refusal
):
    def record_otherwise(execute, sql, params, many, context):
        raise statements.Recorded(sql, as_sent(params))

    monkeypatch.setattr(statements, "record_only", record_otherwise)
    record = getattr(statements, recording)
    record.cache_clear()
    try:
        with pytest.raises(ImproperlyConfigured, match=refusal):
            record("default")
    finally:
        record.cache_clear()
