"""A Debian host with systemd as PID 1 for the tests: scripts/systemd-host's image booted by podman,
reached over loopback alone, with the checkout under test as the repository its operator clones."""

import hashlib
import os
import pty
import re
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from deploy.processes import ROOT
from localcluster.processes import free_port
from tests.containers import CACHE, Podman

# docs/deploying.md's `<this repository>` on the host: a repository of the checkout under test as it
# is (its files tracked or new, committed in a repository of their own), mounted read-only there.
REPOSITORY = "/srv/plantstore"
# Where nginx listens on the host: .env.example's PLANTS_LISTEN (0.0.0.0:8000), published on
# 127.0.0.1 of this machine alone.
NGINX_PORT = 8000
# The host's containers and folders are named for the test process that made them, so that a run
# can remove those a killed run left behind.
PREFIX = "plantstore-host-"
# The host's pip installs from a wheelhouse of requirements.txt's pins and the docs' runner's (an
# operator's /etc/pip.conf: no index, these wheels), made once per Debian release and pins, the one
# time the host reaches PyPI; its older ones for that release are removed then.
WHEELS = CACHE / "systemd-host-wheels"
# What the wheelhouse holds: the service's pins, and those of the docs' runner (tests/operator_docs.py).
PINNED = ("requirements.txt", "tests/requirements-docs.txt")
BOOT_S = 120
# A terminal's control sequences: CSI (ESC [ ... letter) and OSC (ESC ] ... BEL or ESC \).
TERMINAL_CONTROLS = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


