"""deploy/plantstore-release on a host with systemd as PID 1 (tests/systemd_host.py), the service
installed as docs/deploying.md says: a release is a state, not a path. A release that fails, one
stopped or killed at each of its steps, a crash, a restart of the serving slot and of the host each
leave one release serving, the one the host can name, and the next release succeeds around load. A
release also applies a changed settings file (nginx's listener, Redis, the workers, OpenTelemetry)."""

import json
import secrets
import threading
import time

import pytest

from deploy.processes import wait_until
from tests.installed_unit import ENV_FILE, REFUSED_KEY, RELEASE, Deployed
from tests.live import PUBLIC_HOST, request

# One host per module, as tests/test_systemd_host.py's, beside which it runs (another process).
pytestmark = [pytest.mark.live, pytest.mark.container]


def test_a_failed_release_leaves_what_served_before_through_a_crash_and_a_restart_of_the_serving_slot(deployed):
    """Three broken releases, under load: one whose code raises (its slot never answers), one whose
    nginx config nginx refuses, one whose settings the app refuses. deploy/plantstore-release exits 1
    naming the journal that says why, which does; the running slot serves on, every request answered.
    Then, the settings file still refused and /opt/plantstore pointed at the release that cannot
    start (as by hand): the serving slot killed (systemd starts it again), then restarted, each time
    from the release and the settings it was released with; then the good release, released again,
    serves."""
    good = deployed.host.run("readlink -f /opt/plantstore").stdout.strip()
    cannot_start, refused_config = "/opt/plantstore-releases/cannot-start", "/opt/plantstore-releases/refused-config"
    deployed.host.run(
        f"cp -a {good} {cannot_start} && echo 'raise RuntimeError(\"this release cannot start\")' "
        f">>{cannot_start}/plantstore_site/settings.py"
        f" && cp -a {good} {refused_config} && sed -i 's/^worker_processes 1;/worker_processes 1; no_such_directive;/'"
        f" {refused_config}/deploy/nginx.conf"
    )
    key = deployed.app_environment("DJANGO_SECRET_KEY")
    serving, workers, since = deployed.slot(), deployed.app_workers(), deployed.now()
    try:
        with deployed.load(deployed.token, first_id=20_000, clients=2, limit=2000, timeout=60) as load:
            load.wait_for(20)
            failed = [
                deployed.host.run(f"{release}/deploy/plantstore-release", check=False).stderr
                for release in (cannot_start, refused_config)
            ]
            deployed.configure(DJANGO_SECRET_KEY=REFUSED_KEY)
            failed.append(deployed.host.run(f"{good}/deploy/plantstore-release", check=False).stderr)
            answered_after = len(load.answers)
            load.wait_for(answered_after + 50)
        journal, still = deployed.journal(since), (deployed.slot(), deployed.app_workers())
        deployed.host.run(f"ln -sfn {cannot_start} /opt/plantstore")
        main = deployed.app_main()
        deployed.host.run(f"kill -9 {main}")
        # systemd starts it again (Restart=on-failure) once its start, ExecStartPost='s probe, succeeds.
        back = {"ActiveState": "active", "SubState": "running"}
        wait_until(
            lambda: (
                deployed.show(f"plantstore-app@{serving}", "ActiveState", "SubState") == back
                and deployed.app_main() not in (0, main)
            ),
            None,
            60,
            "the slot back",
        )
        after_crash = (
            deployed.create(23_900, deployed.token)[0],
            deployed.host.run(f"readlink /proc/{deployed.app_main()}/cwd").stdout.strip(),
        )
        restarted = deployed.host.run(f"systemctl restart plantstore-app@{serving}", check=False).returncode
        after_restart = (
            deployed.create(23_901, deployed.token)[0],
            deployed.app_environment("DJANGO_SECRET_KEY") == key,
        )
    finally:
        deployed.host.run(f"ln -sfn {good} /opt/plantstore")
        deployed.configure(DJANGO_SECRET_KEY=key)
    back = deployed.release(check=False)

    other = "b" if serving == "a" else "a"
    did_not_start = (
        f"plantstore-release: plantstore-app@{other} did not start: journalctl -u plantstore-app@{other} says why;"
        f" plantstore-app@{serving} serves on"
    )
    # systemctl's own lines first ("Job for ... failed"), then the script's.
    assert [stderr.splitlines()[-1] for stderr in failed] == [
        did_not_start,
        "plantstore-release: nginx did not switch: journalctl -u plantstore-nginx says why;"
        f" plantstore-app@{serving} serves on",
        did_not_start,
    ]
    assert any(line.endswith("RuntimeError: this release cannot start") for line in journal), journal[-30:]
    assert any('unknown directive "no_such_directive"' in line for line in journal), journal[-30:]
    assert [(status, text) for _, status, _, text, _ in load.answers if status != 200] == []
    assert still == (serving, workers)
    assert (after_crash, restarted, after_restart) == ((200, good), 0, (200, True))
    assert back.returncode == 0 and deployed.app_workers().isdisjoint(workers)
    assert deployed.slot() == other


