"""`mascot chat`: talk with the companion group at a terminal (or pipe messages in, one a line)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.cells import cell_len

from mascot.dialogue.chat import answers_from_smoke_test_model, chat_backends, local_model_loaders, new_session_path, open_session
from mascot.dialogue.chat import preload_local_models as preload
from mascot.dialogue.chat_settings import ChatSettings
from mascot.dialogue.show import colour_for, show_directive, show_episode, show_fallback
from mascot.dialogue.stream_wrap import StreamWrapper
from mascot.errors import MascotError
from mascot.runs.open import announce_local_roles

if TYPE_CHECKING:
    from rich.console import Console
    from rich.status import Status

    from mascot.dialogue.chat import ChatSession
    from mascot.dialogue.director import DirectorDecision
    from mascot.schema import Turn

HELP_TEXT = """Commands:
  /directive  the Director's last decision: agent, action, tone and its raw answer
  /who        who is in the group
  /help       this list
  /quit       end the session (Ctrl-D and Ctrl-C end it too; everything said is saved)
Anything else is a message to the group."""
CHOOSING = "The Director is choosing who answers\u2026"
SMOKE_TEST_NOTICE = (
    "Replies come from a tiny test model (the built-in smoke-test model): they show that the chat "
    "works, not what the companions can say. Give --model-name or --vllm-server-url for real conversations."
)


def run_chat_command(settings: ChatSettings) -> None:
    """`mascot chat`: opens the backends and the session, then reads messages until the end."""

    from rich.console import Console

    path = settings.session or new_session_path()
    console = Console(highlight=False)
    trace = path.with_name(f"{path.stem}.role_call_trace.jsonl") if settings.trace_role_calls else None
    backends, identities = chat_backends(settings, trace)
    with asyncio.Runner() as runner:  # one loop for the whole chat: clients stay bound to it
        try:
            # A wrong URL or model is one line now, not at the first message; and a constrained
            # reply (the Director's directive, the safety label) is sent as such where the server takes it.
            runner.run(backends.preflight())
            chat_session, continued = open_session(
                path,
                {role: backends[role] for role in backends.endpoints},
                settings,
                roster=settings.roster,
                dataset=settings.dataset,
                situation=settings.situation,
                meeting_file=settings.meeting_file,
                role_identities=identities,
            )
            announce_local_roles(backends, console)
            preload_local_models(backends, console, runner.run)
            if continued and (settings.situation or settings.meeting_file):
                console.print("[dim]continuing a saved session: its own situation is kept[/dim]")
            interactive = sys.stdin.isatty()
            reader = read_line_from(console, interactive)
            run_chat(
                chat_session,
                console,
                reader,
                runner.run,
                show_directives=settings.show_directives,
                echo=not interactive,
                continued=continued,
                smoke_test_model=answers_from_smoke_test_model(backends.endpoints),
            )
        finally:
            runner.run(backends.aclose())


def preload_local_models(backends, console: Console, run: Callable) -> None:
    """Loads in-process models before the first prompt, so the first reply does not wait for them."""

    if local_model_loaders(backends):
        with console.status("loading the local model..."):
            run(preload(backends))


# --------------------------------------------------------------------------- the loop


def read_line_from(console: Console, interactive: bool) -> Callable[[], str | None]:
    """A reader of the next message; None at end of input (Ctrl-D, or the end of piped input)."""

    if interactive:
        try:
            import readline  # noqa: F401 - line editing and history for input()
        except ImportError:  # pragma: no cover - not on every platform
            pass

        def ask() -> str | None:
            try:
                return console.input("[bold]You:[/bold] ")
            except EOFError:
                return None

        return ask

    def read() -> str | None:
        line = sys.stdin.readline()
        return line.rstrip("\r\n") if line else None

    return read


def run_chat(
    session: ChatSession,
    console: Console,
    read_line: Callable[[], str | None],
    run: Callable,
    *,
    show_directives: bool = False,
    echo: bool = False,
    continued: bool = False,
    smoke_test_model: bool = False,
) -> None:
    """Reads messages until /quit or end of input and sends each to the group; `run` runs a
    coroutine on the chat's event loop. Ctrl-C ends the session like /quit: every completed turn,
    and the message being answered, are already saved."""
    view = TerminalView(console, session.roster.names, show_directives=show_directives)
    introduce(session, console, continued, show_directives, smoke_test_model)
    try:
        while True:
            line = read_line()
            if line is None:
                break
            message = line.strip()
            if not message:
                continue
            if message.startswith("/"):
                if not handle_command(message, session, console):
                    break
                continue
            if echo:  # piped input: show what was said so the transcript reads in order
                console.print(f"[bold]You:[/bold] {escape(message)}")
            view.choosing()
            try:
                run(session.send(message, view))
            except MascotError as exc:  # a backend failure ends this round, not the session
                view.interrupted()
                session.count_failed_round()
                console.print(f"[red]error: {escape(str(exc))}[/red] [dim](your message is saved; send another or /quit)[/dim]")
            finally:
                view.done()
    except KeyboardInterrupt:
        view.interrupted()
        console.print("[yellow]interrupted[/yellow]")
    if not session.turns:
        console.print("[dim]nothing was said: no session file written[/dim]")
        return
    session.save()
    farewell(session, console)


def introduce(session: ChatSession, console: Console, continued: bool, show_directives: bool, smoke_test_model: bool = False) -> None:
    roster = session.roster
    console.print(f"[bold]mascot chat[/bold] with {escape(', '.join(roster.names))} [dim](roster {escape(roster.ident)})[/dim]")
    if smoke_test_model:
        console.print(f"[yellow]{escape(SMOKE_TEST_NOTICE)}[/yellow]")
    console.print(f"session: {session.path}", soft_wrap=True)  # unwrapped: paths are copied
    show_setting(session, console)
    if continued:
        console.print(f"[dim]continuing {session.num_rounds} earlier rounds:[/dim]")
        show_episode(console, session.to_episode(), None, roster.names, directives=show_directives)
        console.rule()
    console.print("[dim]Type a message; /help for commands, /quit or Ctrl-D to end.[/dim]")


def show_setting(session: ChatSession, console: Console, meeting_lines: int = 4) -> None:
    """What the group was told the conversation is about, if anything."""
    context = session.context
    if context.is_meeting:
        console.print(f"[bold]Meeting[/bold] {escape(context.meeting or '')}: {len(context.transcript)} transcript turns")
        for line in context.transcript[:meeting_lines]:
            console.print(f"  [dim]{escape(line.speaker)}: {escape(line.text)}[/dim]")
        if len(context.transcript) > meeting_lines:
            console.print("  [dim]...[/dim]")
        if context.query:
            console.print(f"[bold]Question:[/bold] {escape(context.query)}")
    elif context.situation:
        console.print(f"[bold]Situation:[/bold] {escape(context.situation)}")


def farewell(session: ChatSession, console: Console) -> None:
    c = session.counters
    console.print(
        f"session saved: {session.path} [dim](rounds {session.num_rounds}; director parse failures "
        f"{c.num_directive_parse_failures}, example copies {c.num_directive_example_copies}, random fallbacks {c.num_random_agent_fallbacks}, empty replies "
        f"{c.num_empty_responses}, failed rounds {c.num_generation_failures})[/dim]",
        soft_wrap=True,
    )


def handle_command(command: str, session: ChatSession, console: Console) -> bool:
    """Runs an in-chat command; False means end the session."""
    name = command.split()[0].lower()
    if name in ("/quit", "/exit", "/q"):
        return False
    if name == "/help":
        console.print(escape(HELP_TEXT))
    elif name == "/who":
        for persona in session.roster.personas:
            console.print(f"  [bold]{escape(persona.name)}[/bold]: {escape(persona.role)}")
    elif name == "/directive":
        show_last_directive(session, console)
    else:
        console.print(f"[yellow]unknown command {escape(name)}[/yellow] [dim](/help lists them)[/dim]")
    return True


def show_last_directive(session: ChatSession, console: Console) -> None:
    turn = session.last_directed_turn
    if turn is None or turn.directive is None:
        console.print("[dim]no directive yet: send a message first[/dim]")
        return
    d = turn.directive
    if turn.director_fallback:
        from mascot.dialogue.director import fallback_note

        console.print(f"[dim]({escape(fallback_note(bool(turn.director_copied_example)))})[/dim]")
    console.print(f"agent: {escape(d.agent_name)}\naction: {escape(d.action or '-')}\ntone: {escape(d.tone or '-')}")
    console.print("[dim]raw director output:[/dim]")
    console.print(escape(turn.directive_output or turn.director_raw_output or "(none)"), style="dim")  # a fallback keeps it apart


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(text)


class TerminalView:
    """Prints directives, and replies piece by piece as they stream."""

    def __init__(self, console: Console, names: list[str], *, show_directives: bool = False, shows_waiting: bool | None = None) -> None:
        self.console = console
        self.names = names
        self.show_directives = show_directives
        self.open_reply = False
        # The spinner line ("... is typing") only where a person watches: a pipe gets the replies alone.
        self.shows_waiting = console.is_terminal if shows_waiting is None else shows_waiting
        self._status: Status | None = None
        self._speaker: str | None = None  # whose reply is awaited; its label is printed with its first words
        self._wrapper: StreamWrapper | None = None

    # ---- waiting (the events the web app shows as its activity line)

    def choosing(self) -> None:
        """The group is deciding who answers: until the Director's pick is known."""
        self._wait(CHOOSING)

    def done(self) -> None:
        """The message's rounds are over."""
        self._stop_waiting()

    def _wait(self, text: str) -> None:
        if not self.shows_waiting:
            return
        if self._status is None:
            self._status = self.console.status(escape(text), spinner="dots")
            self._status.start()
        else:
            self._status.update(escape(text))

    def _stop_waiting(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    # ---- the round

    def directive(self, decision: DirectorDecision, round_id: int) -> None:
        if decision.fell_back:  # said as a fallback, never as the Director's instruction
            show_fallback(self.console, decision.directive.agent_name, getattr(decision, "copied_example", False))
            return
        if decision.parse_failed:
            self.console.print("  [dim](the Director's first answer could not be used; its corrected answer was used)[/dim]")
        if self.show_directives:
            show_directive(self.console, decision.directive)

    def reply_start(self, agent_name: str) -> None:
        self._speaker = agent_name
        self._wait(f"{agent_name} is typing\u2026")

    def _open_reply(self) -> None:
        """The speaker's label, once its first words are there; the words then wrap at the edge."""
        self._stop_waiting()
        name = self._speaker or ""
        colour = colour_for(name, self.names)
        self.console.print(f"[bold {colour}]{escape(name)}:[/bold {colour}] ", end="")
        width = self.console.width if self.console.is_terminal else sys.maxsize  # a pipe keeps each reply one line
        self._wrapper = StreamWrapper(width, column=cell_len(name) + 2)
        self.open_reply = True

    def reply_text(self, text: str) -> None:
        if not self.open_reply:
            self._open_reply()
        self._print_raw(self._wrapper.feed(text))  # type: ignore[union-attr]

    def _print_raw(self, text: str) -> None:
        if text:
            self.console.print(text, end="", markup=False, highlight=False, soft_wrap=True)

    def _close_reply(self) -> None:
        if self._wrapper is not None:
            self._print_raw(self._wrapper.finish())
            self._wrapper = None
        self.console.print()
        self.open_reply = False

    def reply_discarded(self, agent_name: str, shown: str) -> None:
        if self.open_reply:
            self._close_reply()
        self.console.print(
            f"  [dim](a reply that opened as someone else was discarded{': ' + escape(shown) if shown else ''}; asking {escape(agent_name)} again)[/dim]"
        )
        self._speaker = agent_name
        self._wait(f"{agent_name} is typing\u2026")

    def reply_end(self, turn: Turn, revised: bool) -> None:
        if not self.open_reply:
            self._open_reply()
            if not turn.response:
                self.console.print("[dim](no reply)[/dim]", end="")
        self._close_reply()
        if revised:
            self.console.print(f"  [dim](saved as: {escape(turn.response)})[/dim]")

    def round_start(self, round_id: int) -> None:
        self.choosing()

    def interrupted(self) -> None:
        """Ends a reply cut off halfway, so the next line starts clean."""
        self._stop_waiting()
        if self.open_reply:
            self._close_reply()
