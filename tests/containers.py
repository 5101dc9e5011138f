"""Podman for the tests, offline: its configuration and image store in a cache folder of the
tests' own (never the machine's global files), the image built by `make image`'s script on a
Debian base made from Debian's packages (scripts/debian-base), and every container, volume and
image of one run named after its project, and removed at the end."""

import json
import os
import subprocess
from pathlib import Path

from deploy.processes import ROOT

# Kept between runs: the Debian base (made once per suite) and the build's layers, so that a run
# whose Dockerfile and requirements did not change rebuilds only the app's layers. Layers left
# untagged and over a week old are removed (a build that still uses one makes it again).
LAYERS_KEPT_FOR = "168h"
CACHE = Path("/var/tmp/plantstore-containers/tests")
STORAGE_CONF = """\
[storage]
driver = "overlay"
graphroot = "{cache}/storage"
runroot = "{cache}/run"
"""


class Podman:
    def __init__(self, project: str):
        self.project = project
        CACHE.mkdir(parents=True, exist_ok=True)
        storage = CACHE / "storage.conf"
        storage.write_text(STORAGE_CONF.format(cache=CACHE))
        containers = subprocess.run(
            [ROOT / "scripts" / "containers-conf", str(CACHE)], check=True, capture_output=True, text=True
        ).stdout.strip()
        self.env = {
            **os.environ,
            "CONTAINER_ENGINE": "podman",
            "CONTAINERS_CONF": containers,
            "CONTAINERS_STORAGE_CONF": str(storage),
        }

    def __call__(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        done = subprocess.run(["podman", *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode:
            raise RuntimeError(f"podman {' '.join(args)}: {done.returncode}\n{done.stderr[-3000:]}")
        return done

    def build(self) -> str:
        """`make image`'s script on the local Debian base: the image's name."""
        self.base = subprocess.run(
            [ROOT / "scripts" / "debian-base"], env=self.env, check=True, capture_output=True, text=True
        ).stdout.strip()
        image = f"localhost/{self.project}:latest"
        done = subprocess.run(
            [ROOT / "scripts" / "image"],
            env={**self.env, "BASE": self.base, "IMAGE": image},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode:
            raise RuntimeError(f"scripts/image failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return image

    def inspect(self, name: str, what: str = "container") -> dict:
        return json.loads(self(what, "inspect", name).stdout)[0]

    def compose(self, *args: str, env: dict, timeout: float = 900) -> subprocess.CompletedProcess:
        """podman-compose on compose.yaml, its project named after this one's."""
        command = ["podman-compose", "-p", f"{self.project}-compose", "-f", str(ROOT / "compose.yaml"), *args]
        done = subprocess.run(command, env={**self.env, **env}, capture_output=True, text=True, timeout=timeout)
        if done.returncode:
            raise RuntimeError(
                f"podman-compose {' '.join(args)}: {done.returncode}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
            )
        return done

    def clean(self) -> None:
        """Every container, volume, network and image name of this project, and untagged layers over a week old."""
        names = self("ps", "-a", "--format", "{{.Names}}", "--filter", f"name=^{self.project}").stdout.split()
        if names:
            self("rm", "-f", "-v", "-t", "0", *names, check=False)
        volumes = self("volume", "ls", "--format", "{{.Name}}", "--filter", f"name=^{self.project}").stdout.split()
        if volumes:
            self("volume", "rm", "-f", *volumes, check=False)
        networks = self("network", "ls", "--format", "{{.Name}}", "--filter", f"name=^{self.project}").stdout.split()
        if networks:
            self("network", "rm", "-f", *networks, check=False)
        # Untagged, not removed: removing an image removes its layers, the next run's build cache.
        for image in (f"localhost/{self.project}:latest", f"localhost/{self.project}-infra:latest"):
            self("untag", image, image, check=False)
        self("image", "prune", "-f", "--filter", f"until={LAYERS_KEPT_FOR}", check=False)