def test_a_switch_nginx_does_not_take_in_time_puts_its_running_config_back_and_the_release_fails(deployed):
    """nginx's master stopped (SIGSTOP) through a release: no new worker within 10 s, so the switch
    (deploy/unit.py: switch_nginx) puts the running config back and the release fails; nginx, let go,
    reads the config it ran and serves on from the slot that served."""
    serving, workers = deployed.serving()
    nginx = deployed.show("plantstore-nginx", "MainPID")["MainPID"]
    nginx_workers = lambda: set(deployed.host.run(f"pgrep -P {nginx}", check=False).stdout.split())  # noqa: E731
    before, since = nginx_workers(), deployed.now()
    deployed.host.run(f"kill -STOP {nginx}")
    try:
        failed = deployed.release(check=False)
    finally:
        deployed.host.run(f"kill -CONT {nginx}")
    wait_until(lambda: nginx_workers() - before, None, 20, "nginx's workers of the config it read again")
    created = deployed.create(25_000, deployed.token)[0]
    journal = deployed.journal(since)

    assert (failed.returncode, failed.stderr.splitlines()[-1]) == (
        1,
        f"plantstore-release: nginx did not switch: journalctl -u plantstore-nginx says why; plantstore-app@{serving} serves on",
    )
    assert any("edge: nginx did not take the new config within 10 s" in line for line in journal), journal[-20:]
    assert (created, deployed.serving()) == (200, (serving, workers))


def test_a_release_whose_units_differ_from_the_installed_ones_stops_before_any_change_naming_the_install(deployed):
    release, serving, workers = deployed.host.run("readlink -f /opt/plantstore").stdout.strip(), *deployed.serving()
    deployed.host.run("echo '# edited' >>/etc/systemd/system/plantstore.target")
    refused = deployed.release(check=False)
    unchanged = deployed.serving()
    deployed.host.run(refused.stderr.rpartition("release again: ")[2])  # the command it names, as printed
    released = deployed.release(check=False).returncode

    assert (refused.returncode, refused.stderr) == (
        1,
        "plantstore-release: /etc/systemd/system/plantstore.target is not this release's; nothing was changed:"
        f" install this release's units, then release again: install -m 644 {release}/deploy/systemd/*"
        " /etc/systemd/system/ && systemctl daemon-reload\n",
    )
    assert (unchanged, released) == ((serving, workers), 0)


def test_a_release_with_a_settings_line_systemd_reads_and_the_unit_s_other_readers_do_not_changes_nothing(deployed):
    """`NAME = value`: systemd's EnvironmentFile= reads it for the slot, the edge file's copy, the probes
    and manage.py would not (nginx would serve /admin to every client)."""
    serving, workers = deployed.serving()
    line = len(deployed.host.run(f"cat {ENV_FILE}").stdout.splitlines()) + 1
    deployed.host.run(f"echo 'PLANTS_ADMIN_CLIENTS = 10.0.1.0/24' >>{ENV_FILE}")
    try:
        refused = deployed.release(check=False)
        unchanged = deployed.serving()
    finally:
        deployed.host.run(f"sed -i '/^PLANTS_ADMIN_CLIENTS = /d' {ENV_FILE}")

    assert (refused.returncode, refused.stderr) == (
        1,
        f"plantstore-release: {ENV_FILE}, line {line} (PLANTS_ADMIN_CLIENTS), is not NAME=value: no space before the"
        " name or around =; nothing was changed\n",
    )
    assert unchanged == (serving, workers)


