"""What SQLite's fast paths cost when something beside the database misbehaves.

Run with .venv/bin/python bench/sqlite_fast_path_faults.py [--junk 20000] [--enqueues 200]

- `junk`: an enqueue's time (ms, to its commit and ring) with a worker's
  doorbell bound in `<db>-wake/`, then with `--junk` plain files added there
  (at once, and once the folder's listing is kept again).
- `frozen`: another process takes the writer turn (`<db>-due-writers`) and is
  frozen (SIGSTOP) holding it; the seconds each of this process's next
  enqueues takes (busy timeout 30 s, the default).
- `shared`: another user (nobody, when run as root) takes a shared lock on the
  turns file, as a read-only local user could; the seconds of the next enqueues
  (or "cannot open" when the file's mode keeps that user out).

Work files go to bench/work/fast-paths/.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import due
from due.store.sqlite.doorbell import Doorbell, folder_of

try:
    from due.store.sqlite.doorbell import SETTLING
except ImportError:  # (before the listing was kept)
    SETTLING = 2.0
from due.store.sqlite.writer_turns import SUFFIX

WORK = Path(__file__).resolve().parent / "work" / "fast-paths"
NOBODY = 65534

HOLD_AND_FREEZE = """
import fcntl, os, signal, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("held", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
"""

SHARE_THE_LOCK = """
import fcntl, os, sys
try:
    fd = os.open(sys.argv[1], os.O_RDONLY)
except OSError as error:
    print("cannot open:", error.strerror, flush=True)
    sys.exit(0)
fcntl.lockf(fd, fcntl.LOCK_SH)
print("held", flush=True)
sys.stdin.readline()
"""


def fresh_app(name: str) -> tuple[due.App, due.Task[..., None], Path]:
    WORK.mkdir(parents=True, exist_ok=True)
    path = WORK / f"{name}.db"
    common.fresh_sqlite_path(path)
    for leftover in (Path(f"{path}{SUFFIX}"),):
        leftover.unlink(missing_ok=True)
    folder = Path(folder_of(str(path)))
    if folder.exists():
        for entry in folder.iterdir():
            entry.unlink()
        folder.rmdir()
    app = due.App(f"sqlite:///{path}")
    app.migrate()

    @app.task(name="t")
    def t(n: int) -> None: ...

    t.enqueue(0)  # the turns file made
    return app, t, path


def timed_enqueues(task: due.Task[..., None], count: int) -> list[float]:
    took = []
    for n in range(count):
        started = time.perf_counter()
        task.enqueue(n)
        took.append(time.perf_counter() - started)
    return took


def junk(files: int, enqueues: int) -> None:
    app, t, path = fresh_app("junk")
    bell = Doorbell.open(str(path))
    assert bell is not None, "no doorbell could be bound here"
    try:
        labels = (
            "a worker's socket alone",
            f"and {files:,} plain files, just added",
            f"and {files:,} plain files, {SETTLING:g} s later",
        )
        for label in labels:
            if label.endswith("just added"):
                folder = Path(folder_of(str(path)))
                for i in range(files):
                    (folder / f"junk-{i}").touch()
            elif label.endswith("later"):
                time.sleep(SETTLING)  # a folder that changed is read again meanwhile
            took = sorted(timed_enqueues(t, enqueues))
            print(
                f"junk: {label}: enqueue p50 {statistics.median(took) * 1000:.2f} ms, "
                f"p99 {took[int(len(took) * 0.99) - 1] * 1000:.2f} ms ({enqueues} enqueues)"
            )
    finally:
        bell.close()
        app.close()


def held_elsewhere(name: str, script: str, as_nobody: bool, enqueues: int) -> None:
    app, t, path = fresh_app(name)
    turns = f"{path}{SUFFIX}"
    python = "/usr/bin/python3" if as_nobody else sys.executable  # (nobody may not run ours)
    holder = subprocess.Popen(
        [python, "-c", script, turns],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        user=NOBODY if as_nobody else None,
    )
    try:
        assert holder.stdout is not None
        said = holder.stdout.readline().strip()
        mode = oct(os.stat(turns).st_mode & 0o777)
        if said != "held":
            print(f"{name}: the other process {said} (turns file mode {mode})")
            return
        took = timed_enqueues(t, enqueues)
        print(
            f"{name}: turns file mode {mode}; enqueues took "
            + ", ".join(f"{seconds:.3f}" for seconds in took)
            + " s"
        )
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--junk", type=int, default=20_000)
    parser.add_argument("--enqueues", type=int, default=200)
    parser.add_argument("--only", choices=["junk", "frozen", "shared"])
    options = parser.parse_args()
    if options.only in (None, "junk"):
        junk(options.junk, options.enqueues)
    if options.only in (None, "frozen"):
        held_elsewhere("frozen", HOLD_AND_FREEZE, False, 4)
    if options.only in (None, "shared"):
        if os.geteuid() != 0:
            print("shared: run as root to try it as another user (nobody)")
        else:
            held_elsewhere("shared", SHARE_THE_LOCK, True, 2)


if __name__ == "__main__":
    main()
