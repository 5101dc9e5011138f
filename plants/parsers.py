"""The request body parser: strict JSON objects, UTF-8, bounded in size and depth, no duplicate keys."""

import json
import re

from django.conf import settings
from rest_framework.parsers import BaseParser

from plants.exceptions import BodyTooLarge, MalformedBody

# A NewPlant is flat; anything nested deeper than this is not one, and must not reach json's
# recursive decoder (about 1000 levels, which fit in 4 KiB, raise RecursionError).
MAX_DEPTH = 32
JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)


class DuplicateKey(ValueError):
    pass


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _object_without_duplicates(pairs: list) -> dict:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen = set()
        duplicate = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise DuplicateKey(duplicate)
    return result


def nesting_depth(text: str) -> int:
    """How deeply arrays and objects nest in `text`, brackets inside strings not counted."""
    depth = deepest = 0
    for char in JSON_STRING.sub('""', text):
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


class PlantJSONParser(BaseParser):
    """Parses `application/json` bodies into a dict; anything else is MALFORMED_BODY.

    The size cap (PLANTS_MAX_BODY_BYTES) is checked against Content-Length before reading,
    and again while reading, so a large body is never held in memory.
    """

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None) -> dict:
        limit = settings.PLANTS_MAX_BODY_BYTES
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        if declared and declared.isdigit() and int(declared) > limit:
            raise BodyTooLarge(limit)
        raw = stream.read(limit + 1)
        if len(raw) > limit:
            raise BodyTooLarge(limit)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedBody("The body is not valid UTF-8.") from None
        # Counting brackets is cheap; only a body with many of them is scanned for its depth.
        if text.count("[") + text.count("{") > MAX_DEPTH and nesting_depth(text) > MAX_DEPTH:
            raise MalformedBody(f"The body nests arrays or objects more than {MAX_DEPTH} deep.")
        try:
            data = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_object_without_duplicates)
        except DuplicateKey as error:
            raise MalformedBody(f"The body has the key {json.dumps(error.args[0])} more than once.") from None
        except (ValueError, RecursionError) as error:
            raise MalformedBody(f"The body is not valid JSON: {error}.") from None
        if not isinstance(data, dict):
            raise MalformedBody("The body must be a JSON object (a NewPlant).")
        return data
