"""Every non-2xx answer, from every layer, is a JSON Error body with a code from the catalog."""

import importlib
import json
import sqlite3

import pytest
from django.test import Client
from rest_framework.exceptions import APIException

from plants.models import Plant

pytestmark = pytest.mark.django_db


def assert_error(response, status: int, code: int, message: str):
    assert response.status_code == status
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"error": code, "message": message}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "{",
            "The body is not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1).",
        ),
        ('{"id": 1, "name": "Rose"} trailing', "The body is not valid JSON: Extra data: line 1 column 27 (char 26)."),
        ('{"id": NaN, "name": "Rose"}', "The body is not valid JSON: NaN is not JSON."),
        ('{"id": Infinity, "name": "Rose"}', "The body is not valid JSON: Infinity is not JSON."),
        (b'{"id": 1, "name": "\xff"}', "The body is not valid UTF-8."),
        ('[{"id": 1, "name": "Rose"}]', "The body must be a JSON object (a NewPlant)."),
        ('"Rose"', "The body must be a JSON object (a NewPlant)."),
        ("null", "The body must be a JSON object (a NewPlant)."),
        ("", "The body is empty; send a NewPlant JSON object."),
        ('{"id": 1, "name": "a", "id": 2}', 'The body has the key "id" more than once.'),
        ('{"id": 1, "name": "Rose", "tag": {"a": 1, "a": 2}}', 'The body has the key "a" more than once.'),
        # The duplicate neither first nor last: the refusal names it, not whichever key is at an end.
        ('{"id": 1, "name": "a", "name": "b", "tag": "c"}', 'The body has the key "name" more than once.'),
        (
            '{"id": 1, "name": "Rose", "tag": {"a": 1, "b": 2, "b": 3, "c": 4}}',
            'The body has the key "b" more than once.',
        ),
        ("[" * 1000 + "]" * 1000, "The body nests arrays or objects more than 32 deep."),
        ('{"id": 1, "name": ' + "[" * 2000, "The body nests arrays or objects more than 32 deep."),
        (
            '{"id": 1, "name": "Rose", "tag": ' + '{"a":' * 33 + "1" + "}" * 33 + "}",
            "The body nests arrays or objects more than 32 deep.",
        ),
    ],
    ids=[
        "truncated",
        "trailing-data",
        "nan",
        "infinity",
        "not-utf8",
        "array",
        "string",
        "null",
        "empty",
        "duplicate-key",
        "nested-duplicate-key",
        "duplicate-key-in-the-middle",
        "nested-duplicate-key-in-the-middle",
        "nested-1000-deep",
        "unclosed-2000-deep",
        "object-33-deep",
    ],
)
def test_malformed_body_returns_400_malformed_body_and_stores_nothing(post_plant, body, message):
    assert_error(post_plant(body), 400, 40001, message)
    assert Plant.objects.count() == 0


@pytest.mark.parametrize(
    ("content_type", "shown"),
    [
        ("text/plain", "text/plain"),
        ("application/x-www-form-urlencoded", "application/x-www-form-urlencoded"),
        ("", "(none)"),
    ],
)
def test_body_not_sent_as_json_returns_415(post_plant, content_type, shown):
    response = post_plant('{"id": 1, "name": "Rose"}', content_type=content_type)

    assert_error(response, 415, 41500, f'Unsupported media type "{shown}" in request.')
    assert Plant.objects.count() == 0


def test_brackets_inside_strings_do_not_count_as_nesting(post_plant):
    response = post_plant({"id": 1, "name": "[" * 100 + "{" * 100, "tag": '"]}\\'})

    assert response.status_code == 200
    assert response.json() == {"id": 1, "name": "[" * 100 + "{" * 100, "tag": '"]}\\'}


def test_chunked_body_without_nginx_in_front_returns_411(post_plant):
    # gunicorn on its own hands Django a chunked body that Django cannot read: refused, not "empty".
    response = post_plant("", HTTP_TRANSFER_ENCODING="chunked")

    assert_error(response, 411, 41100, "A chunked body is not read here; send it with a Content-Length.")
    assert Plant.objects.count() == 0