def test_after_a_failed_release_the_host_restarts_with_what_served_and_counts_on(deployed):
    """A release whose settings the app refuses fails; the host restarts with the file still so: the
    enabled units are back with the release and settings that served, and the counts go on."""
    token, key = deployed.token, deployed.app_environment("DJANGO_SECRET_KEY")
    # The counts are per day, from UTC midnight: across it, a new window would start.
    seconds_left_today = 86400 - time.time() % 86400
    if seconds_left_today < 180:
        time.sleep(seconds_left_today + 1)
    before = deployed.create(50_000, token)
    deployed.configure(DJANGO_SECRET_KEY=REFUSED_KEY)
    try:
        failed = deployed.release(check=False).returncode
        deployed.host.restart()
        active = deployed.host.run(
            f"systemctl is-active plantstore.target plantstore-nginx plantstore-app@{deployed.slot()}", check=False
        ).stdout.split()
        healthy = deployed.wait_healthy()  # PostgreSQL may start after it: 503 Error bodies till then
        after = deployed.create(50_001, token)
        same_key = deployed.app_environment("DJANGO_SECRET_KEY") == key
    finally:
        deployed.configure(DJANGO_SECRET_KEY=key)

    assert (failed, active, healthy, same_key) == (1, ["active"] * 3, 200, True)
    # The token's count goes on from where it was: one create more, one fewer left.
    [left_before, left_after] = [
        int(answer[1]["RateLimit"].split(";r=")[1].split(";")[0]) for answer in (before, after)
    ]
    assert (before[0], after[0], left_before - left_after) == (200, 200, 1)


def test_with_opentelemetry_on_its_workers_export_spans_from_its_sandbox_to_the_journal(deployed):
    trace_id = secrets.token_hex(16)
    deployed.configure(OTEL_TRACES_EXPORTER="otlp_json_file", OTEL_BSP_SCHEDULE_DELAY="50")
    try:
        released = deployed.release().returncode
        token, since = deployed.token, deployed.now()
        created = deployed.create(60_000, token, traceparent=f"00-{trace_id}-00f067aa0ba902b7-01")
        log_line = deployed.wait_for_line(since, f'"trace_id": "{trace_id}"')

        def server_spans() -> list[dict]:  # the spans its workers wrote to their output, the journal
            return [
                span
                for line in deployed.journal(since)
                if line.startswith('{"resourceSpans"')
                for resource in json.loads(line)["resourceSpans"]
                for scope in resource["scopeSpans"]
                for span in scope["spans"]
                if span["traceId"] == trace_id and span["kind"] == 2
            ]

        wait_until(server_spans, None, 10, "the request's server span in the journal")
        [span] = server_spans()
    finally:
        deployed.unconfigure("OTEL_TRACES_EXPORTER", "OTEL_BSP_SCHEDULE_DELAY")
        deployed.release()

    assert (released, created[0], span["name"], span["parentSpanId"]) == (0, 200, "POST /plants", "00f067aa0ba902b7")
    assert f'"trace_id": "{trace_id}", "span_id": "{span["spanId"]}"' in log_line


def test_a_changed_settings_file_is_applied_by_a_release_under_load_and_redis_down_stops_no_create(deployed):
    """The operator moves the counts to a Redis that is down and halves the workers: a release applies
    the edited file without a refused request, and creates go on uncounted (.env.example's failure
    mode, open) until Redis is back."""
    deployed.host.run("systemctl stop redis-server")
    deployed.configure(REDIS_URL="redis://127.0.0.1:6379/0", APP_PROCESSES="1")
    since = deployed.now()
    try:
        with deployed.load(deployed.token, first_id=600_000, clients=4, limit=2_000, timeout=30) as load:
            load.wait_for(30)
            released = deployed.release(check=False).returncode
            answered_after = len(load.answers)
            load.wait_for(answered_after + 50, timeout=60)
        workers = deployed.app_workers()
        health = request(f"{deployed.url}/healthz", proxy="127.0.0.1")
        uncounted = deployed.create(70_000, deployed.token)
        uncounted_line = deployed.wait_for_line(since, "the limits fail open")
        deployed.host.run("systemctl start redis-server")
        counted = deployed.create(70_001, deployed.token)
        in_redis = deployed.host.run("redis-cli --scan --pattern 'plants:rate:*'").stdout.split()
        # nginx's listener: a release applies it (nginx's master opens the new one at its reload).
        deployed.configure(PLANTS_LISTEN="0.0.0.0:8001")
        listener = deployed.release(check=False).returncode
        livez = "curl -s -o /dev/null -w %{http_code} -H 'Host: " + PUBLIC_HOST + "' http://127.0.0.1:{port}/livez"
        answered = [deployed.host.run(livez.replace("{port}", str(port)), check=False).stdout for port in (8001, 8000)]
    finally:
        deployed.configure(APP_PROCESSES="2", PLANTS_LISTEN="0.0.0.0:8000")
        deployed.unconfigure("REDIS_URL")
        deployed.release(check=False)

    assert released == 0
    assert [(status, text) for _, status, _, text, _ in load.answers if status != 200] == []
    assert len(workers) == 1
    assert (health[0], json.loads(health[2])) == (200, {"status": "ok"})
    assert (uncounted[0], uncounted[1]["RateLimit"]) == (200, None)
    assert "rate-limit store unavailable: ConnectionError (the limits fail open: served uncounted)" in uncounted_line
    assert (counted[0], counted[1]["RateLimit"] is not None, len(in_redis)) == (200, True, 1)
    assert (listener, answered) == (0, ["200", "000"])  # 000: curl found nothing listening


