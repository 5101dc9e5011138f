// k6 script of make bench's latency at a fixed offered load (bench/open_loop.py): POST /plants (or the bare
// view) at a constant arrival rate, whatever the answers do: each request starts at its scheduled time on a
// free virtual user (no coordinated omission), or is dropped and counted (dropped_iterations: saturation).
// Environment (k6's -e): BENCH_URL, BENCH_TOKEN, BENCH_HOST (sent as Host), BENCH_ID_BASE (ids start above
// it), BENCH_RATE (per second), BENCH_SECONDS, BENCH_VUS (all allocated before the start), BENCH_SUMMARY.
import http from "k6/http";
import exec from "k6/execution";
import { Counter } from "k6/metrics";

const seconds = Number(__ENV.BENCH_SECONDS);
const idBase = Number(__ENV.BENCH_ID_BASE);
const params = {
  headers: {
    Authorization: `Bearer ${__ENV.BENCH_TOKEN}`,
    "Content-Type": "application/json",
    Host: __ENV.BENCH_HOST,
  },
  responseType: "none", // only the status is read
  timeout: "60s", // the unit's own limit (nginx answers 503 after 30 s): never cut short here
};

// Requests answered before the offered window ended: the rate achieved is these over BENCH_SECONDS.
const answeredInWindow = new Counter("answered_in_window");

export const options = {
  scenarios: {
    open_loop: {
      executor: "constant-arrival-rate",
      rate: Number(__ENV.BENCH_RATE),
      timeUnit: "1s",
      duration: `${seconds}s`,
      preAllocatedVUs: Number(__ENV.BENCH_VUS),
      maxVUs: Number(__ENV.BENCH_VUS),
      gracefulStop: "60s",
    },
  },
  summaryTrendStats: ["min", "med", "p(90)", "p(99)", "p(99.9)", "max", "avg"],
  discardResponseBodies: true,
};

// The latency reported is k6's iteration_duration: each iteration begins at its scheduled time (or is
// dropped) and does nothing but the request, so it runs from the schedule to the answer, a new
// connection's setup included (http_req_duration leaves that out).
export default function () {
  // iterationInTest counts from 0 across every user of the test: each request its own new plant.
  const id = idBase + exec.scenario.iterationInTest + 1;
  const body = `{"id": ${id}, "name": "Plant ${id}", "tag": "bench"}`;
  http.post(__ENV.BENCH_URL, body, params);
  if (Date.now() <= exec.scenario.startTime + seconds * 1000) {
    answeredInWindow.add(1);
  }
}

export function handleSummary(data) {
  return { [__ENV.BENCH_SUMMARY]: JSON.stringify(data) };
}