def test_json_with_charset_parameter_is_accepted(post_plant):
    response = post_plant({"id": 1, "name": "Rose"}, content_type="application/json; charset=utf-8")

    assert (response.status_code, response.json()) == (200, {"id": 1, "name": "Rose"})
    assert list(Plant.objects.values_list("id", "name", "tag")) == [(1, "Rose", None)]


def test_a_charset_other_than_utf_8_is_not_read_the_body_is_read_as_utf_8(post_plant):
    named_latin_1 = "application/json; charset=latin-1"
    as_utf_8 = post_plant('{"id": 1, "name": "Caf\u00e9"}'.encode(), content_type=named_latin_1)
    as_latin_1 = post_plant('{"id": 2, "name": "Caf\u00e9"}'.encode("latin-1"), content_type=named_latin_1)

    assert (as_utf_8.status_code, as_utf_8.json()) == (200, {"id": 1, "name": "Caf\u00e9"})
    assert (as_latin_1.status_code, as_latin_1.json()["error"]) == (400, 40001)
    assert list(Plant.objects.values_list("id", "name")) == [(1, "Caf\u00e9")]


def test_body_over_the_cap_returns_413_and_stores_nothing(post_plant, settings):
    settings.PLANTS_MAX_BODY_BYTES = 4096

    response = post_plant({"id": 1, "name": "x" * 5000})

    assert_error(response, 413, 41300, "The body is larger than 4096 bytes.")
    assert Plant.objects.count() == 0


def test_body_over_the_cap_is_refused_while_read_whatever_its_declared_length(post_plant, settings):
    # Content-Length "+5000" is a number to Django but not a plain one to the parser's early
    # check: the cap still holds, by counting what is read.
    settings.PLANTS_MAX_BODY_BYTES = 4096

    response = post_plant({"id": 1, "name": "x" * 5000}, CONTENT_LENGTH="+5000")

    assert_error(response, 413, 41300, "The body is larger than 4096 bytes.")
    assert Plant.objects.count() == 0


def test_largest_valid_new_plant_fits_under_the_default_cap_even_fully_escaped(post_plant, settings):
    assert settings.PLANTS_MAX_BODY_BYTES == 4096
    body = json.dumps({"id": -(2**63), "name": "🌿" * 200, "tag": "🌿" * 100})  # \ud83c\udf3f: 12 bytes each

    response = post_plant(body)

    assert len(body.encode()) > 3600
    assert response.status_code == 200
    assert Plant.objects.get().name == "🌿" * 200


def test_body_just_under_the_cap_is_parsed(post_plant, settings):
    settings.PLANTS_MAX_BODY_BYTES = 4096
    body = '{"id": 1, "name": "Rose", "pad": "%s"}' % ("x" * (4096 - 40))

    response = post_plant(body)

    assert len(body.encode()) <= 4096
    assert response.status_code == 400  # read and parsed: refused only for the unknown field
    assert response.json()["error"] == 40002


@pytest.mark.parametrize(
    "accept",
    ["application/json", "*/*", "application/*", "text/html, */*;q=0.1", "application/json; charset=utf-8", ""],
)
def test_accept_that_allows_json_is_answered_in_json(post_plant, accept):
    response = post_plant({"id": 1, "name": "Rose"}, HTTP_ACCEPT=accept)

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"


@pytest.mark.parametrize(
    "accept", ["text/html", "application/xml, text/*", "application/json;q=0", "application/json;q=0, */*", "x"]
)
def test_accept_that_excludes_json_returns_406_error_body_and_stores_nothing(post_plant, accept):
    response = post_plant({"id": 1, "name": "Rose"}, HTTP_ACCEPT=accept)

    assert_error(response, 406, 40600, "The answer can only be application/json, which the Accept header excludes.")
    assert Plant.objects.count() == 0


@pytest.mark.parametrize("method", ["get", "put", "patch", "delete", "options"])
def test_other_method_on_plants_returns_405_with_allow(api_client, auth_headers, method):
    response = getattr(api_client, method)("/plants", **auth_headers)

    assert_error(response, 405, 40500, f'Method "{method.upper()}" not allowed.')
    assert response["Allow"] == "POST"