# A release's steps, each as the host shows it once the release has reached it ({old}: the slot that
# served, {new}: the one the release starts): what a poll on the host waits for before the signal.
STEPS = {
    "after the new slot starts": "systemctl is-active -q plantstore-app@{new}",
    "after the switch is recorded": "grep -qx PLANTS_APP_SLOT={new} /etc/plantstore/edge.env",
    "during nginx's reload": '[ "$(systemctl show -P ActiveState plantstore-nginx)" = reloading ]',
    "after the switch": '[ "$(systemctl is-enabled plantstore-app@{old})" = disabled ]',
}


def serving_alone(slot: str) -> dict:
    """Deployed.state() when `slot` alone serves: nginx sends to it, its file names it, it alone runs and starts at boot."""
    return {"nginx": slot, "file": slot, "active": [slot], "enabled": [slot]}


def stopped_at(deployed: Deployed, step: str, signal: str) -> tuple[bool, int, list[str]]:
    """deploy/plantstore-release run in a session of its own, its process group sent `signal` (as a Ctrl-C
    or a dropped SSH session sends one to a terminal's) once the host shows `step`, then systemd's jobs
    left to finish: whether the host showed it, the release's exit status and its lines. The release
    gets SIGINT's default action, as from a terminal (a shell's background job ignores it)."""
    old = deployed.state()["nginx"]
    shown = STEPS[step].format(old=old, new="b" if old == "a" else "a")
    lines = deployed.host.run(
        f"setsid env --default-signal=INT {RELEASE} >/tmp/release.out 2>&1 & release=$!; reached=no"
        f"; for _ in $(seq 2000); do if {shown}; then reached=yes; break; fi; sleep 0.01; done"
        f"; kill -{signal} -- -$release; status=0; wait $release || status=$?"
        # What systemd was asked goes on without the release (a start, nginx's reload): the state it leaves.
        '; for _ in $(seq 600); do [ -z "$(systemctl list-jobs --no-legend)" ] && break; sleep 0.2; done'
        "; echo $reached $status; cat /tmp/release.out",
        timeout=240,
    ).stdout.splitlines()
    reached, status = lines[0].split()
    return reached == "yes", int(status), lines[1:]


def stopped_outcomes(step: str, signal: str, before: str) -> list[list]:
    """What a release stopped by `signal` at `step` may leave, as [its exit status, its last line, the
    host's state]: before nginx is told, it undoes the release; once nginx has switched, it finishes it."""
    new = "b" if before == "a" else "a"
    undone = [
        1,
        [f"plantstore-release: stopped by SIG{signal}; plantstore-app@{before} serves on"],
        serving_alone(before),
    ]
    finished = [0, [f"plantstore-release: plantstore-app@{new} serves"], serving_alone(new)]
    return {"after the new slot starts": [undone], "after the switch": [finished]}.get(step, [undone, finished])


