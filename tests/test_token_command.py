"""`manage.py token issue|revoke|list`."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from plants.models import ApiToken, Plant
from plants.tokens import token_digest

pytestmark = pytest.mark.django_db


def run(*args) -> tuple[str, str]:
    stdout, stderr = StringIO(), StringIO()
    call_command("token", *args, stdout=stdout, stderr=stderr)
    return stdout.getvalue(), stderr.getvalue()


def test_issue_prints_only_the_token_on_stdout_and_stores_its_digest():
    stdout, stderr = run("issue", "ci")

    secret = stdout.strip()
    assert stdout == secret + "\n"
    assert secret.startswith("plnt_")
    token = ApiToken.objects.get()
    assert (token.name, token.digest, token.expires_at) == ("ci", token_digest(secret), None)
    assert "shown only once" in stderr
    assert secret not in stderr


def test_issued_token_authenticates_a_create(api_client):
    secret = run("issue", "ci")[0].strip()

    response = api_client.post(
        "/plants", {"id": 1, "name": "Rose"}, format="json", HTTP_AUTHORIZATION=f"Bearer {secret}"
    )

    assert (response.status_code, response.json()) == (200, {"id": 1, "name": "Rose"})
    assert list(Plant.objects.values_list("id", "name")) == [(1, "Rose")]


def test_issue_with_expiry_sets_expires_at_days_ahead():
    run("issue", "ci", "--expires-in", "30")

    token = ApiToken.objects.get()
    assert (token.expires_at - token.created_at).days == 30


@pytest.mark.parametrize("days", ["0", "-3"])
def test_issue_with_non_positive_expiry_fails(days):
    with pytest.raises(CommandError, match="--expires-in must be a positive number of days"):
        run("issue", "ci", "--expires-in", days)
    assert ApiToken.objects.count() == 0


def test_revoke_revokes_every_active_token_of_the_name_only():
    run("issue", "ci")
    run("issue", "ci")
    run("issue", "other")

    _, stderr = run("revoke", "ci")

    assert "Revoked 2 token(s) named 'ci'" in stderr
    assert sorted(ApiToken.objects.active().values_list("name", flat=True)) == ["other"]


def test_revoke_finds_a_name_given_with_spaces_around_it_as_issue_stored_it():
    run("issue", " ci ")

    _, stderr = run("revoke", " ci ")

    assert "Revoked 1 token(s) named 'ci'" in stderr
    assert not ApiToken.objects.active().exists()


def test_revoke_leaves_tokens_revoked_earlier_as_they_were():
    run("issue", "ci")
    run("revoke", "ci")
    first_revoked_at = ApiToken.objects.get().revoked_at

    with pytest.raises(CommandError, match="No active token named 'ci'"):
        run("revoke", "ci")

    assert ApiToken.objects.get().revoked_at == first_revoked_at


def test_revoke_of_unknown_name_fails():
    with pytest.raises(CommandError, match="No active token named 'nobody'"):
        run("revoke", "nobody")


def test_list_shows_name_prefix_and_status_never_the_secret():
    secret = run("issue", "ci")[0].strip()
    run("issue", "old")
    run("revoke", "old")

    stdout, _ = run("list")

    lines = stdout.splitlines()
    assert lines[0].split() == ["NAME", "PREFIX", "CREATED", "EXPIRES", "LAST", "USED", "STATUS"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert rows["ci"].split()[1] == secret[:12]
    assert rows["ci"].endswith("active")
    assert rows["old"].endswith("revoked")
    assert secret not in stdout
    token = ApiToken.objects.get(name="ci")
    assert token.digest not in stdout
