"""The django-ninja peer's API: a pydantic schema, HttpBearer authentication by digest, one operation."""

from django.db import IntegrityError
from ninja import Field, NinjaAPI, Schema
from ninja.security import HttpBearer

from bench.peers.tables.models import ApiToken, Plant, token_digest


class BearerToken(HttpBearer):
    """`Authorization: Bearer plnt_…`: the token row is read by its digest on every request."""

    def authenticate(self, request, token: str):
        try:
            api_token = ApiToken.objects.active().get(digest=token_digest(token.encode()))
        except ApiToken.DoesNotExist:
            return None  # ninja answers 401
        api_token.touch()
        return api_token


class PlantIn(Schema):
    id: int = Field(ge=-(2**63), le=2**63 - 1)
    name: str = Field(min_length=1, max_length=200)
    tag: str | None = Field(None, min_length=1, max_length=100)


class PlantOut(Schema):
    id: int
    name: str
    tag: str | None


api = NinjaAPI(auth=BearerToken(), docs_url=None)


@api.exception_handler(IntegrityError)
def duplicate_id(request, exc):
    return api.create_response(request, {"detail": "A plant with this id already exists."}, status=400)


@api.post("/plants", response=PlantOut)
def create_plant(request, payload: PlantIn):
    return Plant.objects.create(**payload.dict())
