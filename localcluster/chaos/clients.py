"""The chaos run's clients: each creates plants with ids of its own, as a careful client does.

A create whose outcome is ambiguous (no answer in time, the connection reset, a 503) is sent again
with the same body until it is answered otherwise or the run stops: the service answers an identical
re-create 200 (docs/api.md). A 429 is a refusal (nothing stored): the client moves on to its next id.
Every attempt goes into the run's history.
"""

import http.client
import json
import random
import threading
import time

from localcluster.chaos.history import History

# A client waits this long for an answer: past the 10 s every answer must come within (the checker
# finds an answer later than that, or none), so that a late answer is seen, not cut short.
CLIENT_TIMEOUT_S = 12
# Between two attempts of an ambiguous create.
RETRY_PAUSE_S = 0.2
TAGS = [None, "aroid", "fern", "succulent", "palm"]


class Client:
    """One client with a token of its own, creating plants `first_id`, the next, … through `url` (the
    front), `pause` seconds between its creates, naming `host` in each request."""

    def __init__(self, name: str, url: str, host: str, token: str, first_id: int, history: History, pause: float):
        self.name, self.token, self.history, self.pause = name, token, history, pause
        self.address, self.port = url.removeprefix("http://").split(":")
        self.host = host
        self.next_id = first_id
        self.random = random.Random(first_id)  # the bodies, drawn by each client of its own
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, name=f"chaos-client-{name}", daemon=True)

    def start(self) -> "Client":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()

    def join(self) -> None:
        self.thread.join(timeout=CLIENT_TIMEOUT_S + 5)

    def body(self) -> dict:
        plant_id, self.next_id = self.next_id, self.next_id + 1
        body = {"id": plant_id, "name": f"{self.name} plant {plant_id} {self.random.randrange(16**6):06x}"}
        if tag := self.random.choice(TAGS):
            body["tag"] = tag
        return body

    def run(self) -> None:
        while not self.stopped.is_set():
            body, attempt = self.body(), 1
            while self.create(body, attempt) in (None, 503) and not self.stopped.wait(RETRY_PAUSE_S):
                attempt += 1
            self.stopped.wait(self.pause)

    def create(self, body: dict, attempt: int) -> int | None:
        connection = http.client.HTTPConnection(self.address, int(self.port), timeout=CLIENT_TIMEOUT_S)
        headers = {"Host": self.host, "Content-Type": "application/json", "Authorization": f"Bearer {self.token}"}
        sent = time.time()
        status, answer, counted = None, None, False
        try:
            connection.request("POST", "/plants", json.dumps(body), headers)
            response = connection.getresponse()
            text = response.read().decode(errors="replace")
            status, counted = response.status, response.getheader("RateLimit") is not None
            answer = parsed(text)
        except (OSError, http.client.HTTPException) as error:
            answer = f"{type(error).__name__}: {error}"
        finally:
            connection.close()
        self.history.add(
            {
                "type": "request", "client": self.name, "id": body["id"], "body": body, "attempt": attempt,
                "sent": sent, "answered": time.time(), "status": status, "answer": answer, "counted": counted,
            }
        )  # fmt: skip
        return status


def parsed(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text
