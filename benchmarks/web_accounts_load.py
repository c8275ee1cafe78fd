"""`mascot web --accounts` under load: N accounts (default 200), each logging in, starting a
conversation and sending M messages (default 3), against the stub backend, served by W server
processes (default 2) sharing one database (SQLite, or `--postgres`: a throwaway PostgreSQL
cluster from Debian's package). Then a server process is killed mid-reply.

Reports: every message answered (its stream ended with "done", no error), every turn stored
once (each conversation's turns in the database are exactly 0..K-1), p50/p95 time to the first
token and to the end of each message, logins and messages per second; and for the kill: the
stream cut, the turns saved before it still stored, and how long until the person can send again.

    python benchmarks/web_accounts_load.py                   # SQLite, 200 accounts x 3 messages, 2 processes
    python benchmarks/web_accounts_load.py --postgres --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text

from mascot.testing.postgres import create_database, free_port, throwaway_cluster
from mascot.testing.stub_server import start_stub_server_process
from mascot.web.accounts.database import make_engine, open_database
from mascot.web.accounts.repository import Accounts

PASSWORD = "benchmark password 1"


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))] if ordered else float("nan")


def create_accounts(url: str, count: int) -> list[str]:
    """Accounts made beforehand (their Argon2 hashes in 2 threads), so that the load is logins and messages."""
    _, factory = open_database(url)
    accounts = Accounts(factory)
    names = [f"person{i:04d}" for i in range(count)]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda name: accounts.create_person(name, PASSWORD), names))
    return names


def start_web(url: str, stub_url: str, folder: Path, args) -> tuple[subprocess.Popen, str]:
    port = free_port()
    command = [sys.executable, "-m", "mascot", "web", "--accounts", "--signup", "closed", "--workers", str(args.workers), "--port", str(port),
               "--vllm-server-url", stub_url, "--model-name", "stub-model", "--session-dir", str(folder), "--database-url", url,
               "--message-limit", "100000", "--rounds-per-message", str(args.rounds), "--safety", args.safety]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=open(folder / "web.log", "w"), start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if ready(base, args.workers):
            return server, base
        if server.poll() is not None:
            raise RuntimeError(f"mascot web exited: {(folder / 'web.log').read_text()[-2000:]}")
        time.sleep(0.5)
    raise RuntimeError("mascot web did not start in 300 s")


def ready(base: str, workers: int) -> bool:
    """True once the login page answers (each worker answers once it has started)."""
    try:
        return all(httpx.get(f"{base}/login", timeout=2).status_code == 200 for _ in range(workers * 2))
    except httpx.HTTPError:
        return False


class Person:
    def __init__(self, base: str, name: str) -> None:
        self.client = httpx.AsyncClient(base_url=base, timeout=120)
        self.name = name

    @property
    def csrf(self) -> str:
        return self.client.cookies.get("mascot_csrf", "")

    async def login(self) -> float:
        started = time.perf_counter()
        await self.client.get("/login")
        response = await self.client.post("/login", data={"username": self.name, "password": PASSWORD, "csrf_token": self.csrf})
        if response.status_code != 303:
            raise RuntimeError(f"login of {self.name}: {response.status_code} {response.text[:200]}")
        return time.perf_counter() - started

    async def start(self) -> str:
        response = await self.client.post("/sessions", data={"roster": "emotional_support", "csrf_token": self.csrf})
        return response.headers["location"].rsplit("/", 1)[1]

    async def say(self, session_id: str, message: str, on_event=None) -> dict:
        """Sends one message; returns its timings and how its stream ended."""
        started, first, kinds = time.perf_counter(), None, []
        try:
            async with self.client.stream("POST", f"/api/sessions/{session_id}/messages", json={"text": message},
                                          headers={"x-csrf-token": self.csrf}) as response:  # fmt: skip
                if response.status_code != 200:
                    return {"status": response.status_code, "kinds": [], "detail": (await response.aread()).decode()[:200]}
                async for line in response.aiter_lines():
                    if line.startswith("event: "):
                        kind = line[7:]
                        kinds.append(kind)
                        if kind == "token" and first is None:
                            first = time.perf_counter() - started
                        if on_event is not None:
                            on_event(kind)
        except httpx.HTTPError as exc:
            return {"status": 200, "kinds": kinds, "cut": type(exc).__name__}
        return {"status": 200, "kinds": kinds, "ttft": first, "total": time.perf_counter() - started}

    async def close(self) -> None:
        await self.client.aclose()


async def one_person(base: str, name: str, messages: int, gate: asyncio.Semaphore, results: dict, arrives_s: float = 0.0) -> None:
    await asyncio.sleep(arrives_s)
    async with gate:
        person = Person(base, name)
        try:
            results["logins"].append(await person.login())
            session_id = await person.start()
            results["sessions"].append(session_id)
            for number in range(messages):
                results["messages"].append(await person.say(session_id, f"message {number} from {name}"))
        finally:
            await person.close()


async def load(base: str, names: list[str], args) -> dict:
    results: dict = {"logins": [], "sessions": [], "messages": []}
    gate = asyncio.Semaphore(args.concurrency)
    started = time.perf_counter()
    spacing = args.arrival_s / max(1, len(names))
    await asyncio.gather(*(one_person(base, name, args.messages, gate, results, i * spacing) for i, name in enumerate(names)))
    results["wall_s"] = time.perf_counter() - started
    return results


def stored_turns(url: str, session_ids: list[str]) -> dict[str, list[int]]:
    engine = make_engine(url) if url.startswith("sqlite") else create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT conversation_id, turn_idx FROM turns ORDER BY conversation_id, turn_idx")).all()
    engine.dispose()
    found: dict[str, list[int]] = {session_id: [] for session_id in session_ids}
    for conversation, index in rows:
        found.setdefault(conversation, []).append(index)
    return found


def worker_pids(server: subprocess.Popen) -> list[int]:
    done = subprocess.run(["pgrep", "-P", str(server.pid)], capture_output=True, text=True)
    return [int(pid) for pid in done.stdout.split()]


async def kill_mid_reply(base: str, server: subprocess.Popen, url: str, name: str, args) -> dict:
    """Kills every worker process once the first round of a message has ended (its turn saved) and
    the next is under way; the supervisor starts new ones."""
    person = Person(base, name)
    await person.login()
    session_id = await person.start()
    ends = 0

    def on_event(kind: str) -> None:
        nonlocal ends
        if kind == "end":
            ends += 1
            if ends == 1:
                for pid in worker_pids(server):
                    os.kill(pid, signal.SIGKILL)

    killed_at = time.perf_counter()
    reply = await person.say(session_id, "a message whose reply is cut", on_event)
    cut = "done" not in reply["kinds"]
    kept = stored_turns(url, [session_id])[session_id]
    while not ready(base, 1):
        await asyncio.sleep(0.5)
    restarted_s = time.perf_counter() - killed_at
    person2 = Person(base, name)  # the page reloaded: logged in still (the cookie's login is in the database)
    person2.client.cookies = person.client.cookies
    await person2.client.get("/login")
    statuses = []
    while True:
        again = await person2.say(session_id, "sent again")
        statuses.append(again["status"])
        if again["status"] != 409 or time.perf_counter() - killed_at > 120:
            break
        await asyncio.sleep(1)
    await person.close()
    await person2.close()
    return {"stream_cut": cut, "events_before_cut": reply["kinds"], "turns_stored_after_kill": kept, "workers_back_s": round(restarted_s, 1),
            "send_again_s": round(time.perf_counter() - killed_at, 1), "send_again_status": again["status"], "send_again_done": "done" in again["kinds"],
            "refused_meanwhile_409": statuses.count(409), "turns_after_sending_again": stored_turns(url, [session_id])[session_id]}  # fmt: skip


def summary(results: dict, turns: dict[str, list[int]], args) -> dict:
    messages = results["messages"]
    answered = [m for m in messages if m["status"] == 200 and "done" in m["kinds"] and "error" not in m["kinds"]]
    per_conversation = args.messages * (1 + args.rounds)
    whole = [s for s in results["sessions"] if turns.get(s) == list(range(per_conversation))]
    ttft, total = [m["ttft"] for m in answered if m.get("ttft")], [m["total"] for m in answered]
    wall = results["wall_s"]
    requests = len(results["logins"]) * 2 + len(results["sessions"]) + len(messages)
    return {
        "accounts": args.accounts, "messages_sent": len(messages), "messages_answered": len(answered),
        "conversations_with_every_turn_stored_once": f"{len(whole)}/{len(results['sessions'])}",
        "turns_stored": sum(len(turns.get(s, [])) for s in results["sessions"]),
        "ttft_p50_ms": round(1000 * statistics.median(ttft)), "ttft_p95_ms": round(1000 * percentile(ttft, 0.95)),
        "reply_p50_ms": round(1000 * statistics.median(total)), "reply_p95_ms": round(1000 * percentile(total, 0.95)),
        "login_p50_ms": round(1000 * statistics.median(results["logins"])), "login_p95_ms": round(1000 * percentile(results["logins"], 0.95)),
        "wall_s": round(wall, 1), "requests_per_s": round(requests / wall, 1), "messages_per_s": round(len(messages) / wall, 1),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--accounts", type=int, default=200)
    parser.add_argument("--messages", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="companion replies per message (--rounds-per-message)")
    parser.add_argument("--concurrency", type=int, default=200, help="people active at once")
    parser.add_argument("--arrival-s", type=float, default=0.0, help="people arrive evenly over this many seconds (0: all at once)")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="the stub backend's latency per request")
    parser.add_argument("--safety", default="off", help="the app's --safety (off: the screen's own cost is measured elsewhere)")
    parser.add_argument("--postgres", action="store_true", help="a throwaway PostgreSQL cluster instead of SQLite")
    parser.add_argument("--no-kill", action="store_true", help="skip killing a server process mid-reply")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    with ExitStack() as stack, tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        url = (
            create_database(stack.enter_context(throwaway_cluster(max_connections=300)), "load")
            if args.postgres
            else f"sqlite:///{folder / 'mascot.db'}"
        )
        stub = stack.enter_context(start_stub_server_process(latency_ms=args.latency_ms, responder="mascot.testing.players:stub_responder"))
        names = create_accounts(url, args.accounts + 1)
        server, base = start_web(url, stub.url, folder, args)
        stack.callback(lambda: os.killpg(server.pid, signal.SIGTERM))
        print(f"{args.accounts} accounts x {args.messages} messages, {args.workers} processes, {'PostgreSQL' if args.postgres else 'SQLite'}, "
              f"stub latency {args.latency_ms:g} ms, {args.rounds} replies per message, arriving over {args.arrival_s:g} s")  # fmt: skip
        results = asyncio.run(load(base, names[:-1], args))
        figures = {
            "database": "postgresql" if args.postgres else "sqlite",
            "workers": args.workers,
            "arrival_s": args.arrival_s,
            **summary(results, stored_turns(url, results["sessions"]), args),
        }
        if not args.no_kill:
            figures["kill_mid_reply"] = asyncio.run(kill_mid_reply(base, server, url, names[-1], args))
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
