"""What a run on Beam's local runner needs around it: its worker processes stopped at once on Ctrl-C, and their
stderr shown without the tracebacks Beam's workers print for a failing bundle.

A terminal's Ctrl-C reaches the worker processes too, each of which logs a CRITICAL "sdk harness failed" record
with its KeyboardInterrupt, which the local runner relays to the launcher's root logger (3 KB, the traceback inside
one line): such a record is dropped however early it comes, and once the signal is seen nothing more is shown but
bertprep's own line.

Beam's SDK worker prints the traceback of every failing instruction on its stderr (sdk_worker.py, `print(...,
file=sys.stderr)`, whatever the log level), and the local runner's worker processes share the launcher's
stderr. The same failure reaches the launcher as an exception, which bertprep prints as one line (the traceback
with --debug). So during a local run the process's fd 2, inherited by every worker it starts, is a pipe read by a
thread that forwards what it reads to the console, less the tracebacks (`TracebackFilter`).
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import signal
import sys
import threading
from typing import Iterator

_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


def descendants(pid: int) -> list[int]:
    """Process ids under `pid` (Beam's local worker processes), from /proc; none where there is no /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            children.setdefault(int(stat[stat.rindex(b")") + 2:].split()[1]), []).append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


class TracebackFilter:
    """Lines of stderr -> the lines to show: each Python traceback is dropped whole (its frames, the exception
    line that ends it, the tracebacks chained to it and the blank lines between), every other line passes."""

    def __init__(self):
        self.state = "pass"   # pass | frames (inside a traceback) | after (its exception line seen)

    def feed(self, line: str) -> list[str]:
        if self.state == "pass":
            if line.startswith(_TRACEBACK):
                self.state = "frames"
                return []
            return [line]
        if self.state == "frames":
            if line and not line[0].isspace():   # "SomeError: message" ends the traceback
                self.state = "after"
            return []
        # after a traceback: blank lines and chained tracebacks belong to it
        if not line.strip() or line.startswith(_CHAINED):
            return []
        if line.startswith(_TRACEBACK):
            self.state = "frames"
            return []
        self.state = "pass"
        return [line]


@contextlib.contextmanager
def filtered_stderr(quiet: threading.Event) -> Iterator[int]:
    """fd 2 of this process (and of the worker processes started meanwhile) goes through a TracebackFilter to the
    console, nothing once `quiet` is set; yields the console's own fd, for a message that must be out before the
    process ends."""
    sys.stderr.flush()
    console = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def pump():
        keep = TracebackFilter()
        with io.open(read_end, "rb", closefd=True) as lines:
            for raw in lines:
                for line in keep.feed(raw.decode("utf-8", "replace").rstrip("\n")):
                    if not quiet.is_set():
                        os.write(console, (line + "\n").encode("utf-8", "replace"))

    pumping = threading.Thread(target=pump, name="bertprep-stderr", daemon=True)
    pumping.start()
    try:
        yield console
    finally:
        sys.stderr.flush()
        os.dup2(console, 2)   # the pipe now stays open only in worker processes that have not exited yet
        pumping.join(timeout=10)
        if not pumping.is_alive():
            os.close(console)


def _left(directory: str) -> str:
    """What an interrupted job left in its output: nothing published, or, where the signal came after the job's last
    step wrote the manifest (the commit marker), a complete output."""
    local = directory.removeprefix("file://")
    if "://" not in local and os.path.exists(os.path.join(local, "manifest.json")):
        return f"the job had finished: {directory} is published complete (its manifest.json was written)"
    return f"{directory} holds no published output (only .incomplete/): re-run with --overwrite"


@contextlib.contextmanager
def stop_on_interrupt(title: str, directory: str, temporary: tuple[str, ...] = (), console: int = 2,
                      quiet: threading.Event | None = None):
    """Ctrl-C (SIGINT) or SIGTERM ends a local run at once, whatever its threads are doing: Beam's local runner
    waits on its workers in calls that never see KeyboardInterrupt, so a signal went unanswered for minutes.

    The signal's number reaches a watcher thread through signal.set_wakeup_fd (written by the C-level handler,
    even while the main thread is blocked); the watcher sets `quiet` and silences logging (the workers' records of
    their own KeyboardInterrupt), kills the worker processes, removes the job's temporary directories (`temporary`:
    its own run files, Beam's beam-pipeline-temp*, which only a pipeline that returns removes) and exits 130.
    Unless the job's last step had written the manifest already (a signal in the last moment: the message says so),
    nothing has been published: the output holds only .incomplete/, which the next --overwrite removes. Its message
    goes straight to `console`."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    previous_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    previous = {s: signal.signal(s, lambda *_: None) for s in (signal.SIGINT, signal.SIGTERM)}
    finished = threading.Event()

    def watch():
        while not finished.is_set():
            data = os.read(read_end, 1)
            if finished.is_set() or not data:
                return
            if data[0] in (signal.SIGINT, signal.SIGTERM):
                if quiet is not None:
                    quiet.set()
                logging.disable(logging.CRITICAL)
                os.write(console, f"\n{title}: interrupted: worker processes stopped; {_left(directory)}\n".encode())
                for pid in descendants(os.getpid()):
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                for path in temporary:
                    shutil.rmtree(path, ignore_errors=True)
                os._exit(130)

    watcher = threading.Thread(target=watch, name="bertprep-interrupt", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        finished.set()
        signal.set_wakeup_fd(previous_fd)
        for s, handler in previous.items():
            signal.signal(s, handler)
        os.write(write_end, b"\0")   # wakes the watcher, which sees `finished` and returns
        watcher.join()
        os.close(read_end)
        os.close(write_end)


def _not_interrupted(record: logging.LogRecord) -> bool:
    """False for a worker's relayed record of its own KeyboardInterrupt: the Ctrl-C that bertprep reports itself."""
    return "KeyboardInterrupt" not in record.getMessage()


@contextlib.contextmanager
def guarded(title: str, directory: str, temporary: tuple[str, ...], tracebacks: bool):
    """Both guards of a local run: Ctrl-C, and (unless `tracebacks`) the workers' tracebacks kept off stderr."""
    quiet = threading.Event()
    root = logging.getLogger()   # where the local runner relays its workers' log records
    root.addFilter(_not_interrupted)
    try:
        with (contextlib.nullcontext(2) if tracebacks else filtered_stderr(quiet)) as console, \
                stop_on_interrupt(title, directory, temporary, console, quiet):
            yield
    finally:
        root.removeFilter(_not_interrupted)