def checkout_repository(folder: Path) -> Path:
    """A git repository in `folder` holding the checkout's files as they are: what the host clones."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    files = b"\0".join(name for name in listed if name and (ROOT / os.fsdecode(name)).is_file())
    subprocess.run(
        ["tar", "--null", "-T", "-", "-c", "-f", str(folder / "checkout.tar")], cwd=ROOT, input=files, check=True
    )
    repository = folder / "plantstore"
    repository.mkdir()
    git = ["git", "-c", "user.name=tests", "-c", "user.email=tests@localhost", "-C", str(repository)]
    for command in (
        ["tar", "-x", "-f", str(folder / "checkout.tar"), "-C", str(repository)],
        [*git, "init", "-q", "-b", "main"],
        [*git, "add", "-A"],
        [*git, "commit", "-q", "-m", "The checkout under test"],
    ):
        subprocess.run(command, check=True, capture_output=True)
    return repository


def remove_left_behind(podman: Podman) -> None:
    """Remove the hosts, and their folders, of test processes that no longer run (a run killed before
    its teardown)."""
    names = podman("ps", "-a", "--format", "{{.Names}}", "--filter", f"name=^{PREFIX}").stdout.split()
    for name in names:
        if not running(name.removeprefix(PREFIX).split("-")[0]):
            podman("rm", "-f", "-t", "0", name, check=False)
    for folder in Path(tempfile.gettempdir()).glob(f"{PREFIX}*.*"):
        if not running(folder.name.removeprefix(PREFIX).split(".")[0]):
            shutil.rmtree(folder, ignore_errors=True)


def running(pid: str) -> bool:
    return not pid.isdigit() or Path(f"/proc/{pid}").exists()


class SystemdHost:
    """The host, booted with systemd as PID 1 (podman --systemd=always; --privileged, without which
    systemd may not make the mount namespaces of a unit's sandbox), its own network namespace: its
    nginx's port published on 127.0.0.1 of this machine alone, never the machine's ports."""

    def __init__(self, podman: Podman, image: str, work_dir: Path):
        self.podman, self.image = podman, image
        self.name = f"{PREFIX}{os.getpid()}-{os.urandom(3).hex()}"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.repository = checkout_repository(work_dir)
        self.failed_units: list[str] = []

    def boot(self) -> "SystemdHost":
        WHEELS.mkdir(parents=True, exist_ok=True)
        ca_bundle = (
            os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE") or "/etc/ssl/certs/ca-certificates.crt"
        )
        mounts = [f"{self.repository}:{REPOSITORY}:ro", f"{WHEELS}:/srv/wheels"]
        if Path(ca_bundle).is_file():  # this machine's authorities (an egress proxy's): for pip, never in the image
            mounts.append(f"{ca_bundle}:/etc/ssl/certs/ca-certificates.crt:ro")
        self.podman(
            "run",
            "-d",
            "--name",
            self.name,
            "--hostname",
            "plantstore-host",
            "--systemd=always",
            "--privileged",
            "-p",
            f"127.0.0.1:{self.port}:{NGINX_PORT}",
            *(f"--volume={mount}" for mount in mounts),
            self.image,
            "/sbin/init",
        )
        self.wait_booted()
        return self.use_wheelhouse()

    def use_wheelhouse(self) -> "SystemdHost":
        """pip on the host installs the PINNED requirements from WHEELS alone, downloaded there first if need be."""
        release = self.image.rpartition(":")[2].split("-")[0]  # the image's tag: SUITE-HASH
        requirements = " ".join(f"-r {REPOSITORY}/{name}" for name in PINNED)
        pins = hashlib.sha256(b"".join((self.repository / name).read_bytes() for name in PINNED)).hexdigest()[:12]
        wheels = f"{release}-{pins}"
        if not (WHEELS / wheels).is_dir():
            self.run(
                f"python3 -m venv /tmp/wheels && /tmp/wheels/bin/pip download -q -d /srv/wheels/{wheels}.{self.name}"
                f" {requirements} && rm -r /tmp/wheels"
            )
            try:
                (WHEELS / f"{wheels}.{self.name}").rename(WHEELS / wheels)  # whole or not at all
            except OSError:  # another run's came first
                shutil.rmtree(WHEELS / f"{wheels}.{self.name}")
            for older in WHEELS.glob(f"{release}-*"):
                if older.name != wheels and "." not in older.name:  # not one being filled
                    shutil.rmtree(older, ignore_errors=True)
        self.run("cat >/etc/pip.conf", input=f"[global]\nno-index = true\nfind-links = /srv/wheels/{wheels}\n")
        return self

    def wait_booted(self) -> "SystemdHost":
        """Wait until systemd has started every unit: `running`, or `degraded` (failed_units say which)."""
        deadline = time.monotonic() + BOOT_S
        while True:
            state = self.run("systemctl is-system-running --wait", check=False).stdout.strip()
            if state in ("running", "degraded"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the host did not boot: {state!r}\n{self.journal()[-3000:]}")
            time.sleep(0.2)  # its bus is not up yet
        self.failed_units = self.run("systemctl list-units --failed --plain --no-legend").stdout.split("\n")[:-1]
        return self

    def run(self, script: str, check: bool = True, input: str | None = None, timeout: float = 300):
        """`script` in bash as root on the host (set -e: the first command that fails ends it)."""
        done = subprocess.run(
            ["podman", "exec", "-i", self.name, "bash", "-e", "-o", "pipefail", "-c", script],
            env=self.podman.env,
            input=input or "",
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and done.returncode:
            raise RuntimeError(
                f"on the host: {script}\nexit {done.returncode}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
            )
        return done

    def converse(self, script: str, answers: dict[str, str], timeout: float = 60) -> str:
        """`script` on a terminal of the host (podman exec -t), answering each prompt that starts with a
        key of `answers` with its value: what the terminal showed, its control sequences left out."""
        controller, terminal = pty.openpty()
        command = ["podman", "exec", "-it", self.name, "bash", "-c", script]
        process = subprocess.Popen(command, env=self.podman.env, stdin=terminal, stdout=terminal, stderr=terminal)
        os.close(terminal)
        shown, answered_up_to, deadline = b"", 0, time.monotonic() + timeout
        try:
            while True:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{script}: not done after {timeout} s:\n{shown.decode(errors='replace')}")
                if select.select([controller], [], [], 0.2)[0]:
                    try:
                        shown += os.read(controller, 4096)
                    except OSError:  # the terminal closed: the command has exited
                        break
                last_line = shown[answered_up_to:].rsplit(b"\n", 1)[-1].decode(errors="replace")
                prompt = TERMINAL_CONTROLS.sub("", last_line)  # systemd 257's --pty titles the window
                answer = next((value for key, value in answers.items() if prompt.startswith(key)), None)
                if answer is not None and prompt.endswith(": "):
                    os.write(controller, f"{answer}\r".encode())
                    answered_up_to = len(shown)
            process.wait(timeout=10)
        finally:
            process.kill()
            os.close(controller)
        return TERMINAL_CONTROLS.sub("", shown.decode(errors="replace"))

    def journal(self, *options: str) -> str:
        return self.run(f"journalctl --no-pager {' '.join(options)}", check=False).stdout

    def restart(self) -> "SystemdHost":
        """The host restarts: systemd stops every unit, then boots again."""
        self.podman("restart", "-t", "120", self.name, timeout=300)
        return self.wait_booted()

    def remove(self) -> None:
        """Kill it at once; its files (the venvs, 6 s of removing) go in the background: a removal
        that fails leaves a container that the next run removes (remove_left_behind)."""
        self.podman("kill", self.name, check=False)
        command = ["podman", "rm", "-f", "-t", "0", self.name]
        subprocess.Popen(
            command, env=self.podman.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )


def systemd_host_image(podman: Podman) -> str:
    """scripts/systemd-host's image of this machine's Debian release, or of the suite SYSTEMD_HOST_SUITE
    names (trixie: Debian 13's systemd, nginx and Python), made once per store."""
    suite = [os.environ["SYSTEMD_HOST_SUITE"]] if os.environ.get("SYSTEMD_HOST_SUITE") else []
    done = subprocess.run(
        [ROOT / "scripts" / "systemd-host", *suite], env=podman.env, capture_output=True, text=True, timeout=1200
    )
    if done.returncode:
        raise RuntimeError(f"scripts/systemd-host failed:\n{done.stderr[-3000:]}")
    return done.stdout.strip()


def booted_host():
    """A generator for a fixture: the host booted, then removed, whatever happens."""
    podman = Podman(f"{PREFIX}{os.getpid()}")
    remove_left_behind(podman)
    image = systemd_host_image(podman)
    with tempfile.TemporaryDirectory(prefix=f"{PREFIX}{os.getpid()}.") as work_dir:
        host = SystemdHost(podman, image, Path(work_dir))
        try:
            yield host.boot()
        finally:
            host.remove()
