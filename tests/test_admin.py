"""The Django admin: browsing plants, issuing and revoking tokens."""

import re
import subprocess
import sys
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from plants.models import ApiToken, Plant
from plants.services import token_issue
from plants.tokens import token_digest
from tests.live import ROOT, Browser, MakeServe

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(db) -> Client:
    User.objects.create_superuser("admin", "admin@example.com", "a-long-admin-password")
    client = Client()
    client.force_login(User.objects.get(username="admin"))
    return client


@pytest.fixture
def plants(db):
    Plant.objects.create(id=42, name="Monstera deliciosa", tag="aroid")
    Plant.objects.create(id=7, name="Pothos", tag="aroid")
    Plant.objects.create(id=100, name="Saguaro", tag="cactus")
    Plant.objects.create(id=4242, name="Untagged fern")


def listed_ids(response) -> list[int]:
    return sorted(
        int(match) for match in re.findall(r'<th class="field-id"><a href="[^"]+">(-?\d+)</a>', response.text)
    )


def test_plant_list_shows_columns_newest_first(admin_client, plants):
    response = admin_client.get("/admin/plants/plant/")

    assert response.status_code == 200
    for column in ["column-id", "column-name", "column-tag", "column-created_at"]:
        assert column in response.text
    ids = [int(i) for i in re.findall(r'<th class="field-id"><a href="[^"]+">(-?\d+)</a>', response.text)]
    assert ids == [4242, 100, 7, 42]


@pytest.mark.parametrize(
    ("query", "expected"),
    [("monstera", [42]), ("aroid", [7, 42]), ("42", [42]), ("4242", [4242]), ("nothing", [])],
)
def test_plant_search_matches_name_tag_or_exact_id(admin_client, plants, query, expected):
    response = admin_client.get("/admin/plants/plant/", {"q": query})

    assert listed_ids(response) == expected


@pytest.mark.parametrize(
    "query",
    ["\u00b2", "4\u00b2", "9" * 5000, "-9223372036854775809", "9223372036854775808", "1_000", "-"],
    ids=[
        "superscript-two",
        "digit-and-superscript",
        "5000-digits",
        "below-bigint",
        "above-bigint",
        "underscores",
        "minus-alone",
    ],
)
def test_plant_search_for_a_term_that_is_no_bigint_answers_200_and_matches_no_id(admin_client, plants, query):
    response = admin_client.get("/admin/plants/plant/", {"q": query})

    assert response.status_code == 200
    assert listed_ids(response) == []


@pytest.mark.parametrize(("query", "expected"), [(" 42 ", [42]), ("-9223372036854775808", [-(2**63)])])
def test_plant_search_for_a_whole_number_in_bigint_finds_the_plant_with_that_id(admin_client, plants, query, expected):
    Plant.objects.create(id=-(2**63), name="Lowest id")

    response = admin_client.get("/admin/plants/plant/", {"q": query})

    assert response.status_code == 200
    assert listed_ids(response) == expected


def test_plant_filter_by_tag(admin_client, plants):
    response = admin_client.get("/admin/plants/plant/", {"tag": "cactus"})

    assert listed_ids(response) == [100]


def test_plant_filter_by_creation_date(admin_client, plants):
    Plant.objects.filter(id=100).update(created_at=timezone.now() - timedelta(days=60))
    midnight = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)

    response = admin_client.get("/admin/plants/plant/", {"created_at__gte": str(midnight)})

    assert listed_ids(response) == [7, 42, 4242]


def test_plant_id_is_editable_only_when_adding(admin_client, plants):
    add_page = admin_client.get("/admin/plants/plant/add/")
    change_page = admin_client.get("/admin/plants/plant/42/change/")

    assert 'name="id"' in add_page.text
    assert 'name="id"' not in change_page.text
    assert "Monstera deliciosa" in change_page.text


def test_plant_list_query_count_does_not_grow_with_rows(admin_client, plants, django_assert_max_num_queries):
    Plant.objects.bulk_create(Plant(id=10_000 + n, name=f"bulk {n}") for n in range(200))

    with django_assert_max_num_queries(10):
        response = admin_client.get("/admin/plants/plant/")

    assert response.status_code == 200
    # The first page: 50 plants, newest first (the bulk ones were created last, in one go).
    assert len(listed_ids(response)) == 50
    assert set(listed_ids(response)) <= {10_000 + n for n in range(200)}


def test_token_list_shows_status_and_never_a_secret_or_digest(admin_client):
    active, active_secret = token_issue(name="active-client")
    revoked, _ = token_issue(name="gone-client")
    ApiToken.objects.filter(pk=revoked.pk).update(revoked_at=timezone.now())
    expired, _ = token_issue(name="old-client", expires_in=timedelta(days=1))
    ApiToken.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(days=1))

    response = admin_client.get("/admin/plants/apitoken/")

    assert response.status_code == 200
    assert 'class="token-active"' in response.text
    assert 'class="token-revoked"' in response.text
    assert 'class="token-expired"' in response.text
    assert active.prefix in response.text
    assert active_secret not in response.text
    for token in ApiToken.objects.all():
        assert token.digest not in response.text
        assert token.digest not in admin_client.get(f"/admin/plants/apitoken/{token.pk}/change/").text


