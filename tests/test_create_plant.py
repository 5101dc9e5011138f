"""POST /plants: what is stored, what is answered, duplicates and safe retries."""

import re

import pytest
from django.utils import timezone

from plants.models import Plant

pytestmark = pytest.mark.django_db


def stored_plants() -> list[tuple]:
    return list(Plant.objects.order_by("id").values_list("id", "name", "tag"))


def test_create_with_tag_returns_200_with_plant_and_stores_it(post_plant):
    response = post_plant({"id": 1, "name": "Monstera", "tag": "aroid"})

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"id": 1, "name": "Monstera", "tag": "aroid"}
    assert stored_plants() == [(1, "Monstera", "aroid")]


def test_create_without_tag_omits_tag_from_answer_and_stores_null(post_plant):
    response = post_plant({"id": 2, "name": "Fern"})

    assert response.status_code == 200
    assert response.json() == {"id": 2, "name": "Fern"}
    assert stored_plants() == [(2, "Fern", None)]


def test_create_stores_the_time_it_was_made(post_plant):
    before = timezone.now()
    response = post_plant({"id": 4, "name": "Sage"})
    after = timezone.now()

    assert response.status_code == 200
    stored = Plant.objects.get(id=4)
    assert before <= stored.created_at <= after  # read back by the ORM, in UTC, on SQLite as on PostgreSQL


def test_create_stores_names_exactly_as_sent(post_plant):
    response = post_plant({"id": 3, "name": "  Ficus lyrata 🌿 ", "tag": "Moraceae"})

    assert response.status_code == 200
    assert response.json() == {"id": 3, "name": "  Ficus lyrata 🌿 ", "tag": "Moraceae"}
    assert stored_plants() == [(3, "  Ficus lyrata 🌿 ", "Moraceae")]


@pytest.mark.parametrize("plant_id", [0, -1, 2**63 - 1, -(2**63)])
def test_create_accepts_every_int64_id(post_plant, plant_id):
    response = post_plant({"id": plant_id, "name": "Edge"})

    assert response.status_code == 200
    assert response.json() == {"id": plant_id, "name": "Edge"}
    assert stored_plants() == [(plant_id, "Edge", None)]


def test_create_accepts_longest_allowed_name_and_tag(post_plant):
    name, tag = "n" * 200, "t" * 100

    response = post_plant({"id": 4, "name": name, "tag": tag})

    assert response.status_code == 200
    assert stored_plants() == [(4, name, tag)]


def test_retry_of_identical_create_returns_200_with_stored_plant(post_plant):
    first = post_plant({"id": 5, "name": "Pothos", "tag": "aroid"})
    retry = post_plant({"id": 5, "name": "Pothos", "tag": "aroid"})

    assert first.status_code == retry.status_code == 200
    assert retry.json() == first.json() == {"id": 5, "name": "Pothos", "tag": "aroid"}
    assert stored_plants() == [(5, "Pothos", "aroid")]


def test_retry_without_tag_of_untagged_plant_returns_200(post_plant):
    post_plant({"id": 6, "name": "Cactus"})

    retry = post_plant({"id": 6, "name": "Cactus"})

    assert retry.status_code == 200
    assert retry.json() == {"id": 6, "name": "Cactus"}


@pytest.mark.parametrize(
    "second",
    [
        {"id": 7, "name": "Other"},
        {"id": 7, "name": "Pothos", "tag": "other"},
        {"id": 7, "name": "Pothos"},
    ],
    ids=["other-name", "other-tag", "tag-missing"],
)
def test_create_of_existing_id_with_other_fields_returns_400_duplicate_and_keeps_first(post_plant, second):
    post_plant({"id": 7, "name": "Pothos", "tag": "aroid"})

    response = post_plant(second)

    assert response.status_code == 400
    assert response.json() == {
        "error": 40003,
        "message": "A plant with id 7 already exists with a different name or tag.",
    }
    assert stored_plants() == [(7, "Pothos", "aroid")]


def test_create_echoes_request_id_header(post_plant):
    response = post_plant({"id": 8, "name": "Aloe"}, HTTP_X_REQUEST_ID="abc-123")

    assert response["X-Request-ID"] == "abc-123"


def test_create_generates_request_id_when_client_sends_unsafe_one(post_plant):
    response = post_plant({"id": 9, "name": "Aloe"}, HTTP_X_REQUEST_ID="bad id\nwith newline")

    assert response["X-Request-ID"] != "bad id\nwith newline"
    assert len(response["X-Request-ID"]) == 32


@pytest.mark.django_db(transaction=True)
def test_authenticated_create_reads_the_token_counts_it_and_inserts_in_three_statements(
    post_plant, settings, django_assert_num_queries
):
    # Throttled as in production with the default store, the same three statements on SQLite and
    # PostgreSQL: the token's lookup (every request reads its row), the count (the database's
    # upsert: plants/rate_stores.py) and the INSERT, each layer its own.
    settings.PLANTS_THROTTLE_RATE = "600/minute"
    post_plant({"id": 10, "name": "warm-up"})  # the first use of a token records last_used_at

    with django_assert_num_queries(3) as context:
        response = post_plant({"id": 11, "name": "Basil"})

    assert response.status_code == 200
    statements = [
        [
            ("SELECT" if verb == "FROM" else "INSERT", table)
            for verb, table in re.findall(r'(FROM|INSERT INTO) "?(plants_\w+)', query["sql"])
        ]
        for query in context.captured_queries
    ]
    assert statements == [
        [("SELECT", "plants_apitoken")],
        [("INSERT", "plants_ratelimitcounter")],
        [("INSERT", "plants_plant")],
    ]


def test_create_answer_carries_the_security_headers_and_no_cookie(post_plant):
    response = post_plant({"id": 1, "name": "Monstera"})

    assert response.status_code == 200
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"
    assert response["Content-Length"] == str(len(response.content))
    assert not response.cookies
    assert "Vary" not in response


def test_create_answer_sets_no_cookie_and_does_not_vary_on_one(post_plant):
    response = post_plant({"id": 1, "name": "Monstera"})

    assert response.status_code == 200
    assert response.cookies == {} and "Set-Cookie" not in response
    assert "Cookie" not in response.get("Vary", "")
