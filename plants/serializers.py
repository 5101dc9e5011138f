"""The wire shapes NewPlant (request) and Plant (response), with every field rule of the contract."""

from rest_framework import serializers

from plants.models import PLANT_NAME_MAX_LENGTH, PLANT_TAG_MAX_LENGTH, Plant
from plants.services import plant_create

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer only: no strings ("42"), floats (4.0), booleans or null."""

    default_error_messages = {"invalid": "Must be a JSON integer."}

    def to_internal_value(self, data):
        if type(data) is not int:  # bool is a subclass of int: `type` excludes it
            self.fail("invalid")
        return data


# White space as Python's str.strip() knows it, spelled out for the published pattern (ECMA-262's \s
# is another set).
WHITE_SPACE = r"\t\n\u000b\f\r\u001c-\u001f \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"


class StrictCharField(serializers.CharField):
    """A JSON string only, kept as sent (no trimming); never a number, list, object or null.

    DRF's CharField also refuses NUL characters and lone surrogates. The schema publishes these rules
    as `pattern` and `rules` (plants/schema.py), and a field's own rules, each a Django RegexValidator
    in its `validators`, as a pattern and the validator's message each.
    """

    default_error_messages = {"invalid": "Must be a JSON string."}
    # No NUL, and one character that is not white space. Lone surrogates have no portable pattern
    # (Rust's and Go's regular expressions cannot name them): `rules` says it, and a string of Unicode
    # scalar values (I-JSON, RFC 7493) never has one.
    pattern = rf"^[^\u0000]*[^\u0000{WHITE_SPACE}][^\u0000]*$"
    rules = "Not only white space; no NUL characters or lone surrogates."

    def __init__(self, **kwargs):
        super().__init__(trim_whitespace=False, allow_blank=False, min_length=1, **kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        if not data.strip():
            self.fail("blank")
        return data


def shown(key: str) -> str:
    """A field name as the client sent it, but a lone surrogate (valid JSON, no UTF-8) escaped as `\\ud800`:
    the answer names every unknown field, and must encode."""
    return key.encode("utf-8", "backslashreplace").decode("utf-8")


class NewPlantSerializer(serializers.Serializer):
    """The create request: `{"id": 1, "name": "Monstera", "tag": "aroid"}`; unknown fields are refused."""

    id = StrictIntegerField(min_value=INT64_MIN, max_value=INT64_MAX, help_text="Identification number of the plant")
    name = StrictCharField(max_length=PLANT_NAME_MAX_LENGTH, help_text="The name of the plant")
    tag = StrictCharField(
        max_length=PLANT_TAG_MAX_LENGTH, required=False, help_text="Tag that specifies the type of the plant"
    )

    def to_internal_value(self, data):
        unknown = {
            shown(key): ["Unknown field; a NewPlant has only id, name and tag."]
            for key in data
            if key not in self.fields
        }
        try:
            values = super().to_internal_value(data)
        except serializers.ValidationError as error:
            raise serializers.ValidationError({**error.detail, **unknown}) from None
        if unknown:
            raise serializers.ValidationError(unknown)
        return values

    def create(self, validated_data) -> Plant:
        """`save()`'s create: the service's, which answers a retry of the same create with the stored plant."""
        return plant_create(**validated_data)


class PlantSerializer(NewPlantSerializer):
    """The stored plant: `{"id": 1, "name": "Monstera", "tag": "aroid"}`, `tag` only when it has one.

    The fields and their rules are NewPlant's: a plant is stored exactly as it was sent.
    """

    def to_representation(self, instance: Plant) -> dict:
        data = {"id": instance.id, "name": instance.name}
        if instance.tag is not None:
            data["tag"] = instance.tag
        return data


class ErrorSerializer(serializers.Serializer):
    """Every non-2xx answer: `{"error": 40002, "message": "...", "fields": {"id": ["..."]}}`."""

    error = serializers.IntegerField(
        min_value=-(2**31), max_value=2**31 - 1, help_text="Numeric error value: a code from the catalog"
    )
    message = serializers.CharField(help_text="Error message text")
    fields = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        required=False,
        help_text="For INVALID_FIELD (40002) only: the messages for each field in error",
    )
