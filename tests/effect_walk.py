"""A settings walk by effect: a command runs for real, once with its base settings and once per flag
changed to a valid non-default value, and what the run did is compared.

What a run did (`Outcome`): the files it wrote under its folder (JSON and JSONL parsed), what it
printed, each model client it built (endpoint and client limits) and each request those clients
were sent, or the one-line error it refused with. Models are the scripted role players
(`mascot.testing.players`), put behind every provider kind, so a run needs no model and no server;
what a client is built with and asked is still what the command decides.

Parts that differ between two runs of the same settings (times, ids, durations) are volatile: the
base runs twice and those parts are left out of every comparison. A flag whose only effect lies in
such a part is reported as ignored, never passed by accident.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import MISSING
from pathlib import Path
from typing import Any

import click
import typer

from mascot.errors import MascotError
from mascot.settings import cli_fields, settings_from

log = logging.getLogger(__name__)
FIXTURES = Path(__file__).parent / "fixtures"


# Names whose valid other value cannot be derived from the default; a walk's own values come first.
COMMON_VALUES = {"rubric_version": "paper_v1", "judge_scoring": "json", "provider": "openai"}


def changed_value(f, values: dict[str, Any]) -> Any:
    """A valid value for settings field `f` other than its default (`values` first)."""
    name, default = f.name, (f.default if f.default is not MISSING else f.default_factory())  # type: ignore[misc]
    values = {**COMMON_VALUES, **values}
    if name in values:
        return values[name]
    if isinstance(default, bool):  # before the names: share_model is a switch, not a model id
        return not default
    if name.endswith("_thinking"):
        return "on"
    if name.endswith("_extra_body") or name == "extra_body":
        return '{"k": 1}'
    if name.endswith("_server_url"):
        return ["http://127.0.0.1:9/v1"]
    if name.endswith(("_model", "_adapter")) or name == "model_name":
        return f"some/{name}"
    if isinstance(default, (int, float)):
        return default + 1
    if default is None and "int" in str(f.type):
        return 7
    raise AssertionError(f"no changed value for {name}: add one to the walk's values")


# --------------------------------------------------------------------------- recording clients


class RecordingClients:
    """Every provider kind builds a scripted role player; each build and each request is noted.
    Stand-ins for other models (NLI, embeddings) note what they are loaded with by `note`."""

    active: RecordingClients | None = None

    def __init__(self, reply: Callable[[Any], str] | None = None) -> None:
        self.builds: list[dict] = []
        self.requests: list[dict] = []
        self.reply = reply  # answers every request instead of the role players

    def factory(self, endpoint, opts, registry):
        from mascot.testing.players import role_player_client
        from mascot.testing.scripted import ScriptedClient

        self.builds.append({"endpoint": {**endpoint.describe(), "kind": endpoint.kind, "extra_body": endpoint.extra_body}, "limits": vars(opts)})
        client = ScriptedClient(fn=self.reply, model=endpoint.model) if self.reply else role_player_client(model=endpoint.model)
        inner_chat = client.chat

        async def chat(request):
            fields = dataclasses.asdict(request)
            fields.pop("affinity", None)  # a routing key made of run ids
            self.requests.append(fields)
            return await inner_chat(request)

        client.chat = chat  # type: ignore[method-assign]
        return client

    @classmethod
    def note(cls, what: str, **arguments: Any) -> None:
        """A stand-in model was loaded with `arguments` (part of what the run did)."""
        assert cls.active is not None, "a stand-in loaded outside a walk's run"
        cls.active.builds.append({"loaded": what, **arguments})

    @contextlib.contextmanager
    def installed(self) -> Iterator[RecordingClients]:
        from mascot.llm import providers

        saved = dict(providers._FACTORIES)
        providers._FACTORIES.update({kind: self.factory for kind in saved})
        RecordingClients.active = self
        try:
            yield self
        finally:
            RecordingClients.active = None
            providers._FACTORIES.clear()
            providers._FACTORIES.update(saved)


# --------------------------------------------------------------------------- one run, flattened


def _parsed(path: Path) -> Any:
    if path.read_bytes()[:16] == b"SQLite format 3\x00":  # a database: its rows
        import sqlite3

        with contextlib.closing(sqlite3.connect(path)) as db:
            return [re.split(r"[\s,()']+", line) for line in db.iterdump()]  # a salted hash in a row hides no value beside it
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        if path.suffix == ".json":
            return json.loads(text)
        if path.suffix == ".jsonl":
            return [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError:
        pass
    return text.splitlines()


def _digest(path: Path) -> Any:
    """A binary file's digest; a trainer's pickled TRL arguments as the arguments themselves."""
    import hashlib

    if path.name == "training_args.bin":
        import torch

        return torch.load(path, weights_only=False).to_dict()
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _flatten(value: Any, prefix: tuple, out: dict) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(item, (*prefix, str(key)), out)
    elif isinstance(value, (list, tuple)):
        out[(*prefix, "#")] = len(value)
        for i, item in enumerate(value):
            _flatten(item, (*prefix, i), out)
    else:
        out[prefix] = value


def _files(root: Path) -> dict[str, Any]:
    return {
        str(p.relative_to(root)): _parsed(p) if p.suffix in (".json", ".jsonl", ".md", ".txt", ".csv", ".yaml", ".db", ".sqlite") else _digest(p)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def outcome(run: Callable[[Any], Any], settings: Any, root: Path, setup: Callable[[Path], Any] | None = None, reply=None, stdin: str = "") -> dict:
    """Runs `run(settings)` in `root` (its working folder, judge cache inside; `setup(root)` first)
    and returns what it did, flattened to {path: value}, with `root` written as <ROOT>. `settings`
    may be a function that makes them: called in `root`, where relative paths are checked."""
    root.mkdir(parents=True, exist_ok=True)
    if setup:
        setup(root)
    clients, out, err = RecordingClients(reply), io.StringIO(), io.StringIO()
    cwd, cache, saved_stdin = os.getcwd(), os.environ.get("MASCOT_JUDGE_CACHE_DIR"), sys.stdin
    sys.stdin = io.StringIO(stdin)  # not a terminal: what a command asks for is read as lines
    os.chdir(root)
    os.environ["MASCOT_JUDGE_CACHE_DIR"] = str(root / "judge-cache")
    error = None
    try:
        with clients.installed(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            run(settings() if callable(settings) else settings)
    except (MascotError, SystemExit, click.exceptions.Exit, typer.Exit) as exc:  # a refusal, or a command that ends with a status
        error = f"{type(exc).__name__}: {exc} {getattr(exc, 'exit_code', '')}"
    finally:
        os.chdir(cwd)
        sys.stdin = saved_stdin
        if cache is None:
            os.environ.pop("MASCOT_JUDGE_CACHE_DIR", None)
        else:
            os.environ["MASCOT_JUDGE_CACHE_DIR"] = cache
    printed = [
        re.split(r"[\s/]+", line) for line in out.getvalue().splitlines() + err.getvalue().splitlines()
    ]  # a secret in a line hides no word beside it
    whole = {"files": _files(root), "printed": printed, "builds": clients.builds,
             "requests": clients.requests, "error": error}  # fmt: skip
    text = re.sub(r"\d{8}-\d{6}", "<TIME>", json.dumps(whole, default=str).replace(str(root), "<ROOT>"))  # a folder named by the time
    flat: dict = {}
    _flatten(json.loads(text), (), flat)
    return flat


# Keys under which a run writes its settings back as given: a flag always changes them, so they
# show no effect and are left out (what a run did with a setting shows elsewhere, or nowhere).
ECHOES = ("settings", "hyperparameters")


def differing(a: dict, b: dict) -> set:
    return {key for key in a.keys() | b.keys() if a.get(key, MISSING) != b.get(key, MISSING) and not set(key) & set(ECHOES)}


@dataclasses.dataclass
class Walk:
    """One command's walk: how to run it, its base settings, the values to change its flags to."""

    settings_class: type
    run: Callable[[Any], Any]
    base: dict[str, Any]
    values: dict[str, Any] = dataclasses.field(default_factory=dict)
    # flag -> settings it acts together with (refused or inert alone): changed alongside them and
    # compared with a run given those alone
    companions: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    # flag -> what its run's folder must hold for it to act (an output to overwrite): made before
    # the flag's run and before a run without it to compare with
    setups: dict[str, Callable[[Path], Any]] = dataclasses.field(default_factory=dict)
    reply: Callable[[Any], str] | None = None  # the models' answer to every request (default: the role players)
    prepare: Callable[[Path], Any] | None = None  # what every run's folder holds before it starts
    stdin: str = ""  # what the command reads from its standard input

    def settings(self, values: dict[str, Any], label: str):
        """The settings of one run, made in its folder (relative paths are checked there)."""
        return lambda: settings_from(self.settings_class, {**self.base, **values}, label)

    def ignored(self, tmp_path: Path) -> list[str]:
        """The flags whose change altered nothing the run did (refused by name counts as an effect)."""
        reference = self._reference(tmp_path, {}, "base")
        assert reference[0].get(("error",)) is None, f"the walk's base run failed: {reference[0][('error',)]}"
        ignored = []
        for f in cli_fields(self.settings_class):
            companion, setup = self.companions.get(f.name, {}), self.setups.get(f.name)
            before, volatile = reference if not (companion or setup) else self._reference(tmp_path, companion, f"{f.name}-base", setup)
            flag = "--" + f.name.replace("_", "-")
            changed = self.settings({**companion, f.name: changed_value(f, self.values)}, f"walk {f.name}")
            started = time.perf_counter()
            after = outcome(self.run, changed, tmp_path / f.name, self._setup(setup), self.reply, self.stdin)
            log.debug("walk %s: %.2f s", f.name, time.perf_counter() - started)
            refused = after.get(("error",))
            if refused and flag in refused:
                continue
            if not differing(before, after) - volatile:
                ignored.append(f.name)
        return ignored

    def _reference(self, tmp_path: Path, values: dict[str, Any], label: str, setup=None) -> tuple[dict, set]:
        first = outcome(self.run, self.settings(values, label), tmp_path / f"{label}-1", self._setup(setup), self.reply, self.stdin)
        second = outcome(self.run, self.settings(values, label), tmp_path / f"{label}-2", self._setup(setup), self.reply, self.stdin)
        return first, differing(first, second)

    def _setup(self, setup: Callable[[Path], Any] | None) -> Callable[[Path], None]:
        def both(root: Path) -> None:
            for step in (self.prepare, setup):
                if step:
                    step(root)

        return both


def require_effects(walk: Walk, tmp_path: Path) -> None:
    """Every flag of the walk's command changes what its run does; the message names those that do not."""
    ignored = walk.ignored(tmp_path)
    assert not ignored, f"{walk.settings_class.__name__}: accepted and ignored: {', '.join(ignored)}"
