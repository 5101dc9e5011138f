"""The FastAPI peer of `make bench`: POST /plants as a FastAPI team would write it. Never deployed.

FastAPI, strict pydantic v2 and asyncpg on the service's tables: the token read by its SHA-256 digest on
every request (revoked and expired refused, last_used_at written at most once a minute, as the service
does), then one INSERT; 200 answers a Plant, bad input a 400 Error body, a bad token a 401 one. With
PEER_EQUAL_WORK=1, a dependency counts each request and a middleware logs it (bench/peers/shared.py).
One asyncpg pool per worker, as its users run it: a released connection is reset (one round trip).
"""

import hashlib
import logging
import os
import time
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Annotated

import asyncpg
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from bench.peers import shared

EQUAL_WORK = os.environ.get("PEER_EQUAL_WORK", "") == "1"

MAX_BODY_BYTES = 4096
LAST_USED_RESOLUTION = timedelta(minutes=1)
SELECT_TOKEN = "SELECT id, name, expires_at, revoked_at, last_used_at FROM plants_apitoken WHERE digest = $1"
TOUCH_TOKEN = (
    "UPDATE plants_apitoken SET last_used_at = $2 WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < $3)"
)
COUNT_REQUEST = shared.COUNT_REQUEST.format(key="$1", window="$2")
INSERT_PLANT = "INSERT INTO plants_plant (id, name, tag, created_at) VALUES ($1, $2, $3, $4)"
Name = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"\S")]
Tag = Annotated[str, StringConstraints(min_length=1, max_length=100, pattern=r"\S")]


class NewPlant(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    id: Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
    name: Name
    tag: Tag | None = None


class Plant(BaseModel):
    id: int
    name: str
    tag: str | None = None


class ApiError(Exception):
    def __init__(self, status: int, code: int, message: str):
        self.status, self.code, self.message = status, code, message


@asynccontextmanager
async def lifespan(app: FastAPI):
    app.state.pool = await asyncpg.create_pool(os.environ["DATABASE_URL"], min_size=4, max_size=8)
    yield
    await app.state.pool.close()


app = FastAPI(lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None)


if EQUAL_WORK:
    handler = logging.StreamHandler()  # stderr, where the app server's own log goes
    handler.setFormatter(shared.JsonFormatter())
    request_log = logging.getLogger(shared.REQUEST_LOGGER)
    request_log.addHandler(handler)
    request_log.setLevel(logging.INFO)
    request_log.propagate = False

    @app.middleware("http")
    async def log_each_request(request: Request, call_next):
        started, answer_id = time.perf_counter(), shared.request_id(request.headers.get("x-request-id", ""))
        response = await call_next(request)
        response.headers["X-Request-ID"] = answer_id
        token = getattr(request.state, "token_name", None)
        shared.log_request(request.method, request.url.path, response.status_code, started, token, answer_id)
        return response


@app.exception_handler(ApiError)
async def api_error(request: Request, exc: ApiError) -> JSONResponse:
    headers = {"WWW-Authenticate": 'Bearer realm="plants"'} if exc.status == 401 else None
    return JSONResponse({"error": exc.code, "message": exc.message}, status_code=exc.status, headers=headers)


@app.exception_handler(RequestValidationError)
async def invalid_body(request: Request, exc: RequestValidationError) -> JSONResponse:
    fields: dict[str, list[str]] = {}
    for error in exc.errors():
        fields.setdefault(".".join(str(part) for part in error["loc"][1:]) or "body", []).append(error["msg"])
    summary = "; ".join(f"{name}: {' '.join(messages)}" for name, messages in fields.items())
    body = {"error": 40002, "message": f"Invalid request body. {summary}", "fields": fields}
    return JSONResponse(body, status_code=400)


async def database(request: Request):
    """One pooled connection per request, shared by the token lookup and the INSERT."""
    async with request.app.state.pool.acquire() as connection:
        yield connection


Connection = Annotated[asyncpg.Connection, Depends(database)]


async def bearer_token(request: Request, connection: Connection) -> asyncpg.Record:
    scheme, _, secret = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        raise ApiError(401, 40100, "Authentication credentials were not provided.")
    if not secret or " " in secret or len(secret) > 128:
        raise ApiError(401, 40102, "The Authorization header must be 'Bearer <token>', with exactly one token.")
    token = await connection.fetchrow(SELECT_TOKEN, hashlib.sha256(secret.encode()).hexdigest())
    now = datetime.now(UTC)
    if token is None:
        raise ApiError(401, 40101, "The token is not valid.")
    if token["revoked_at"] is not None:
        raise ApiError(401, 40101, "The token has been revoked.")
    if token["expires_at"] is not None and token["expires_at"] <= now:
        raise ApiError(401, 40101, "The token has expired.")
    if token["last_used_at"] is None or now - token["last_used_at"] >= LAST_USED_RESOLUTION:
        await connection.execute(TOUCH_TOKEN, token["id"], now, now - LAST_USED_RESOLUTION)
    request.state.token_name = token["name"]  # for the request log
    return token


Token = Annotated[asyncpg.Record, Depends(bearer_token)]


async def rate_limit(connection: Connection, token: Token) -> None:
    """At most LIMIT requests per token per fixed window, each counted by one atomic upsert."""
    count = await connection.fetchval(COUNT_REQUEST, f"fastapi:{token['id']}", shared.window_start())
    if count > shared.LIMIT:
        raise ApiError(429, 42900, "Too many requests for this token.")


EQUAL_WORK_DEPENDENCIES = [Depends(rate_limit)] if EQUAL_WORK else []


async def new_plant(request: Request) -> NewPlant:
    if request.headers.get("content-type", "").partition(";")[0].strip().lower() != "application/json":
        raise ApiError(415, 41500, "The body is not sent as application/json.")
    body = await request.body()
    if len(body) > MAX_BODY_BYTES:
        raise ApiError(413, 41300, f"The body is larger than {MAX_BODY_BYTES} bytes.")
    try:
        return NewPlant.model_validate_json(body)
    except ValueError as error:
        if not hasattr(error, "errors") or any(e["type"] == "json_invalid" for e in error.errors()):
            raise ApiError(400, 40001, "The body is not valid JSON.") from None
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in error.errors()]) from None


@app.post("/plants", response_model=Plant, response_model_exclude_none=True, dependencies=EQUAL_WORK_DEPENDENCIES)
async def create_plant(connection: Connection, token: Token, plant: Annotated[NewPlant, Depends(new_plant)]) -> Plant:
    try:
        await connection.execute(INSERT_PLANT, plant.id, plant.name, plant.tag, datetime.now(UTC))
    except asyncpg.UniqueViolationError:
        stored = await connection.fetchrow("SELECT name, tag FROM plants_plant WHERE id = $1", plant.id)
        if stored is None or (stored["name"], stored["tag"]) != (plant.name, plant.tag):
            raise ApiError(400, 40003, f"A plant with id {plant.id} already exists.") from None
    return Plant(id=plant.id, name=plant.name, tag=plant.tag)


@app.get("/livez")  # a unit is ready once it answers (deploy/unit.py)
async def live() -> dict:
    return {"status": "ok"}
