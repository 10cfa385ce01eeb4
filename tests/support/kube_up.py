"""`make kube-up` / `make kube-down`: the tests' control plane as a background service for a person or a tool.

    PYTHONPATH=tests python -m support.kube_up up [--dir DIR] [--minimal]
    PYTHONPATH=tests python -m support.kube_up down [--dir DIR]
    PYTHONPATH=tests python -m support.kube_up env [--dir DIR]   # for eval: KUBECONFIG, and PATH with helm

`up` starts a supervisor process (`serve`) in its own session and returns once the plane is ready, printing
`export KUBECONFIG=DIR/kubeconfig`. `down` stops the supervisor, which stops every component; any component a
killed supervisor left behind is ended by the pids recorded in DIR/state.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from .kube_testbed import ControlPlane, KubeTestbinMissing, kube_testbin_dir

TESTS_DIR = Path(__file__).resolve().parents[1]


def default_dir() -> Path:
    return Path(os.environ.get("SHOAL_CACHE", Path.home() / ".cache" / "shoal")) / "kube-up"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_state(directory: Path) -> dict[str, object] | None:
    try:
        return dict(json.loads((directory / "state.json").read_text()))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _print_usage(directory: Path, state: dict[str, object]) -> None:
    print(f"kube control plane {state['version']} at {state['url']} (logs: {directory / 'run' / 'logs'})")
    print(f"helm, kwok and the control-plane binaries are in {state['bin_dir']}")
    print(f"export KUBECONFIG={directory / 'kubeconfig'}")


def up(directory: Path, minimal: bool) -> int:
    """Starts the supervisor unless one runs, and waits until it reports the plane ready."""
    state = _read_state(directory)
    if state and _alive(int(str(state["supervisor_pid"]))):
        print("already running")
        _print_usage(directory, state)
        return 0
    try:
        kube_testbin_dir()  # fail here, in the foreground, with the build hint
    except KubeTestbinMissing as missing:
        print(f"error: {missing}", file=sys.stderr)
        return 1
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "state.json").unlink(missing_ok=True)
    argv = [sys.executable, "-m", "support.kube_up", "serve", "--dir", str(directory)]
    argv += ["--minimal"] if minimal else []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS_DIR), os.environ.get("PYTHONPATH")])))
    with (directory / "supervisor.log").open("wb") as log:
        supervisor = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
    deadline = time.monotonic() + 300
    while (state := _read_state(directory)) is None:
        if supervisor.poll() is not None or time.monotonic() > deadline:
            supervisor.kill()
            print((directory / "supervisor.log").read_text(errors="replace")[-4000:], file=sys.stderr)
            print("error: the control plane did not come up (log above)", file=sys.stderr)
            return 1
        time.sleep(0.3)
    _print_usage(directory, state)
    return 0


def serve(directory: Path, minimal: bool) -> int:
    """The supervisor: owns the components, records them, stops them all on SIGTERM/SIGINT."""
    stopping = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    shutil.rmtree(directory / "run", ignore_errors=True)
    plane = ControlPlane(directory / "run", service_account_admission=not minimal)
    try:
        plane.start()
        if not minimal:
            plane.start_workloads()
        shutil.copyfile(plane.kubeconfig, directory / "kubeconfig")
        (directory / "kubeconfig").chmod(0o600)
        state = {
            "supervisor_pid": os.getpid(),
            "component_pids": plane.pids(),
            "url": plane.url,
            "version": plane.version(),
            "bin_dir": str(plane.bin_dir),
        }
        (directory / "state.tmp").write_text(json.dumps(state))
        (directory / "state.tmp").rename(directory / "state.json")
        print("ready", flush=True)
        while not stopping:
            for component in plane.components:
                if component.process.poll() is not None:
                    print(
                        f"{component.name} exited with {component.process.returncode}:\n{component.log_tail()}",
                        flush=True,
                    )
                    stopping = True
            time.sleep(1)
    finally:
        plane.stop()
        (directory / "state.json").unlink(missing_ok=True)
    return 0


def down(directory: Path) -> int:
    """Stops the supervisor and makes sure none of its components survive it."""
    state = _read_state(directory)
    if state is None:
        print("kube control plane is not running")
        return 0
    supervisor = int(str(state["supervisor_pid"]))
    if _alive(supervisor):
        os.kill(supervisor, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while _alive(supervisor) and time.monotonic() < deadline:
            time.sleep(0.2)
    bin_dir = str(state["bin_dir"])
    for pid in [int(p) for p in state["component_pids"]] + [supervisor]:  # type: ignore[attr-defined]
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if bin_dir.encode() in cmdline or b"support.kube_up" in cmdline:  # never a recycled pid of someone else
            os.kill(pid, signal.SIGKILL)
    (directory / "state.json").unlink(missing_ok=True)
    (directory / "kubeconfig").unlink(missing_ok=True)
    print("kube control plane stopped")
    return 0


def env(directory: Path) -> int:
    """Prints the shell exports that point kubectl and helm at the running plane (for ``eval``)."""
    state = _read_state(directory)
    if state is None:
        print("echo 'error: the kube control plane is not running (make kube-up)' >&2; false")
        return 1
    print(f"export KUBECONFIG={shlex.quote(str(directory / 'kubeconfig'))}")
    print(f'export PATH={shlex.quote(str(state["bin_dir"]))}:"$PATH"')
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["up", "down", "serve", "env"])
    parser.add_argument("--dir", type=Path, default=default_dir(), help="state dir (default $SHOAL_CACHE/kube-up)")
    parser.add_argument("--minimal", action="store_true", help="etcd and kube-apiserver only")
    args = parser.parse_args(argv)
    if args.command == "up":
        return up(args.dir, args.minimal)
    if args.command == "serve":
        return serve(args.dir, args.minimal)
    if args.command == "env":
        return env(args.dir)
    return down(args.dir)


if __name__ == "__main__":
    sys.exit(main())
