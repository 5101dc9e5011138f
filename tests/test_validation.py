"""POST /plants refuses every body that is not a NewPlant, field by field, and stores nothing."""

import pytest

from plants.models import Plant

pytestmark = pytest.mark.django_db


def assert_invalid(response, fields: dict):
    """A 400 INVALID_FIELD whose message names each field, with the per-field detail."""
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == 40002
    assert body["fields"] == fields
    for name, messages in fields.items():
        assert f"{name}: {' '.join(messages)}" in body["message"]
    assert set(body) == {"error", "message", "fields"}
    assert Plant.objects.count() == 0


@pytest.mark.parametrize(
    "bad_id",
    ["42", 4.5, 4.0, True, False, [1], {"n": 1}],
    ids=["string", "float", "integral-float", "true", "false", "list", "object"],
)
def test_id_that_is_not_a_json_integer_returns_400_invalid_field(post_plant, bad_id):
    response = post_plant({"id": bad_id, "name": "Rose"})

    assert_invalid(response, {"id": ["Must be a JSON integer."]})


def test_null_id_returns_400_invalid_field(post_plant):
    assert_invalid(post_plant({"id": None, "name": "Rose"}), {"id": ["This field may not be null."]})


@pytest.mark.parametrize(
    ("bad_id", "message"),
    [
        (2**63, "Ensure this value is less than or equal to 9223372036854775807."),
        (-(2**63) - 1, "Ensure this value is greater than or equal to -9223372036854775808."),
    ],
)
def test_id_outside_int64_returns_400_invalid_field(post_plant, bad_id, message):
    assert_invalid(post_plant({"id": bad_id, "name": "Rose"}), {"id": [message]})


@pytest.mark.parametrize("field", ["name", "tag"])
@pytest.mark.parametrize("bad_value", [7, 1.5, True, ["Rose"], {"latin": "Rosa"}], ids=str)
def test_name_or_tag_that_is_not_a_json_string_returns_400(post_plant, field, bad_value):
    body = {"id": 1, "name": "Rose", field: bad_value}

    assert_invalid(post_plant(body), {field: ["Must be a JSON string."]})


@pytest.mark.parametrize("field", ["name", "tag"])
def test_null_name_or_tag_returns_400(post_plant, field):
    body = {"id": 1, "name": "Rose", field: None}

    assert_invalid(post_plant(body), {field: ["This field may not be null."]})


@pytest.mark.parametrize("field", ["name", "tag"])
@pytest.mark.parametrize("blank", ["", "   ", "\t\n"], ids=["empty", "spaces", "whitespace"])
def test_blank_name_or_tag_returns_400(post_plant, field, blank):
    body = {"id": 1, "name": "Rose", field: blank}

    assert_invalid(post_plant(body), {field: ["This field may not be blank."]})


@pytest.mark.parametrize(("field", "limit"), [("name", 200), ("tag", 100)])
def test_name_or_tag_over_length_bound_returns_400(post_plant, field, limit):
    body = {"id": 1, "name": "Rose", field: "x" * (limit + 1)}

    assert_invalid(post_plant(body), {field: [f"Ensure this field has no more than {limit} characters."]})


def raw_body_with(field: str, raw_value: str) -> str:
    """A NewPlant as JSON text, with `field` set to `raw_value` as written (escapes kept)."""
    fields = {"id": "1", "name": '"Rose"', field: raw_value}
    return "{" + ", ".join(f'"{name}": {value}' for name, value in fields.items()) + "}"


@pytest.mark.parametrize("field", ["name", "tag"])
def test_nul_character_returns_400(post_plant, field):
    response = post_plant(raw_body_with(field, '"bad\\u0000value"'))

    assert_invalid(response, {field: ["Null characters are not allowed."]})


@pytest.mark.parametrize("field", ["name", "tag"])
def test_lone_surrogate_returns_400(post_plant, field):
    response = post_plant(raw_body_with(field, '"bad\\ud800value"'))

    assert_invalid(response, {field: ["Surrogate characters are not allowed: U+D800."]})


def test_missing_id_and_name_returns_400_naming_both(post_plant):
    response = post_plant({"tag": "aroid"})

    assert_invalid(response, {"id": ["This field is required."], "name": ["This field is required."]})


def test_unknown_field_returns_400_naming_it(post_plant):
    response = post_plant({"id": 1, "name": "Rose", "tga": "typo"})

    assert_invalid(response, {"tga": ["Unknown field; a NewPlant has only id, name and tag."]})


def test_unknown_field_named_by_a_lone_surrogate_returns_400_naming_it_escaped(post_plant):
    response = post_plant('{"id": 1, "name": "Rose", "\\ud800": 1}')

    assert_invalid(response, {"\\ud800": ["Unknown field; a NewPlant has only id, name and tag."]})


def test_unknown_field_is_reported_beside_other_field_errors(post_plant):
    response = post_plant({"id": "1", "name": "Rose", "colour": "red"})

    assert_invalid(
        response,
        {"id": ["Must be a JSON integer."], "colour": ["Unknown field; a NewPlant has only id, name and tag."]},
    )


def test_strings_are_stored_exactly_as_sent(post_plant):
    body = {"id": 1, "name": "  Monstera deliciosa ", "tag": "\taroid\n"}

    response = post_plant(body)

    assert (response.status_code, response.json()) == (200, body)
    assert list(Plant.objects.values_list("id", "name", "tag")) == [(1, "  Monstera deliciosa ", "\taroid\n")]