@pytest.mark.parametrize("signal", ["TERM", "KILL"])
def test_a_release_stopped_at_each_of_its_steps_leaves_one_release_serving_and_the_next_succeeds(deployed, signal):
    """Under load, a release stopped at each of its steps. SIGTERM: it finishes what it began, or undoes
    it, leaving one slot serving and the host saying so. SIGKILL: whatever it left, a create is 200 and
    the next release, which asks nginx which slot serves, succeeds and leaves one slot serving. No
    request is refused throughout."""
    outcomes = {}
    with deployed.load(
        deployed.token, first_id={"TERM": 800_000, "KILL": 900_000}[signal], clients=2, timeout=30
    ) as load:
        load.wait_for(20)
        for plant_id, step in enumerate(STEPS, start={"TERM": 790_000, "KILL": 890_000}[signal]):
            before = deployed.state()["nginx"]
            reached, status, lines = stopped_at(deployed, step, signal)
            left = deployed.state()
            created = deployed.create(plant_id, deployed.token)[0]
            released = deployed.release(check=False)
            outcomes[step] = (before, reached, status, lines[-1:], left, created, released.returncode, deployed.state())
        answered = len(load.answers)

    assert answered > 100
    assert [(status, text) for _, status, _, text, _ in load.answers if status != 200] == []
    for step, (before, reached, status, last, left, created, released, after) in outcomes.items():
        assert (step, reached, created, released) == (step, True, 200, 0), outcomes[step]
        # The next release starts the slot that did not serve once it was stopped, and it alone serves.
        assert after == serving_alone("b" if left["nginx"] == "a" else "a"), outcomes[step]
        if signal == "KILL":
            # Killed before it said so, whatever it had done.
            assert (status, [line for line in last if " serves " in line]) == (137, []), outcomes[step]
            continue
        outcome = [status, [line.partition(" /opt")[0] for line in last], left]
        assert outcome in stopped_outcomes(step, signal, before), (step, outcomes[step])


# deploy/plantstore-release killed (its process group, SIGKILL) at one exact step: as it asks systemd
# for nginx's reload, before systemd has the job. The `systemctl` its PATH finds first.
KILLED_AT_NGINX_RELOAD = """#!/bin/sh
[ "$1 $2" = "reload plantstore-nginx" ] && kill -KILL 0
exec /usr/bin/systemctl "$@"
"""


@pytest.mark.parametrize("listen", ["0.0.0.0:8000", "0.0.0.0:8001", "{name}:8000"])
def test_a_release_killed_as_it_asks_for_nginx_s_reload_leaves_the_next_one_to_find_the_slot_nginx_sends_to(
    deployed, listen
):
    """A release killed as it asks for nginx's reload leaves the edge file naming the new slot while
    nginx sends to the old one; with another listen address, the edge file names that too, where nothing
    listens yet; or nginx listens on the host's name (its one address) alone, whence the host's own
    requests come. The next release still finds the slot nginx sends to (asked where the edge file
    says, or else where that slot's settings say), switches to the other, and no request is refused:
    the clients of the old address are answered until nginx leaves it."""
    name = deployed.host.run("hostname").stdout.strip()  # its address in the host's /etc/hosts, as podman writes it
    first_id = {"0.0.0.0:8000": 950_000, "0.0.0.0:8001": 970_000, "{name}:8000": 990_000}[listen]
    listen = listen.format(name=name)
    shim = "/run/killed-at-nginx-reload"
    deployed.host.run(
        f"install -d {shim} && cat >{shim}/systemctl && chmod 755 {shim}/systemctl", input=KILLED_AT_NGINX_RELOAD
    )
    deployed.configure(PLANTS_LISTEN=listen)
    one_address = listen.startswith(name)
    overlapping = None
    try:
        if one_address:  # nginx and each slot's settings on that address, as deploying.md has it set up
            # nginx cannot bind one address beside every address on a port: its reload refuses it
            overlapping = deployed.state()["nginx"], deployed.release(check=False)
            deployed.host.run("systemctl stop plantstore-nginx")
            deployed.release()  # and starts nginx on it
        before = deployed.state()["nginx"]
        new = "b" if before == "a" else "a"
        with deployed.load(deployed.token, first_id=first_id, clients=2, timeout=30) as load:
            load.wait_for(20)
            killed = deployed.host.run(
                f"setsid env PATH={shim}:$PATH {RELEASE} & release=$!; status=0; wait $release || status=$?; echo $status",
                timeout=240,
            ).stdout.split()[-1]
            # Asked where the edge file says, and where the serving slot's settings say.
            left = deployed.state(), deployed.state(f"/etc/plantstore/slots/{before}.env")["nginx"]
            released = deployed.release(check=False)
            answered = len(load.answers)
            load.wait_for(answered + 20, timeout=60)
        after = deployed.state()
    finally:
        deployed.host.run(f"rm -rf {shim}")
        deployed.configure(PLANTS_LISTEN="0.0.0.0:8000")
        if one_address:
            deployed.host.run("systemctl stop plantstore-nginx")
        deployed.release(check=False)

    if one_address:
        serving, refused = overlapping
        assert (refused.returncode, refused.stderr.splitlines()[-1]) == (
            1,
            f"plantstore-release: nginx did not switch: journalctl -u plantstore-nginx says why; plantstore-app@{serving} serves on",
        )
    # Killed with the switch recorded and nginx not told; asked where the edge file says, nginx answers
    # on the address it has, and nothing on another.
    asked_where_the_file_says = "" if listen == "0.0.0.0:8001" else before
    disagreeing = {"nginx": asked_where_the_file_says, "file": new, "active": ["a", "b"], "enabled": ["a", "b"]}
    assert (killed, left) == ("137", (disagreeing, before))
    assert released.returncode == 0, released.stderr
    # None: no answer, once nginx has left the load's address (8001 is not published).
    assert [(status, text) for _, status, _, text, _ in load.answers if status not in (200, None)] == []
    assert [status for _, status, *_ in load.answers].count(200) > 20
    assert after == serving_alone(new)


