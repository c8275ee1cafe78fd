"""Progress of long steps on screen, and what Ctrl-C does while they run.

- `ProgressLine(label, total, unit=...)`: done/total, rate and time left. On a terminal a rich
  progress bar (several steps at once share one display; under 120 columns a line of words that
  folds rather than a bar squeezed into ellipses); when stderr is not a terminal (logs, CI,
  a pipe) a plain line every `MASCOT_PROGRESS_INTERVAL` seconds (default 15), also while no record
  finishes, and one when the step ends. `MASCOT_QUIET=1` (or a command's `--quiet`) shows none:
  the closing lines that say what a run made are printed all the same.
- `interrupt_handling(hint)`: the first Ctrl-C is answered at once. A step that streams records
  (`ProgressLine(..., drains=True)`: generation) cancels the work it registered with
  `cancel_on_interrupt` (the requests in flight; a record not yet complete is not written and
  `--resume` makes it) and takes no new one (`stop_requested()`); any other step stops where it
  is. The second Ctrl-C ends the process at once, after the open runs' summaries say
  `interrupted` (`on_exit_at_once`): records are appended whole, so what was written is kept and
  `--resume` continues.
  SIGTERM (`kill`, `timeout`, a batch scheduler's preemption) stops the run where it is, as an
  interrupted one: its summary says `interrupted`, the exit status is 143, `--resume` continues.

Imports nothing heavy; rich only when a bar is shown.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

QUIET_ENV = "MASCOT_QUIET"
INTERVAL_ENV = "MASCOT_PROGRESS_INTERVAL"
DEFAULT_INTERVAL_S = 15.0
TERMINAL_REFRESH_S = 0.5


def is_quiet() -> bool:
    return os.environ.get(QUIET_ENV, "").strip().lower() in ("1", "true", "yes", "on")


@contextmanager
def quiet_mode(quiet: bool) -> Iterator[None]:
    """`MASCOT_QUIET=1` while the block runs when `quiet` (child processes inherit it)."""
    if not quiet:
        yield
        return
    previous = os.environ.get(QUIET_ENV)
    os.environ[QUIET_ENV] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(QUIET_ENV, None)
        else:
            os.environ[QUIET_ENV] = previous


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """'1 episode', '0 episodes', '3 replies'."""
    if count == 1:
        return f"{count} {singular}"
    if plural_form is None:
        plural_form = singular[:-1] + "ies" if singular.endswith("y") and singular[-2:-1] not in "aeiou" else singular + "s"
    return f"{count} {plural_form}"


def duration(seconds: float) -> str:
    """'40 s', '3 min 5 s' (seconds shown under 10 minutes), '25 min', '1 h 12 min'."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 10:
        return f"{minutes} min" + (f" {seconds % 60} s" if seconds % 60 else "")
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"


def calls_and_tokens(meter: Any) -> str:
    """'14 model calls, 3050 tokens' from a usage meter (`mascot.llm.metered.UsageMeter`)."""
    calls = sum(u.requests for u in meter.by_role.values())
    if not calls:
        return "no model call answered yet"  # a local model loads on its first call: minutes on a busy CPU
    return f"{plural(calls, 'model call')}, {plural(meter.total_tokens, 'token')}"


def _interval_s() -> float:
    try:
        return max(0.05, float(os.environ.get(INTERVAL_ENV, DEFAULT_INTERVAL_S)))
    except ValueError:
        return DEFAULT_INTERVAL_S


