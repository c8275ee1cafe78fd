"""The provider registry: one place builds every client, by backend kind, with the role tag on
every request; the llm modules import in one direction only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from mascot.errors import MascotError
from mascot.llm import providers
from mascot.llm.base import BACKEND_KINDS, ChatRequest
from mascot.llm.http import HTTPClient
from mascot.llm.providers import RoleEndpoint, build_backends, build_client
from mascot.settings_groups import ClientLimits
from mascot.testing.players import stub_responder
from mascot.testing.scripted import ScriptedClient

SRC = Path(__file__).resolve().parents[1] / "src"
LAYERS = {"base": 0, "clients": 1, "providers": 2, "routing": 3}


def mascot_imports(path: Path) -> set[str]:
    """Every mascot module a file imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mascot"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("mascot"))
    return found


def module_graph(*packages: str) -> dict[str, set[str]]:
    modules = {}
    for package in packages:
        for path in (SRC / package.replace(".", "/")).glob("*.py"):
            name = f"{package}.{path.stem}" if path.stem != "__init__" else package
            modules[name] = path
    return {name: {m for m in mascot_imports(path) if m in modules and m != name} for name, path in modules.items()}


def layer(module: str) -> int:
    short = module.rsplit(".", 1)[-1]
    return LAYERS.get(short, LAYERS["clients"])


def test_llm_and_testing_modules_import_in_one_direction_without_cycles():
    graph = module_graph("mascot.llm", "mascot.testing")
    for module, imported in graph.items():
        for target in imported:
            assert layer(target) <= layer(module), f"{module} imports {target}: against base <- clients <- providers <- routing"
    # no cycle, deferred imports included
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in graph[node]:
            assert state.get(target) != 1, f"import cycle: {' -> '.join(path + [target])}"
            if target not in state:
                visit(target, path + [target])
        state[node] = 2

    for module in graph:
        if module not in state:
            visit(module, [module])


def test_each_kind_has_a_provider_and_unknown_kinds_are_one_line_errors():
    assert set(BACKEND_KINDS) <= set(providers._FACTORIES)
    with pytest.raises(MascotError, match="unknown backend kind 'mystery'"):
        RoleEndpoint("speaker", "m", kind="mystery")
    with pytest.raises(MascotError, match="needs a server URL"):
        build_client(RoleEndpoint("speaker", "m", kind="openai-compatible"))


def test_kinds_default_from_the_url_and_records_keep_their_backend_names():
    assert RoleEndpoint("speaker", "m", "http://127.0.0.1:1/v1").kind == "openai-compatible"
    assert RoleEndpoint("speaker", "m").kind == "local"
    assert [RoleEndpoint("r", "m", "http://x/v1", kind=k).backend for k in ("openai-compatible", "anthropic", "gemini")] == ["http"] * 3
    assert RoleEndpoint("r", "m", kind="scripted").backend == "scripted"


@pytest.mark.parametrize("kind, variable", [("anthropic", "ANTHROPIC_API_KEY"), ("gemini", "GOOGLE_API_KEY")])
def test_hosted_providers_are_built_by_the_registry(monkeypatch, kind, variable):
    import mascot.llm.hosted as hosted

    built = []

    class Recorder(ScriptedClient):
        def __init__(self, model, **kwargs):
            super().__init__(default="ok", model=model)
            built.append((model, kwargs))

    monkeypatch.setattr(hosted, "AnthropicClient" if kind == "anthropic" else "GeminiClient", Recorder)
    client = build_client(RoleEndpoint("judge", "big-model", "https://api.example", api_key_env="", kind=kind), ClientLimits(max_in_flight=3))
    assert isinstance(client, Recorder)
    assert built[0][0] == "big-model" and built[0][1]["api_key_env"] == variable and built[0][1]["max_in_flight"] == 3


async def test_scripted_kind_plays_each_role_by_the_tag_its_metered_client_stamps():
    endpoints = {
        "director": RoleEndpoint("director", "scripted-model", kind="scripted"),
        "big-judge": RoleEndpoint("big-judge", "scripted-model", kind="scripted", role_tag="judge"),
    }
    backends = build_backends(endpoints)
    assert backends["director"].inner is backends["big-judge"].inner  # same endpoint: one client
    judge_prompt = [{"role": "system", "content": "[empathy] Empathy: ..."}, {"role": "user", "content": "a reply"}]
    reply = await backends["big-judge"].chat(ChatRequest(messages=judge_prompt, role="director"))
    assert '"empathy"' in reply.text  # answered as the judge the endpoint plays, whatever the caller said
    inner = backends["big-judge"].inner
    assert [c.role for c in inner.calls] == ["judge"]
    assert set(backends.meter.by_role) == {"big-judge"}  # usage is kept under the role's own name
    await backends.aclose()


async def test_role_tags_travel_to_the_server_as_a_header(stub):
    server = stub(responder=stub_responder)
    url = server.url
    roster = "Roster:\n- The Anchor: steady\n- The Beacon: hopeful"
    endpoints = {role: RoleEndpoint(role, "stub-model", url) for role in ("director", "speaker")}
    backends = build_backends(endpoints)
    try:
        directive = await backends["director"].chat(ChatRequest(messages=[{"role": "system", "content": roster}, {"role": "user", "content": "hi"}]))
        pieces = [
            p
            async for p in backends["speaker"].stream(
                ChatRequest(messages=[{"role": "system", "content": "You are The Anchor, the steady one."}, {"role": "user", "content": "hi"}])
            )
        ]
    finally:
        await backends.aclose()
    assert server.stats.roles == ["director", "speaker"]
    assert "<directive>" in directive.text and "".join(pieces).startswith("As The Anchor:")
    assert all("role" not in body for body in server.stats.bodies)  # the body stays what real servers accept


async def test_an_untagged_request_sends_no_header(stub):
    server = stub()
    client = HTTPClient(server.url, "stub-model")
    try:
        await client.chat(ChatRequest(messages=[{"role": "user", "content": "hi"}]))
    finally:
        await client.aclose()
    assert server.stats.roles == ["default"]
