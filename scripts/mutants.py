"""`make mutants`: plant hand-made bugs in the service's rules and check that the fast loop catches each.

Each mutant is one small edit (a negated condition, a swapped comparison, a removed raise, a wrong
status or code) to a copy of the tracked tree; the tests `make check` runs (SQLite, no server
process) then run against that copy and must fail. Prints a line per mutant and the score; exits
non-zero if any mutant survived. The score is recorded in docs/development.md.
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (file, what the code says, the bug planted instead, what the bug is)
MUTANTS = [
    (
        "plants/authentication.py",
        "parts[0].lower() != self.keyword",
        "parts[0].lower() == self.keyword",
        "the scheme check negated",
    ),
    ("plants/authentication.py", "if len(parts) != 2:", "if len(parts) > 2:", "Bearer with no token let through"),
    (
        "plants/authentication.py",
        "        if token is None:\n",
        "        if token is None and False:\n",
        "unknown tokens not refused",
    ),
    (
        "plants/authentication.py",
        "if status != TokenStatus.ACTIVE:",
        "if status == TokenStatus.EXPIRED:",
        "revoked tokens accepted",
    ),
    (
        "plants/authentication.py",
        "if status != TokenStatus.ACTIVE:",
        "if status == TokenStatus.REVOKED:",
        "expired tokens accepted",
    ),
    (
        "plants/authentication.py",
        "now - token.last_used_at >= LAST_USED_RESOLUTION",
        "now - token.last_used_at < LAST_USED_RESOLUTION",
        "last use recorded on the wrong requests",
    ),
    (
        "plants/authentication.py",
        "raise MalformedCredentials() from None",
        "return None",
        "a non-ASCII token passed on to other authenticators",
    ),
    ("plants/models.py", "self.expires_at <= now", "self.expires_at >= now", "expiry compared the wrong way"),
    (
        "plants/models.py",
        "models.Q(expires_at__gt=now)",
        "models.Q(expires_at__lt=now)",
        "active() keeps expired tokens",
    ),
    ("plants/serializers.py", "if type(data) is not int:", "if not isinstance(data, int):", "booleans accepted as ids"),
    ("plants/serializers.py", "        if not data.strip():", "        if not data:", "white-space names accepted"),
    ("plants/serializers.py", "min_value=INT64_MIN,", "min_value=INT64_MIN - 1,", "ids below int64 accepted"),
    (
        "plants/serializers.py",
        "        if unknown:\n            raise",
        "        if False:\n            raise",
        "unknown fields dropped silently",
    ),
    (
        "plants/serializers.py",
        "        if not isinstance(data, str):",
        "        if isinstance(data, (list, dict)):",
        "numbers and null taken for strings",
    ),
    (
        "plants/services.py",
        "if (stored.name, stored.tag) == (name, tag):",
        "if stored.name == name:",
        "a retry with another tag taken for the same create",
    ),
    ("plants/services.py", "raise DuplicatePlantId(id) from None", "return stored", "duplicates answered 200"),
    (
        "plants/services.py",
        "return tokens.active().update(",
        "return tokens.update(",
        "revoking rewrites revoked_at of revoked tokens",
    ),
    (
        "plants/exception_handler.py",
        "isinstance(exc, (OperationalError, InterfaceError))",
        "isinstance(exc, InterfaceError)",
        "a database outage answered 500, not 503",
    ),
    (
        "plants/exception_handler.py",
        """response["WWW-Authenticate"] += f', error="{bearer_error}"'""",
        "pass",
        "no invalid_token in the challenge",
    ),
    (
        "plants/exceptions.py",
        "    error_code = ErrorCode.MALFORMED_CREDENTIALS",
        "    error_code = ErrorCode.INVALID_TOKEN",
        "wrong code for a malformed header",
    ),
    ("plants/exception_handler.py", "if exc.status_code >= 500", "if exc.status_code > 500", "503s coded as 400s"),
    (
        "plants/throttling.py",
        "return self.count <= self.policy.limit",
        "return self.count < self.policy.limit",
        "one request fewer than the quota",
    ),
    (
        "plants/throttling.py",
        "max(0, self.policy.limit - self.count)",
        "max(0, self.policy.limit - self.count + 1)",
        "RateLimit's remaining count off by one",
    ),
    (
        "plants/throttling.py",
        "if policy is None or not isinstance(request.auth, ApiToken):",
        "if policy is None or isinstance(request.auth, ApiToken):",
        "tokens never throttled",
    ),
    (
        "plants/throttling.py",
        "raise RateLimitStoreUnavailable() from None",
        "return RateLimitCount(policy, 0, reset=1)",
        "a lost store lets every request through",
    ),
    (
        "plants/rate_stores.py",
        'f"{count} = CASE WHEN {fresh} THEN 1 ELSE {table}.{count} + 1 END, "',
        'f"{count} = CASE WHEN {fresh} THEN {table}.{count} + 1 ELSE 1 END, "',
        "a new window keeps the old count",
    ),
    (
        "plants/negotiation.py",
        "    return best_weight > 0",
        "    return best_weight >= 0",
        "Accept: application/json;q=0 taken as accepting JSON",
    ),
    ("plants/negotiation.py", "if rank > best_rank and", "if rank < best_rank and", "a less specific range decides"),
    ("plants/parsers.py", "if len(raw) > limit:", "if len(raw) > limit + 1:", "bodies one byte over the cap read"),
    (
        "plants/parsers.py",
        "if not isinstance(data, dict):",
        "if isinstance(data, list):",
        "JSON scalars taken for objects",
    ),
    ("plants/parsers.py", "    if len(result) != len(pairs):", "    if False:", "duplicate keys silently last-wins"),
    (
        "plants/parsers.py",
        "duplicate = next(key for key, _ in pairs if key in seen or seen.add(key))",
        "duplicate = pairs[0][0]",
        "the refusal names the object's first key, not the duplicate",
    ),
    (
        "plants/parsers.py",
        "nesting_depth(text) > MAX_DEPTH:",
        "nesting_depth(text) > MAX_DEPTH * 40:",
        "deep nesting reaches json's recursive decoder",
    ),
    (
        "plants/parsers.py",
        "    for char in JSON_STRING.sub('\"\"', text):",
        "    for char in text:",
        "brackets inside strings counted as nesting",
    ),
    ("plants/parsers.py", "parse_constant=_reject_constant", "parse_constant=float", "NaN and Infinity accepted"),
    ("plants/views.py", "status=status.HTTP_200_OK", "status=status.HTTP_201_CREATED", "201, not the contract's 200"),
    (
        "plants/views.py",
        "    if request.stream is None:\n",
        "    if request.stream is None and False:\n",
        "an empty body reaches the serializer",
    ),
    (
        "plants/middleware.py",
        "incoming and SAFE_REQUEST_ID.fullmatch(incoming)",
        "incoming and SAFE_REQUEST_ID.match(incoming)",
        "request ids with newlines echoed",
    ),
    (
        "plants/exception_handler.py",
        "        return DatabaseUnavailable()",
        "        return exc",
        "a database that refuses writes answered 500, not 503",
    ),
    (
        "plants/exception_handler.py",
        'getattr(exc.__cause__, "sqlstate", None) == READ_ONLY_SQLSTATE',
        'getattr(exc.__cause__, "sqlstate", None) != READ_ONLY_SQLSTATE',
        "a read-only server's refusal (the failover window) not told apart",
    ),
    (
        "plants/exception_handler.py",
        '            logger.error("database error", exc_info=exc)',
        "            pass",
        "a database error that is no outage answered without a log line",
    ),
    (
        "plants/exception_handler.py",
        "        refused.error_code = exc.error_code",
        "        pass",
        "an application error answered with the generic code",
    ),
    (
        "plants/exceptions.py",
        '    body = {"error": int(code), "message": message}',
        '    body = {"error": int(code)}',
        "Error bodies without their message",
    ),
    (
        "plants/exceptions.py",
        "    status_code = status.HTTP_400_BAD_REQUEST\n    error_code = ErrorCode.BAD_REQUEST",
        "    status_code = status.HTTP_409_CONFLICT\n    error_code = ErrorCode.BAD_REQUEST",
        "a duplicate id answered 409, not the contract's 400",
    ),
    ("plants/views.py", '"Forbidden.", 403)', '"Forbidden.", 400)', "Django's 403 answered as 400"),
    (
        "plants/services.py",
        "        if stored is None:\n            raise",
        "        if stored is None:\n            return Plant(id=id, name=name, tag=tag)",
        "a conflict whose row is gone answered 200 with a plant never stored",
    ),
    (
        "plants/authentication.py",
        "        return TokenClient(token), token",
        "        return None",
        "the token check removed: requests with a valid token refused as anonymous",
    ),
]

# What make check runs: every test that starts no server process.
PYTEST = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not live"]


def tracked_copy() -> Path:
    copy = Path(tempfile.mkdtemp(prefix="plantstore-mutants."))
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    for name in filter(None, files.decode().split("\0")):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, copy / name)
    return copy


def main() -> int:
    copy = tracked_copy()
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    survivors = []
    try:
        if subprocess.run(PYTEST, cwd=copy, env=env, capture_output=True).returncode != 0:
            print("mutants: the suite fails without any mutant; fix that first")
            return 2
        for number, (name, original, mutated, bug) in enumerate(MUTANTS, 1):
            path = copy / name
            source = path.read_text()
            if source.count(original) != 1:
                print(f"mutants: {name} no longer says {original!r} exactly once; update the mutant")
                return 2
            path.write_text(source.replace(original, mutated))
            try:
                caught = subprocess.run(PYTEST, cwd=copy, env=env, capture_output=True).returncode != 0
            finally:
                path.write_text(source)
            print(f"{number:2} {'caught  ' if caught else 'SURVIVED'} {name}: {bug}", flush=True)
            if not caught:
                survivors.append(bug)
    finally:
        shutil.rmtree(copy)
    caught = len(MUTANTS) - len(survivors)
    print(f"mutation score: {caught}/{len(MUTANTS)} caught ({100 * caught / len(MUTANTS):.0f}%)")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