def test_a_release_run_again_while_nginx_reloads_for_a_killed_one_waits_for_the_reload_before_it_asks(deployed):
    """A release killed once systemd has its reload of nginx, which stalls before nginx is signalled
    (its command stopped 3 s), and the release run again at once, as an operator would. systemd
    finishes the reload (nginx then sends to the killed release's slot); the release waits for that
    before it asks nginx which slot serves, so it pins and switches to the other and stops the one
    nginx sent to only after the switch: no request refused, one slot serving."""
    before = deployed.state()["nginx"]
    reloading = "pgrep -f 'deploy[.]edge reload'"  # [.]: not this command's own line
    released = []
    again = threading.Thread(target=lambda: released.append(deployed.release(check=False)))
    try:
        with deployed.load(deployed.token, first_id=1_000_000, clients=2, timeout=30) as load:
            load.wait_for(20)
            killed = deployed.host.run(
                f"setsid {RELEASE} >/dev/null 2>&1 & release=$!"
                f"; until {reloading} >/dev/null; do sleep 0.01; done; kill -STOP $({reloading})"
                "; kill -KILL -- -$release; status=0; wait $release || status=$?; echo $status",
                timeout=120,
            ).stdout.split()[-1]
            again.start()
            time.sleep(3)
            deployed.host.run(f"kill -CONT $({reloading})")
            again.join(240)
            answered = len(load.answers)
            load.wait_for(answered + 20, timeout=60)
    finally:
        deployed.host.run(f"kill -CONT $({reloading}) 2>/dev/null || true")
        if again.ident:
            again.join(240)

    assert killed == "137"
    assert released[0].returncode == 0, released[0].stderr
    assert [(status, text) for _, status, _, text, _ in load.answers if status != 200] == []
    assert deployed.state() == serving_alone(before)


@pytest.mark.parametrize(("signal", "step"), [("INT", "after the new slot starts"), ("HUP", "after the switch")])
def test_a_release_stopped_by_a_ctrl_c_or_a_dropped_session_leaves_one_release_serving(deployed, signal, step):
    """A Ctrl-C (SIGINT) before nginx is told undoes the release; a dropped SSH session (SIGHUP) once
    nginx has switched finishes it. Either way one slot serves, a create is 200 and the next release
    succeeds."""
    before = deployed.state()["nginx"]
    reached, status, lines = stopped_at(deployed, step, signal)
    left = deployed.state()
    created = deployed.create({"INT": 780_000, "HUP": 780_001}[signal], deployed.token)[0]
    released = deployed.release(check=False).returncode

    outcome = [status, [line.partition(" /opt")[0] for line in lines[-1:]], left]
    assert (reached, created, released) == (True, 200, 0), lines
    assert outcome in stopped_outcomes(step, signal, before), lines
