"""The FastAPI peer of `make bench`: POST /plants as a FastAPI team would write it. Never deployed.

FastAPI, strict pydantic v2 and asyncpg, on the service's own tables: the bearer token is looked
up by its SHA-256 digest in plants_apitoken on every request (revoked and expired tokens refused,
last_used_at written at most once a minute, as the service does), then one INSERT into
plants_plant. 200 answers a Plant; bad input a 400 Error body, a missing or bad token a 401 one.
With PEER_EQUAL_WORK=1 (the equal-work variant) it also does what the service does besides: a
dependency counts each request against a per-token limit, one atomic upsert in the service's UNLOGGED
plants_ratelimitcounter, and a middleware writes one JSON log line per request through Python's
logging (uvicorn's access log off, as the service's app server's is).
Run: `uvicorn bench.peers.fastapi_app:app --workers 2` with DATABASE_URL set (bench/run.py does).
"""

import hashlib
import logging
import os
import re
import time
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Annotated

import asyncpg
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from bench.peers.json_log import REQUEST_LOGGER, JsonFormatter

EQUAL_WORK = os.environ.get("PEER_EQUAL_WORK", "") == "1"

MAX_BODY_BYTES = 4096
LAST_USED_RESOLUTION = timedelta(minutes=1)
SELECT_TOKEN = "SELECT id, name, expires_at, revoked_at, last_used_at FROM plants_apitoken WHERE digest = $1"
TOUCH_TOKEN = (
    "UPDATE plants_apitoken SET last_used_at = $2 WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < $3)"
)
INSERT_PLANT = "INSERT INTO plants_plant (id, name, tag, created_at) VALUES ($1, $2, $3, $4)"
# The equal-work variant's rate limit: never reached (the bench measures the count, not a refusal),
# in a day's window so a bench run's requests add up in one row (bench/peers/rate_limit.py: the same).
RATE_LIMIT, RATE_WINDOW_S = 1_000_000_000, 86_400
COUNT_REQUEST = (
    "INSERT INTO plants_ratelimitcounter (key, window_start, count) VALUES ($1, $2, 1) ON CONFLICT (key) "
    "DO UPDATE SET count = CASE WHEN plants_ratelimitcounter.window_start = excluded.window_start "
    "THEN plants_ratelimitcounter.count + 1 ELSE 1 END, window_start = excluded.window_start RETURNING count"
)
SAFE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")

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
    request_log = logging.getLogger(REQUEST_LOGGER)
    request_log.setLevel(logging.INFO)
    request_log.propagate = False
    handler = logging.StreamHandler()  # stderr, where uvicorn's own log goes
    handler.setFormatter(JsonFormatter())
    request_log.addHandler(handler)

    @app.middleware("http")
    async def log_request(request: Request, call_next):
        """One JSON line per request: `{"method", "path", "status", "duration_ms", "token", "request_id"}`."""
        started = time.perf_counter()
        incoming = request.headers.get("x-request-id", "")
        request_id = incoming if SAFE_REQUEST_ID.fullmatch(incoming) else os.urandom(16).hex()
        response = await call_next(request)
        response.headers["X-Request-ID"] = request_id
        fields = {
            "method": request.method,
            "path": request.url.path,
            "status": response.status_code,
            "duration_ms": round((time.perf_counter() - started) * 1000, 2),
            "token": getattr(request.state, "token_name", None),
            "request_id": request_id,
        }
        request_log.info("request", extra={"fields": fields})
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
    """At most RATE_LIMIT requests per token per fixed window, each counted by one atomic upsert."""
    now = int(time.time())
    count = await connection.fetchval(COUNT_REQUEST, f"fastapi:{token['id']}", now // RATE_WINDOW_S * RATE_WINDOW_S)
    if count > RATE_LIMIT:
        raise ApiError(429, 42900, "Too many requests for this token.")


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


@app.post(
    "/plants",
    response_model=Plant,
    response_model_exclude_none=True,
    dependencies=[Depends(rate_limit)] if EQUAL_WORK else [],
)
async def create_plant(
    connection: Connection,
    token: Token,
    plant: Annotated[NewPlant, Depends(new_plant)],
) -> Plant:
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


@app.get("/healthz")
async def health() -> dict:
    async with app.state.pool.acquire() as connection:
        await connection.fetchval("SELECT 1")
    return {"status": "ok"}
