"""The FastAPI peer of `make bench`: POST /plants as a FastAPI team would write it. Never deployed.

FastAPI, strict pydantic v2 and asyncpg, on the service's own tables: the bearer token is looked
up by its SHA-256 digest in plants_apitoken on every request (revoked and expired tokens refused,
last_used_at written at most once a minute, as the service does), then one INSERT into
plants_plant. 200 answers a Plant; bad input a 400 Error body, a missing or bad token a 401 one.
Run: `uvicorn bench.peers.fastapi_app:app --workers 2` with DATABASE_URL set (bench/run.py does).
"""

import hashlib
import os
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Annotated

import asyncpg
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

MAX_BODY_BYTES = 4096
LAST_USED_RESOLUTION = timedelta(minutes=1)
SELECT_TOKEN = "SELECT id, name, expires_at, revoked_at, last_used_at FROM plants_apitoken WHERE digest = $1"
TOUCH_TOKEN = (
    "UPDATE plants_apitoken SET last_used_at = $2 WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < $3)"
)
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
    return token


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


@app.post("/plants", response_model=Plant, response_model_exclude_none=True)
async def create_plant(
    connection: Connection,
    token: Annotated[asyncpg.Record, Depends(bearer_token)],
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