@pytest.mark.parametrize("path", ["/nothing-here", "/plants/", "/plants/1", "/PLANTS"])
def test_unknown_path_returns_404_error_body(api_client, auth_headers, path):
    response = api_client.post(path, {"id": 1, "name": "Rose"}, format="json", **auth_headers)

    assert_error(response, 404, 40400, f"No such path: {path}")


def test_disallowed_host_returns_400_error_body():
    response = Client().get("/healthz", HTTP_HOST="evil.example")

    assert_error(response, 400, 40000, "Bad request.")


def test_unexpected_exception_returns_500_error_body_and_is_logged(api_client, post_plant, monkeypatch, caplog):
    def explode(**kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("plants.serializers.plant_create", explode)
    api_client.raise_request_exception = False  # answer as a server would, not re-raise into the test

    response = post_plant({"id": 1, "name": "Rose"})

    assert_error(response, 500, 50000, "Internal server error; it has been logged.")
    assert "boom" in caplog.text


def test_unexpected_api_exception_returns_500_internal_error_body(post_plant, monkeypatch):
    def fail(**kwargs):
        raise APIException()  # a DRF error of no kind the catalog names: its status decides

    monkeypatch.setattr("plants.serializers.plant_create", fail)

    response = post_plant({"id": 1, "name": "Rose"})

    assert_error(response, 500, 50000, "A server error occurred.")
    assert Plant.objects.count() == 0


def test_create_on_a_database_that_refuses_writes_returns_503_error_body_and_stores_nothing(post_plant, writes_refused):
    assert post_plant({"id": 1, "name": "Rose"}).status_code == 200  # the token's last use is written
    writes_refused()

    response = post_plant({"id": 2, "name": "Rose"})

    assert_error(response, 503, 50300, "The service cannot reach its database; retry later.")
    assert list(Plant.objects.values_list("id", flat=True)) == [1]


# A trigger that refuses every INSERT of a plant with a constraint error, as a conflict would,
# though no plant has the id: the service's re-read finds no row to compare (one deleted in between).
REFUSE_INSERTS = {
    "sqlite": ["CREATE TRIGGER refuse_plants BEFORE INSERT ON plants_plant BEGIN SELECT RAISE(ABORT, 'refused'); END"],
    "postgresql": [
        "CREATE FUNCTION refuse_plants() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'refused' USING ERRCODE = 'unique_violation'; END $$",
        "CREATE TRIGGER refuse_plants BEFORE INSERT ON plants_plant FOR EACH ROW EXECUTE FUNCTION refuse_plants()",
    ],
}


def test_conflict_whose_row_is_gone_on_reread_answers_500_error_body_and_is_logged(api_client, post_plant, caplog):
    from django.db import connection

    api_client.raise_request_exception = False  # answer as a server would, not re-raise into the test
    with connection.cursor() as cursor:  # undone with the test's transaction
        for statement in REFUSE_INSERTS[connection.vendor]:
            cursor.execute(statement)

    response = post_plant({"id": 2, "name": "Rose"})

    assert_error(response, 500, 50000, "Internal server error; it has been logged.")
    assert "database error" in caplog.text
    assert not Plant.objects.exists()


def test_disallowed_host_logs_one_warning_line_without_traceback(caplog):
    Client().get("/healthz", HTTP_HOST="evil.example")

    records = [record for record in caplog.records if record.name.startswith("django.security")]
    assert [(record.levelname, record.exc_info) for record in records] == [("WARNING", None)]
    assert "Invalid HTTP_HOST header: 'evil.example'" in records[0].getMessage()


@pytest.mark.urls("tests.urls")
@pytest.mark.parametrize(
    ("kind", "status", "body"),
    [
        (
            "validation-error",
            400,
            {
                "error": 40002,
                "message": "Invalid request body. non_field_errors: The plant is not in season.",
                "fields": {"non_field_errors": ["The plant is not in season."]},
            },
        ),
        ("not-found", 404, {"error": 40400, "message": "Not found."}),
        ("permission-denied", 403, {"error": 40300, "message": "You do not have permission to perform this action."}),
    ],
)
def test_django_exception_raised_in_an_api_view_answers_its_error_body(api_client, kind, status, body):
    response = api_client.post(f"/test/raise/{kind}", {}, format="json")

    assert (response.status_code, response["Content-Type"], response.json()) == (status, "application/json", body)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_connection_whose_server_turned_read_only_is_replaced_before_the_next_request(post_plant):
    from django.db import close_old_connections, connection

    assert post_plant({"id": 1, "name": "Rose"}).status_code == 200
    # As a primary demoted by a failover that kept its connections open: this session takes no writes.
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
    session = connection.connection

    refused = post_plant({"id": 2, "name": "Rose"})  # the test client skips the request signals' check
    close_old_connections()  # what Django does as each request ends and starts under an app server
    after = post_plant({"id": 3, "name": "Rose"})

    assert_error(refused, 503, 50300, "The service cannot reach its database; retry later.")
    assert after.status_code == 200 and connection.connection is not session
    assert sorted(Plant.objects.values_list("id", flat=True)) == [1, 3]


@pytest.mark.urls("tests.urls")
def test_plain_view_that_raises_permission_denied_answers_403_error_body():
    response = Client().get("/test/plain-forbidden")

    assert (response.status_code, response["Content-Type"]) == (403, "application/json")
    assert response.json() == {"error": 40300, "message": "Forbidden."}


def test_write_refused_by_a_server_that_turned_read_only_is_answered_503_not_500():
    # The exception as Django raises it from psycopg's for SQLSTATE 25006 (PostgreSQL's own run of
    # this, from a real read-only session, is test_connection_whose_server_turned_read_only_...).
    import psycopg
    from django.db import InternalError

    from plants.exception_handler import api_exception_handler

    refused = InternalError("cannot execute INSERT in a read-only transaction")
    refused.__cause__ = psycopg.errors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction")

    response = api_exception_handler(refused, {})

    assert (response.status_code, response.data) == (
        503,
        {"error": 50300, "message": "The service cannot reach its database; retry later."},
    )


# What a full disk raises, as Django raises it from each driver's error: SQLite's SQLITE_FULL, and
# PostgreSQL's refusals while its disk is full and after it PANICs on a WAL write it cannot make (the
# connection cut, then refused while the server restarts and recovers).
FULL_DISK_ERRORS = {
    "sqlite-full": ("sqlite3", "OperationalError", "database or disk is full"),
    "postgresql-disk-full": (
        "psycopg.errors",
        "DiskFull",
        'could not extend file "base/16384/16400": wrote only 4096 of 8192 bytes at block 7',
    ),
    "postgresql-crashed": (
        "psycopg",
        "OperationalError",
        "consuming input failed: server closed the connection unexpectedly",
    ),
    "postgresql-crash-shutdown": (
        "psycopg.errors",
        "CrashShutdown",
        "terminating connection because of crash of another server process",
    ),
    "postgresql-recovering": ("psycopg.errors", "CannotConnectNow", "the database system is in recovery mode"),
}


@pytest.mark.parametrize("error", FULL_DISK_ERRORS.values(), ids=FULL_DISK_ERRORS.keys())
def test_errors_of_a_full_disk_are_answered_503_not_500(error):
    from django.db import OperationalError

    from plants.exception_handler import api_exception_handler

    module, name, message = error
    driver_error = getattr(importlib.import_module(module), name)(message)
    raised = OperationalError(message)  # Django's class for each: its wrapper maps by the driver's class
    raised.__cause__ = driver_error

    response = api_exception_handler(raised, {})

    assert (response.status_code, response.data) == (
        503,
        {"error": 50300, "message": "The service cannot reach its database; retry later."},
    )


@pytest.mark.sqlite  # SQLite's own error, as Django's SQLite backend wraps it
def test_create_on_a_full_sqlite_disk_returns_503_error_body_and_stores_nothing(post_plant, monkeypatch):
    from django.db import connection

    def disk_full(**kwargs):
        with connection.wrap_database_errors:  # as Django's cursor raises SQLite's error
            raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr("plants.serializers.plant_create", disk_full)

    response = post_plant({"id": 1, "name": "Rose"})

    assert_error(response, 503, 50300, "The service cannot reach its database; retry later.")
    assert Plant.objects.count() == 0