class ProgressLine:
    """The progress of one step. `update(done)` or `advance()` as records finish; `poll`: a function
    that returns `done`, read every refresh instead (for work counted elsewhere); `detail`: a
    function whose text follows the counts, read every refresh (model calls and tokens: they move
    while a long record is still unfinished). `already`: records an earlier session wrote (counted
    as saved, not in the rate)."""

    def __init__(
        self, label: str, total: int | None, *, unit: str = "records", console: Any = None, poll: Callable[[], int] | None = None,
        detail: Callable[[], str] | None = None, already: int = 0, drains: bool = False,
    ) -> None:  # fmt: skip
        self.label, self.total, self.unit, self.poll, self.detail = label, total, unit, poll, detail
        self.already, self.drains, self.done, self.note = already, drains, 0, ""
        self._console, self._started = console, time.monotonic()
        self._mode = "off" if is_quiet() else "bar" if _is_terminal(console) else "lines"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._task: Any = None

    # ---- lifecycle
    def __enter__(self) -> ProgressLine:
        _ACTIVE.append(self)
        if self._mode == "bar":
            self._task = _SharedBar.add(self._console, self.label, self.total)
        if self._mode == "lines" or (self._mode == "bar" and (self.poll or self.detail)):
            self._thread = threading.Thread(target=self._tick, name=f"progress-{self.label}", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self._refresh()
        if _Interrupts.presses or _Interrupts.terminated:  # the closing line says what this step kept
            _Interrupts.saved = _saved_text()
        if self._mode == "lines":
            _say(self.final_line() if exc[0] is None else self.line())
        elif self._mode == "bar":
            _SharedBar.remove(self._task)
        if self in _ACTIVE:
            _ACTIVE.remove(self)

    def _tick(self) -> None:
        wait = _interval_s() if self._mode == "lines" else TERMINAL_REFRESH_S
        while not self._stop.wait(wait):
            self._refresh()
            if self._mode == "lines":
                _say(self.line())

    # ---- counting
    def update(self, done: int, note: str | None = None) -> None:
        self.done = done
        if note is not None:
            self.note = note
        if self._mode == "bar":
            self._show()

    def advance(self, count: int = 1) -> None:
        self.update(self.done + count)

    @property
    def saved(self) -> int:
        """Records kept so far, an earlier session's included (a polled count read now)."""
        done = self.done
        if self.poll is not None:
            try:
                done = int(self.poll())
            except Exception:  # noqa: BLE001 - a progress read must never stop the work
                pass
        return self.already + done

    def _refresh(self) -> None:
        try:
            if self.poll is not None:
                self.done = int(self.poll())
            if self.detail is not None:
                self.note = self.detail()
        except Exception:  # noqa: BLE001 - a progress read must never stop the work
            return
        if self._mode == "bar":
            self._show()

    def _show(self) -> None:
        _SharedBar.update(self._task, self.done, f"{self._rate()}  {self.note}".strip())

    # ---- text
    def _rate(self) -> str:
        elapsed = time.monotonic() - self._started
        if not self.done or elapsed <= 0:
            return ""
        per_minute = self.done / elapsed * 60
        return f"{per_minute:.1f} {self.unit}/min" if per_minute < 60 else f"{per_minute / 60:.1f} {self.unit}/s"

    def line(self) -> str:
        """'episodes: 3/10 (30%), 1.2 episodes/min, about 6 min left, 2 min so far'."""
        elapsed = time.monotonic() - self._started
        parts = [f"{self.label}: {self.done}/{self.total}" if self.total is not None else f"{self.label}: {self.done}"]
        if self.total:
            parts[0] += f" ({100 * self.done // self.total}%)"
        if self._rate():
            parts.append(self._rate())
        if self.done and self.total is not None and self.total > self.done:
            parts.append(f"about {duration((self.total - self.done) * elapsed / self.done)} left")
        parts.append(f"{duration(elapsed)} so far")
        return ", ".join(parts) + (f"; {self.note}" if self.note else "")

    def final_line(self) -> str:
        counts = f"{self.label}: {self.done}" + (f"/{self.total}" if self.total is not None else "")
        return f"{counts} in {duration(time.monotonic() - self._started)}" + (f"; {self.note}" if self.note else "")


def _is_terminal(console: Any) -> bool:
    if console is not None:
        return bool(getattr(console, "is_terminal", False))
    return sys.stderr.isatty()


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@dataclass
class _Display:
    progress: Any  # rich.progress.Progress
    console: Any
    steps: int = 0


@lru_cache(maxsize=1)
def _step_column() -> type:
    """The column of `_step_in_words` (a class made on first use: rich loads only when a bar is shown)."""
    from rich.progress import ProgressColumn

    class StepInWords(ProgressColumn):
        def render(self, task: Any) -> Any:
            return _step_in_words(task)

    return StepInWords


class _SharedBar:
    """One rich display per console for every step shown at once (rich allows one live display
    per console); it stops when its last step ends."""

    _displays: dict[int, _Display] = {}  # id(console) -> its display
    _lock = threading.Lock()
    _stderr: Any = None  # the console of steps that name none

    @classmethod
    def add(cls, console: Any, label: str, total: int | None) -> tuple[_Display, Any]:
        console = console or cls._default_console()
        with cls._lock:
            display = cls._displays.get(id(console))
            if display is None:
                display = cls._displays[id(console)] = _Display(_new_progress(console), console)
                display.progress.start()
            display.steps += 1
            return display, display.progress.add_task(label, total=total, note="")

    @classmethod
    def _default_console(cls) -> Any:
        if cls._stderr is None:
            from rich.console import Console

            cls._stderr = Console(stderr=True)
        return cls._stderr

    @classmethod
    def update(cls, task: tuple[_Display, Any] | None, done: int, note: str) -> None:
        if task is not None:
            task[0].progress.update(task[1], completed=done, note=note)

    @classmethod
    def remove(cls, task: tuple[_Display, Any] | None) -> None:
        if task is None:
            return
        display = task[0]
        with cls._lock:
            display.steps -= 1
            if display.steps <= 0:
                display.progress.stop()
                cls._displays.pop(id(display.console), None)


NARROW_COLUMNS = 120  # a narrower console shows each step as words (folded onto a second line), not a bar


def _new_progress(console: Any) -> Any:
    """A bar, counts, times and the note on a wide console; on a narrow one a line of words, so that
    rich never squeezes the columns into ellipses (the note, last, folds onto a next line instead)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    from rich.table import Column

    note = Column(ratio=1, overflow="fold")
    if console.width < NARROW_COLUMNS:
        return Progress(_step_column()(table_column=note), console=console, transient=False, expand=True)
    columns = (
        TextColumn("[bold]{task.description}", table_column=Column(no_wrap=True)), BarColumn(bar_width=20), MofNCompleteColumn(),
        TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(), TextColumn("{task.fields[note]}", table_column=note),
    )  # fmt: skip
    return Progress(*columns, console=console, transient=False, expand=True)


def _step_in_words(task: Any) -> Any:
    """'episodes: 12/40 (30%), 2 min 5 s so far, about 5 min left; 128 model calls, ..., failures 0'."""
    from rich.text import Text

    done = int(task.completed)
    counts = f"{done}/{int(task.total)} ({100 * done // int(task.total)}%)" if task.total else str(done)
    parts = [counts, f"{duration(task.elapsed or 0)} so far"]
    if task.total and done < task.total and task.time_remaining is not None:
        parts.append(f"about {duration(task.time_remaining)} left")
    text = Text()
    text.append(f"{task.description}: ", style="bold")
    text.append(", ".join(parts))
    if note := task.fields.get("note"):
        text.append(f"; {note}")
    return text


# ---------------------------------------------------------------------------- Ctrl-C

_ACTIVE: list[ProgressLine] = []


class _Interrupts:
    presses = 0  # Ctrl-C presses during the running command (0 outside one)
    announced = False  # the last command's first press was answered on screen
    terminated = False  # the last command was stopped by SIGTERM
    installed = False
    hint = ""
    saved = ""  # what the interrupted command's steps had kept when they ended ('12 episodes saved')
    cancellers: list[Callable[[], None]] = []  # cancel the work of streaming steps (cancel_on_interrupt)
    exit_hooks: list[Callable[[], None]] = []  # run before a second Ctrl-C ends the process (on_exit_at_once)


def stop_requested() -> bool:
    """Ctrl-C was pressed once during a step that drains: take no new records."""
    return _Interrupts.presses > 0


def raise_if_stopped() -> None:
    """After a drained step: end the run as interrupted (its summary says so; exit status 130)."""
    if stop_requested():
        raise KeyboardInterrupt


def singular(unit: str) -> str:
    """'queries' -> 'query', 'episodes' -> 'episode'."""
    if unit.endswith("ies"):
        return unit[:-3] + "y"
    return unit[:-1] if unit.endswith("s") else unit


def _saved_text() -> str:
    """'12 episodes saved' for steps that append records as they go; 'done' for the others (their
    results are written when the step ends)."""
    if not _ACTIVE:
        return "the records written so far are kept"
    return "; ".join(f"{plural(p.saved, singular(p.unit), p.unit)} {'saved' if p.drains else 'done'}" for p in _ACTIVE)


def _on_interrupt(_signum: int, _frame: Any) -> None:
    _Interrupts.presses += 1
    if _Interrupts.presses == 1:
        _Interrupts.announced = True
        drains = any(p.drains for p in _ACTIVE)
        cancels = drains and bool(_Interrupts.cancellers)
        first = "stopping: the requests in flight are cancelled" if cancels else "stopping after the records in flight" if drains else "stopping"
        _say(f"{first}; {_saved_text()}; {_Interrupts.hint} (Ctrl-C again stops at once)")
        if not drains:
            raise KeyboardInterrupt
        for cancel in list(_Interrupts.cancellers):
            cancel()
        return
    _say(f"stopped at once; {_saved_text()}; {_Interrupts.hint}")
    for hook in list(_Interrupts.exit_hooks):
        try:
            hook()
        except Exception:  # noqa: BLE001 - the process stops at once all the same
            pass
    os._exit(130)  # records are appended whole: what was written is kept


@contextmanager
def cancel_on_interrupt(tasks: list[Any]) -> Iterator[None]:
    """While the block runs, the first Ctrl-C cancels `tasks` (asyncio tasks of the running loop):
    the requests they await stop now instead of after their records, and a record not yet complete
    is never written. Call inside the loop's thread."""
    import asyncio

    loop = asyncio.get_running_loop()

    def cancel() -> None:
        for task in tasks:  # from the signal handler: the loop cancels them at its next step
            loop.call_soon_threadsafe(task.cancel)

    _Interrupts.cancellers.append(cancel)
    try:
        if stop_requested():  # pressed before the work started
            cancel()
        yield
    finally:
        _Interrupts.cancellers.remove(cancel)


def on_exit_at_once(hook: Callable[[], None]) -> None:
    """Until `forget_exit_hook(hook)`, a second Ctrl-C calls `hook` before the process exits at once
    (an open run store marks its summary `interrupted`). It runs in a signal handler: keep it short."""
    _Interrupts.exit_hooks.append(hook)


def forget_exit_hook(hook: Callable[[], None]) -> None:
    if hook in _Interrupts.exit_hooks:
        _Interrupts.exit_hooks.remove(hook)


def interrupted_line() -> str:
    """The closing line of an interrupted command: what it kept and how to continue."""
    saved = _Interrupts.saved or "partial results are saved"
    return f"interrupted: {saved}; {_Interrupts.hint or 'rerun with --resume to continue'}"


def _on_terminate(_signum: int, _frame: Any) -> None:
    if _Interrupts.terminated:
        return  # a second SIGTERM while stopping: the first one's unwinding is under way
    _Interrupts.terminated = _Interrupts.announced = True
    _say(f"terminated (SIGTERM): stopping; {_saved_text()}; {_Interrupts.hint}")
    raise KeyboardInterrupt  # unwinds like Ctrl-C: the run's summary is closed as interrupted


@contextmanager
def interrupt_handling(hint: str) -> Iterator[None]:
    """Ctrl-C as the module docstring says, while the block runs (main thread only; the outermost
    command's hint wins when commands run inside one another)."""
    if _Interrupts.installed or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGINT, _on_interrupt)
    signal.signal(signal.SIGTERM, _on_terminate)
    _Interrupts.installed, _Interrupts.hint, _Interrupts.presses, _Interrupts.announced = True, hint, 0, False
    _Interrupts.terminated, _Interrupts.saved = False, ""
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
        _Interrupts.installed, _Interrupts.presses = False, 0  # a later run in this process starts afresh


def terminated() -> bool:
    """The last command was stopped by SIGTERM."""
    return _Interrupts.terminated


def interrupt_announced() -> bool:
    """The last command's first Ctrl-C already said what was saved and how to continue."""
    return _Interrupts.announced