def test_issue_form_shows_the_token_once_and_stores_only_its_digest(admin_client):
    response = admin_client.post("/admin/plants/apitoken/add/", {"name": "browser", "expires_in_days": "30"})

    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    secret = re.search(r'<code id="issued-token"[^>]*>([^<]+)</code>', response.text).group(1)
    token = ApiToken.objects.get()
    assert (token.name, token.digest) == ("browser", token_digest(secret))
    assert (token.expires_at - token.created_at).days == 30
    later = admin_client.get(f"/admin/plants/apitoken/{token.pk}/change/").text
    assert secret not in later
    api = Client().post(
        "/plants", {"id": 1, "name": "Rose"}, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {secret}"
    )
    assert api.status_code == 200


def test_issue_form_with_bad_input_issues_nothing(admin_client):
    response = admin_client.post("/admin/plants/apitoken/add/", {"name": "", "expires_in_days": "0"})

    assert response.status_code == 200
    assert "This field is required." in response.text
    assert ApiToken.objects.count() == 0


def test_revoke_action_revokes_selected_tokens(admin_client):
    token, secret = token_issue(name="to-revoke")
    kept, _ = token_issue(name="kept")

    response = admin_client.post(
        "/admin/plants/apitoken/", {"action": "revoke_tokens", "_selected_action": [token.pk]}, follow=True
    )

    assert "Revoked 1 token(s)" in response.text
    assert list(ApiToken.objects.active().values_list("name", flat=True)) == ["kept"]
    api = Client().post(
        "/plants", {"id": 1, "name": "Rose"}, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {secret}"
    )
    assert api.status_code == 401


def test_admin_login_without_csrf_token_is_refused():
    client = Client(enforce_csrf_checks=True)

    response = client.post("/admin/login/", {"username": "admin", "password": "x"})

    assert response.status_code == 403
    assert response.json()["error"] == 40300


@pytest.mark.postgres  # the row estimate is PostgreSQL's
def test_large_plant_list_pages_without_counting_every_row(admin_client):
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO plants_plant (id, name, tag, created_at) "
            "SELECT g, 'plant ' || g, 'tag' || (g % 7), now() FROM generate_series(1, 20000) g"
        )
        cursor.execute("ANALYZE plants_plant")

    with CaptureQueriesContext(connection) as unfiltered:
        response = admin_client.get("/admin/plants/plant/", {"p": "3"})
    with CaptureQueriesContext(connection) as filtered:
        admin_client.get("/admin/plants/plant/", {"tag": "tag3"})

    assert response.status_code == 200
    assert "20000 plants" in response.text
    assert not [q["sql"] for q in unfiltered.captured_queries if "COUNT(" in q["sql"].upper()]
    assert [q["sql"] for q in filtered.captured_queries if "COUNT(" in q["sql"].upper()]


@pytest.mark.parametrize(("status", "expected"), [("active", ["fresh"]), ("expired", ["old"]), ("revoked", ["gone"])])
def test_token_status_filter_lists_each_token_under_its_status(admin_client, status, expected):
    token_issue(name="fresh")
    gone, _ = token_issue(name="gone", expires_in=timedelta(days=1))
    old, _ = token_issue(name="old", expires_in=timedelta(days=1))
    ApiToken.objects.filter(pk=gone.pk).update(revoked_at=timezone.now(), expires_at=timezone.now() - timedelta(days=1))
    ApiToken.objects.filter(pk=old.pk).update(expires_at=timezone.now() - timedelta(days=1))

    response = admin_client.get("/admin/plants/apitoken/", {"status": status})

    assert re.findall(r'<th class="field-name"><a href="[^"]+">([^<]+)</a>', response.text) == expected
    assert [token.name for token in ApiToken.objects.all() if token.status() == status] == expected


def test_token_list_refuses_any_filter_on_the_digest(admin_client):
    token, _ = token_issue(name="billing")

    for lookup in ["digest__startswith", "digest", "digest__gt"]:
        response = admin_client.get("/admin/plants/apitoken/", {lookup: token.digest[:1]})

        assert (response.status_code, response.json()) == (400, {"error": 40000, "message": "Bad request."})


def admin_login(client: Client, username: str, password: str, address: str = "10.0.0.1"):
    """Log in as a browser does: GET the form (the CSRF cookie and token), then POST it."""
    client.get("/admin/login/", REMOTE_ADDR=address)
    form = {"username": username, "password": password, "csrfmiddlewaretoken": client.cookies["csrftoken"].value}
    return client.post("/admin/login/?next=/admin/", form, REMOTE_ADDR=address)


