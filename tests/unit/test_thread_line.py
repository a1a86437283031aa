"""The line of threads' enqueues (store/thread_groups.py), its writer held by a
gate: a caller interrupted while it waits leaves the line, and those behind it
are written. The scenes run in a child process, whose main thread takes the
signal."""

from __future__ import annotations

import subprocess
import sys

INTERRUPTED_IN_LINE = """
import os, signal, threading, time
from due.store.thread_groups import ThreadGroups

# Python's own handler, whatever this process inherited: a shell that starts a
# command in the background (as a CI script may) has it ignore SIGINT, and
# then the interrupt below never came and the scene hung for 120 s.
signal.signal(signal.SIGINT, signal.default_int_handler)

gate = threading.Event()
groups = ThreadGroups(lambda jobs: (gate.wait(), [f"job-{job}" for job in jobs])[1])
outcomes = {}

def enqueue(name):
    outcomes[name] = groups.enqueue(name)

def wait_for(condition):
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.001)

first = threading.Thread(target=enqueue, args=("A",), daemon=True)
first.start()
wait_for(lambda: groups.being_written == 1)  # A's group taken: the rest wait

def interrupt():
    wait_for(lambda: groups.in_line == 2)
    # To the main thread itself, whose wait it must interrupt.
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

threading.Thread(target=interrupt, daemon=True).start()
try:
    groups.enqueue("R")  # waits behind A, and is interrupted there
    print("R was not interrupted")
except KeyboardInterrupt:
    pass
behind = threading.Thread(target=enqueue, args=("C",), daemon=True)
behind.start()
wait_for(lambda: groups.in_line == 2)  # A and C: R left
gate.set()
for thread in (first, behind):
    thread.join(30)
later = threading.Thread(target=enqueue, args=("D",), daemon=True)
later.start()
later.join(30)
print(sorted(outcomes.items()), groups.in_line, flush=True)
os._exit(0)
"""


def test_a_caller_interrupted_in_line_leaves_it_and_the_line_goes_on() -> None:
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_IN_LINE], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == ("[('A', 'job-A'), ('C', 'job-C'), ('D', 'job-D')] 0"), (
        done.stdout + done.stderr[-2000:]
    )
