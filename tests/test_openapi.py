"""The published contract: /openapi.json and /openapi.yaml match the committed openapi.yaml and the interface."""

import re
from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from django.test import Client
from openapi_spec_validator import validate

from plants.exceptions import ErrorCode
from plants.serializers import NewPlantSerializer, StrictCharField

pytestmark = pytest.mark.django_db

COMMITTED_SCHEMA = Path(__file__).resolve().parent.parent / "openapi.yaml"


@pytest.fixture(scope="module")
def schema() -> dict:
    return yaml.safe_load(COMMITTED_SCHEMA.read_text())


def generated_schema_text() -> str:
    out = StringIO()
    call_command("spectacular", "--validate", "--fail-on-warn", stdout=out)
    return out.getvalue()


def test_committed_schema_is_what_the_code_generates():
    assert generated_schema_text() == COMMITTED_SCHEMA.read_text(), "run `make schema` and review the diff"


def test_committed_schema_is_valid_openapi_3(schema):
    validate(schema)


def test_schema_json_is_served_without_authentication(schema):
    response = Client().get("/openapi.json")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/vnd.oai.openapi+json")
    assert response.json() == schema


def test_schema_is_served_even_with_a_bad_token():
    response = Client().get("/openapi.yaml", HTTP_AUTHORIZATION="Bearer nonsense")

    assert response.status_code == 200
    assert yaml.safe_load(response.content)["info"]["title"] == "Plant Store"


def test_schema_declares_the_interface_info_and_bearer_security(schema):
    assert schema["info"]["title"] == "Plant Store"
    assert schema["info"]["version"] == "1.0.0"
    assert schema["info"]["license"]["name"] == "MIT"
    bearer = schema["components"]["securitySchemes"]["bearerAuth"]
    assert (bearer["type"], bearer["scheme"]) == ("http", "bearer")
    assert schema["security"] == [{"bearerAuth": []}]
    assert list(schema["paths"]) == ["/plants"]
    assert list(schema["paths"]["/plants"]) == ["post"]


def test_schema_components_match_the_interface_shapes(schema):
    components = schema["components"]["schemas"]
    new_plant, plant, error = components["NewPlant"], components["Plant"], components["Error"]

    assert new_plant["required"] == ["id", "name"]
    assert new_plant["properties"]["id"]["format"] == "int64"
    assert new_plant["additionalProperties"] is False
    assert (new_plant["properties"]["name"]["minLength"], new_plant["properties"]["name"]["maxLength"]) == (1, 200)
    assert (new_plant["properties"]["tag"]["minLength"], new_plant["properties"]["tag"]["maxLength"]) == (1, 100)
    assert plant["required"] == ["id", "name"]
    assert set(plant["properties"]) == {"id", "name", "tag"}
    assert "nullable" not in plant["properties"]["tag"]
    assert error["required"] == ["error", "message"]
    assert (error["properties"]["error"]["type"], error["properties"]["error"]["format"]) == ("integer", "int32")


def test_create_operation_documents_every_status_it_answers(schema):
    operation = schema["paths"]["/plants"]["post"]

    assert operation["requestBody"]["required"] is True
    assert operation["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/NewPlant"
    }
    responses = operation["responses"]
    assert sorted(responses) == ["200", "400", "401", "406", "411", "413", "415", "429", "500", "503"]
    assert responses["200"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Plant"}
    for status in ["400", "401", "406", "411", "413", "415", "429", "500", "503"]:
        assert responses[status]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
    assert "40003" in responses["400"]["description"]
    assert "Retry-After" in responses["429"]["headers"]
    for status in ["200", "400", "413", "415", "429", "503"]:
        assert {"RateLimit-Policy", "RateLimit"} <= set(responses[status]["headers"]), status


def published_patterns(field_schema: dict) -> list[re.Pattern]:
    """A string field's patterns (its own and each of its allOf), as ECMA-262 reads them: `$` only at the end."""
    patterns = [field_schema["pattern"], *(part["pattern"] for part in field_schema.get("allOf", []))]
    return [re.compile(re.sub(r"\$$", r"\\Z", pattern)) for pattern in patterns]


# Strings of more than one character whose rules a one-character string cannot tell apart.
LONGER_STRINGS = ["Rose", " Rose \u3000", "Monstera deliciosa", "a\tb", "a\n", "\na", "x\u0000y", "  ", " \t\u3000"]
STRING_FIELDS = [name for name, field in NewPlantSerializer().fields.items() if isinstance(field, StrictCharField)]


@pytest.mark.parametrize("name", STRING_FIELDS)
def test_a_string_field_s_published_patterns_are_exactly_the_rules_the_server_enforces(schema, name):
    """A string is valid by the field's published patterns iff the serializer accepts it: every one-character
    string up to U+3100 (all of Unicode's white space lies below), some beyond, and longer ones. Surrogates,
    which no portable pattern can name, are refused and the description says so."""
    from rest_framework.exceptions import ValidationError

    field = NewPlantSerializer().fields[name]
    field_schema = schema["components"]["schemas"]["NewPlant"]["properties"][name]
    patterns = published_patterns(field_schema)
    for text in [*map(chr, [*range(0x3100), 0xFEFF, 0x1F33F, 0x10FFFF]), *LONGER_STRINGS]:
        try:
            field.run_validation(text)
        except ValidationError:
            accepted = False
        else:
            accepted = True
        assert all(pattern.search(text) for pattern in patterns) == accepted, repr(text)
    assert not NewPlantSerializer(data={"id": 1, "name": "Rose", name: "Rose\ud800"}).is_valid()
    assert "no NUL characters or lone surrogates" in field_schema["description"]


def test_a_field_s_own_rule_is_published_as_its_pattern_and_its_message():
    """A Django RegexValidator on a string field, the way a rule of its own is written, reaches the schema."""
    from django.core.validators import RegexValidator

    from plants.schema import publish_string_rules
    from plants.serializers import WHITE_SPACE

    one_word = RegexValidator(rf"\A[^{WHITE_SPACE}]*\Z", "Must be one word.")
    field = StrictCharField(max_length=10, validators=[one_word])
    field_schema = {"type": "string", "description": "A tag"}

    publish_string_rules(field_schema, field)

    assert field_schema["pattern"] == StrictCharField.pattern
    assert field_schema["allOf"] == [{"pattern": rf"^[^{WHITE_SPACE}]*$"}]
    assert field_schema["description"] == f"A tag. {StrictCharField.rules} Must be one word."
    accepted = {
        text
        for text in ["aroid", "two words", " ", "a\n"]
        if all(p.search(text) for p in published_patterns(field_schema))
    }
    assert accepted == {"aroid"}


def test_docs_page_renders_with_assets_served_by_the_service():
    client = Client()

    response = client.get("/docs")

    assert response.status_code == 200
    page = response.content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert assets, page
    assert not [url for url in assets if url.startswith(("http:", "https:", "//"))]
    for url in assets:
        assert client.get(url).status_code == 200, url
    assert "/openapi.json" in page


def test_schema_description_lists_the_error_codes_in_numeric_order(schema):
    listed = [int(code) for code in re.findall(r"^- `(\d+)` ", schema["info"]["description"], re.MULTILINE)]

    assert listed == sorted(int(code) for code in ErrorCode)
