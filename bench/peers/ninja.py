"""The django-ninja peer of `make bench`: POST /plants as django-ninja's tutorial writes it. Never deployed.

A pydantic schema, HttpBearer authentication by digest, one operation; with PEER_EQUAL_WORK=1, a throttle
counting each request per token."""

from django.conf import settings
from django.db import IntegrityError
from django.urls import path
from ninja import Field, NinjaAPI, Schema
from ninja.security import HttpBearer
from ninja.throttling import BaseThrottle

from bench.peers.equal_work import count_request, seconds_to_next_window
from bench.peers.shared import LIMIT
from bench.peers.tables.models import ApiToken, Plant


class BearerToken(HttpBearer):
    """`Authorization: Bearer plnt_…`: the token row is read by its digest on every request."""

    def authenticate(self, request, token: str):
        return ApiToken.objects.authenticate(token.encode())  # None: ninja answers 401


class TokenRateThrottle(BaseThrottle):
    """At most LIMIT requests per token per fixed window; ninja throttles after authentication (request.auth).
    One instance serves every request, on every thread: it keeps no state of a request."""

    def allow_request(self, request) -> bool:
        return count_request(f"ninja:{request.auth.pk}") <= LIMIT

    def wait(self) -> float:
        return seconds_to_next_window()


class PlantIn(Schema):
    id: int = Field(ge=-(2**63), le=2**63 - 1)
    name: str = Field(min_length=1, max_length=200)
    tag: str | None = Field(None, min_length=1, max_length=100)


class PlantOut(Schema):
    id: int
    name: str
    tag: str | None


api = NinjaAPI(auth=BearerToken(), docs_url=None, throttle=[TokenRateThrottle()] if settings.PEER_EQUAL_WORK else [])


@api.exception_handler(IntegrityError)
def duplicate_id(request, exc):
    return api.create_response(request, {"detail": "A plant with this id already exists."}, status=400)


@api.post("/plants", response=PlantOut)
def create_plant(request, payload: PlantIn):
    return Plant.objects.create(**payload.dict())


urlpatterns = [path("", api.urls)]
