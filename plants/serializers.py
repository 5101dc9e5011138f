"""The wire shapes NewPlant (request) and Plant (response), with every field rule of the contract."""

import functools

from django.core.exceptions import ImproperlyConfigured
from django.utils.functional import cached_property
from rest_framework import serializers

from plants.models import PLANT_NAME_MAX_LENGTH, PLANT_TAG_MAX_LENGTH, Plant

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer only: no strings ("42"), floats (4.0), booleans or null."""

    default_error_messages = {"invalid": "Must be a JSON integer."}

    def to_internal_value(self, data):
        if type(data) is not int:  # bool is a subclass of int: `type` excludes it
            self.fail("invalid")
        return data


class StrictCharField(serializers.CharField):
    """A JSON string only, kept as sent (no trimming); never a number, list, object or null.

    DRF's CharField also refuses NUL characters and lone surrogates.
    """

    default_error_messages = {"invalid": "Must be a JSON string."}

    def __init__(self, **kwargs):
        super().__init__(trim_whitespace=False, allow_blank=False, min_length=1, **kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        if not data.strip():
            self.fail("blank")
        return data


class NewPlantSerializer(serializers.Serializer):
    """The create request: `{"id": 1, "name": "Monstera", "tag": "aroid"}`; unknown fields are refused."""

    id = StrictIntegerField(min_value=INT64_MIN, max_value=INT64_MAX, help_text="Identification number of the plant")
    name = StrictCharField(max_length=PLANT_NAME_MAX_LENGTH, help_text="The name of the plant")
    tag = StrictCharField(
        max_length=PLANT_TAG_MAX_LENGTH, required=False, help_text="Tag that specifies the type of the plant"
    )

    @cached_property
    def fields(self):
        return shared_bound_fields(type(self))

    def to_internal_value(self, data):
        unknown = {
            key: ["Unknown field; a NewPlant has only id, name and tag."] for key in data if key not in self.fields
        }
        try:
            values = super().to_internal_value(data)
        except serializers.ValidationError as error:
            raise serializers.ValidationError({**error.detail, **unknown}) from None
        if unknown:
            raise serializers.ValidationError(unknown)
        return values


@functools.cache
def shared_bound_fields(serializer_class: type[serializers.Serializer]) -> dict:
    """The seam: the class's fields, bound by DRF once per class instead of once per instance.

    DRF's `Serializer.fields` deep-copies and binds every declared field for each instance, so that
    an instance may change its own; that was 15% of a create's CPU on the production path (BENCHMARKS.md, issue 25).
    Ours never change them, and validating only reads a field, so every instance and thread shares
    the fields DRF binds for one instance of the class (DRF's own `fields`, reached through
    `super()`). Its price: each field's `parent` is that instance, so no field may read the
    serializer's context; one that would is refused here, at start-up, rather than misbehaving.
    Pinned by tests/test_validation.py: shared fields validate exactly as DRF's own per-instance
    ones on every case, never change while validating (across threads), and the refusal.
    """
    bound = super(NewPlantSerializer, serializer_class()).fields
    for name, field in bound.items():
        reads_context = isinstance(field, serializers.BaseSerializer) or any(
            getattr(part, "requires_context", False) for part in [field.default, *field.validators]
        )
        if reads_context:
            raise ImproperlyConfigured(
                f"{serializer_class.__name__}.{name} reads the serializer's context, which fields shared by "
                "every instance cannot give it: make the serializer's fields per instance (drop its "
                "`fields` override) or drop what reads the context."
            )
    return bound


class PlantSerializer(NewPlantSerializer):
    """The stored plant: `{"id": 1, "name": "Monstera", "tag": "aroid"}`, `tag` only when it has one.

    The fields and their rules are NewPlant's: a plant is stored exactly as it was sent.
    """

    def to_representation(self, instance: Plant) -> dict:
        return plant_representation(instance)


def plant_representation(plant: Plant) -> dict:
    """A Plant body. The view calls this directly: building a serializer instance for a
    fixed three-field answer was a measurable share of each request (see BENCHMARKS.md)."""
    data = {"id": plant.id, "name": plant.name}
    if plant.tag is not None:
        data["tag"] = plant.tag
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