def fresh_login(username: str, password: str, address: str):
    """A new browser's login from `address`: (status, whether it is logged in)."""
    client = Client(enforce_csrf_checks=True)
    response = admin_login(client, username, password, address)
    return response.status_code, "_auth_user_id" in client.session


@pytest.fixture
def admins(settings):
    """Two admins, and the production limits: 5 failures for a (name, address), 20 for an address."""
    assert (settings.PLANTS_ADMIN_LOGIN_FAILURES, settings.PLANTS_ADMIN_CLIENT_LOGIN_FAILURES) == (5, 20)
    User.objects.create_superuser("admin", "admin@example.com", "the-admin-password")
    User.objects.create_superuser("operator", "op@example.com", "the-operator-password")


def assert_locked_out(response):
    assert response.status_code == 429
    assert response["Retry-After"] == "900"
    assert response.json() == {
        "error": 42900,
        "message": "Too many failed logins for this user from this address, or from this address; "
        "try again in 15 minutes.",
    }


def fail_seven_times_as_admin_from(address: str) -> list[int]:
    client = Client(enforce_csrf_checks=True)
    return [admin_login(client, "admin", f"guess-{n}", address).status_code for n in range(7)]


def test_failures_for_a_user_from_one_address_do_not_lock_that_user_out_from_another(admins):
    assert fail_seven_times_as_admin_from("127.0.0.2") == [200] * 4 + [429] * 3

    assert fresh_login("admin", "the-admin-password", "127.0.0.3") == (302, True)


def test_failures_for_a_user_lock_that_user_out_from_that_address_even_with_the_right_password(admins):
    fail_seven_times_as_admin_from("127.0.0.2")
    client = Client(enforce_csrf_checks=True)

    assert_locked_out(admin_login(client, "admin", "the-admin-password", "127.0.0.2"))
    assert "_auth_user_id" not in client.session


def test_a_user_locked_out_from_an_address_leaves_the_other_users_of_that_address(admins):
    fail_seven_times_as_admin_from("127.0.0.2")

    assert fresh_login("operator", "the-operator-password", "127.0.0.2") == (302, True)


def test_an_address_failing_on_many_user_names_is_locked_out_for_every_name(admins):
    client = Client(enforce_csrf_checks=True)
    statuses = [admin_login(client, f"nobody-{n}", "guess", "127.0.0.7").status_code for n in range(20)]

    assert statuses == [200] * 19 + [429]  # one failure per name: only the address's limit applies
    assert_locked_out(admin_login(client, "admin", "the-admin-password", "127.0.0.7"))
    assert fresh_login("admin", "the-admin-password", "127.0.0.8") == (302, True)


def test_a_login_clears_only_that_users_failures_from_that_address(admins):
    client = Client(enforce_csrf_checks=True)
    assert [admin_login(client, "admin", f"guess-{n}", "127.0.0.2").status_code for n in range(4)] == [200] * 4

    assert fresh_login("operator", "the-operator-password", "127.0.0.2") == (302, True)

    # admin's four failures from this address still count: the fifth locks it.
    assert_locked_out(admin_login(client, "admin", "guess-4", "127.0.0.2"))


@pytest.mark.live
@pytest.mark.own_database
def test_lockout_through_make_serve_locks_the_address_that_failed_not_the_user(tmp_path):
    server = MakeServe(tmp_path).start()
    try:
        subprocess.run(
            [sys.executable, "manage.py", "createsuperuser", "--no-input", "--username", "admin", "--email", "a@x.org"],
            cwd=ROOT,
            env={**server.env, "DJANGO_SUPERUSER_PASSWORD": "the-admin-password"},
            check=True,
            capture_output=True,
        )
        attacker = Browser(server.port, "127.0.0.2")
        failures = [attacker.log_in("admin", f"guess-{n}")[0] for n in range(7)]
        # Headers that claim another address change nothing: nginx names the client itself.
        claims = {"X-Real-IP": "127.0.0.3", "X-Forwarded-For": "127.0.0.3"}
        spoofing = attacker.log_in("admin", "the-admin-password", claims)
        locked = attacker.log_in("admin", "the-admin-password")
        admin = Browser(server.port, "127.0.0.3")
        logged_in = admin.log_in("admin", "the-admin-password")
        index = admin.send("GET", "/admin/")
    finally:
        server.stop()

    assert failures == [200] * 4 + [429] * 3
    for status, headers, text in (spoofing, locked):
        assert (status, headers["Content-Type"], headers["Retry-After"]) == (429, "application/json", "900")
        assert text == (
            '{"error": 42900, "message": "Too many failed logins for this user from this address, '
            'or from this address; try again in 15 minutes."}'
        )
    assert (logged_in[0], logged_in[1]["Location"]) == (302, "/admin/")
    assert index[0] == 200
    assert "Site administration" in index[2]
