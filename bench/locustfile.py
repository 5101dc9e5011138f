"""Locust's load for make bench's latency at a fixed offered load (bench/run.py: fixed_rate_latency).

Open loop in effect: BENCH_USERS users each send one create every BENCH_INTERVAL_S seconds on their
own schedule (constant_pacing), so the offered rate is the same for every target and does not slow
down when a server does (as long as an answer takes less than the interval, far above every p99
here). Each create has a new id (from BENCH_ID_BASE) and the real token (BENCH_TOKEN); the public host
name (BENCH_HOST) is sent as Host.
"""

import itertools
import os

from locust import constant_pacing, task
from locust.contrib.fasthttp import FastHttpUser

IDS = itertools.count(int(os.environ["BENCH_ID_BASE"]) + 1)
HEADERS = {
    "Authorization": f"Bearer {os.environ['BENCH_TOKEN']}",
    "Content-Type": "application/json",
    "Host": os.environ["BENCH_HOST"],
}


class Client(FastHttpUser):
    wait_time = constant_pacing(float(os.environ["BENCH_INTERVAL_S"]))

    @task
    def create(self) -> None:
        plant_id = next(IDS)
        body = f'{{"id": {plant_id}, "name": "Plant {plant_id}", "tag": "bench"}}'
        self.client.post(os.environ["BENCH_PATH"], data=body, headers=HEADERS, name="create")
