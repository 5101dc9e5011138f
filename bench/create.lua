-- wrk script: POST /plants (or the bare view) with a unique id per request and a real token.
-- Environment: BENCH_TOKEN (the bearer token), BENCH_ID_BASE (ids of this round start above it),
-- BENCH_HOST (the public host name the servers allow, sent as Host).
-- Lua's numbers are doubles, exact only up to 2^53: bench/run.py keeps every id far below that,
-- or neighbouring ids would round to the same value and collide.
-- Prints one JSON line with the round's figures when done.
local counter = 0
local threads = {}
local token = os.getenv("BENCH_TOKEN")
local id_base = tonumber(os.getenv("BENCH_ID_BASE") or "0")
local host = os.getenv("BENCH_HOST")

function setup(thread)
  thread:set("thread_index", #threads)
  table.insert(threads, thread)
end

function init(args)
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Authorization"] = "Bearer " .. token
  if host then wrk.headers["Host"] = host end
end

function request()
  counter = counter + 1
  local id = id_base + thread_index * 1000000000 + counter
  return wrk.format(nil, nil, nil, string.format('{"id": %d, "name": "Plant %d", "tag": "bench"}', id, id))
end

function done(summary, latency, requests)
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "non_2xx": %d, "socket_errors": %d, "p50_us": %d, "p99_us": %d}\n',
    summary.requests, summary.duration, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50), latency:percentile(99)))
end
