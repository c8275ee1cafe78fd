"""`mascot generate`: Stage-1 candidates (`--mode individual`) and group episodes (`--mode group`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mascot.cli import app
from mascot.cli import options as o
from mascot.cli.dryrun import DryRunOption
from mascot.dialogue.reasoning import DEFAULT_REASONING_ALLOWANCE
from mascot.errors import MascotError

MODES = ("group", "individual")
GENERATION_MODES = ("directed", "independent", "branching")


@app.command(no_args_is_help=True)
def generate(
    mode: Annotated[str, typer.Option("--mode", help="group: multi-agent episodes; individual: K candidates per persona + preference pairs.")] = "group",
    dataset: o.Dataset = "ESConv",
    data_file: o.DataFile = None,
    split: o.Split = "test",
    limit: o.Limit = None,
    token_budget: o.TokenBudget = o.DEFAULT_TOKEN_BUDGET,
    roster: Annotated[Optional[str], typer.Option("--roster", help="Roster name or file (default: the dataset's roster).")] = None,
    generation_mode: Annotated[str, typer.Option("--generation-mode", help="directed | independent | branching.")] = "directed",
    num_episodes: Annotated[int, typer.Option("--num-episodes", help="Episodes per context (independent mode).")] = 2,
    num_turns: Annotated[int, typer.Option("--num-turns", help="Rounds per episode (one round = Director -> Speaker -> maybe User).")] = 5,
    num_candidates: Annotated[int, typer.Option("--num-candidates", help="Directives per decision point (branching) or replies per persona (individual).")] = 8,
    user_response_probability: Annotated[float, typer.Option("--user-response-probability", help="Chance the simulated user speaks after a round.")] = 0.5,
    enable_user_simulation: Annotated[bool, typer.Option("--enable-user-simulation/--no-user-simulation", help="Simulate the user between rounds.")] = True,
    enable_big_five: Annotated[bool, typer.Option("--enable-big-five", help="Give simulated users Big Five profiles (persona_set big5).")] = False,
    user_big_five_profile: Annotated[Optional[str], typer.Option("--user-big-five-profile", help='One profile for every user, e.g. "High Openness".')] = None,
    turn_policy: Annotated[str, typer.Option("--turn-policy", help="Who speaks next: director | round-robin | random | multiagentesc (the MultiAgentESC baseline).")] = "director",
    prompt_family: Annotated[str, typer.Option("--prompt-family", help="Speaker prompts: persona (MASCOT's) | zero-shot | zero-shot-cot | few-shot-cot (prompting baselines).")] = "persona",
    score_margin: Annotated[float, typer.Option("--score-margin", help="Minimum judged score gap for a preference pair.")] = 0.5,
    system: Annotated[str, typer.Option("--system", help="System label written to metadata (mascot, mascot-g, mascot-i, a baseline name).")] = "mascot",
    temperature: Annotated[float, typer.Option("--temperature", help="Sampling temperature of Speakers and User.")] = 0.7,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Longest reply in tokens.")] = 160,
    reasoning_allowance: Annotated[
        int, typer.Option("--reasoning-allowance", help="Extra tokens a role that thinks (its --thinking flag on) may spend on reasoning before its reply.")
    ] = DEFAULT_REASONING_ALLOWANCE,
    max_concurrent_episodes: Annotated[int, typer.Option("--max-concurrent-episodes", help="Contexts in flight at once.")] = 64,
    seed: o.Seed = 42,
    model_name: o.ModelName = None,
    vllm_server_url: o.VllmServerUrl = None,
    director_server_url: o.DirectorServerUrl = None,
    speaker_server_url: o.SpeakerServerUrl = None,
    user_server_url: o.UserServerUrl = None,
    judge_server_url: o.JudgeServerUrl = None,
    director_model: o.DirectorModel = None,
    speaker_model: o.SpeakerModel = None,
    user_model: o.UserModel = None,
    judge_model: o.JudgeModel = None,
    director_adapter: o.DirectorAdapter = None,
    speaker_adapter: o.SpeakerAdapter = None,
    share_model: o.ShareModel = False,
    max_in_flight: o.MaxInFlight = 64,
    request_timeout: o.RequestTimeout = 120.0,
    retry_budget: o.RetryBudget = 60.0,
    max_stop_strings: o.MaxStopStrings = 4,
    extra_body: o.ExtraBody = None,
    director_extra_body: o.DirectorExtraBody = None,
    speaker_extra_body: o.SpeakerExtraBody = None,
    user_extra_body: o.UserExtraBody = None,
    judge_extra_body: o.JudgeExtraBody = None,
    director_thinking: o.DirectorThinking = "default",
    speaker_thinking: o.SpeakerThinking = "default",
    user_thinking: o.UserThinking = "default",
    judge_thinking: o.JudgeThinking = "default",
    judge_max_tokens: Annotated[int, typer.Option("--judge-max-tokens", help="Longest judge reply in tokens (individual mode).")] = 512,
    director_max_tokens: Annotated[Optional[int], typer.Option("--director-max-tokens", help="Longest Director reply in tokens (default: --max-tokens).")] = None,
    output_dir: o.OutputDir = Path("data/rl"),
    resume: o.Resume = False,
    overwrite: o.Overwrite = False,
    strict: o.Strict = False,
    trace_role_calls: o.TraceRoleCalls = False,
    dry_run: DryRunOption = False,
) -> None:
    """Generate Stage-1 candidates and pairs, or group episodes, into OUTPUT_DIR/<mode>_<dataset>_<model>/."""
    from mascot.data import canonical_dataset_name
    from mascot.llm.routing import EndpointOptions

    if mode not in MODES:
        raise MascotError(f"unknown --mode {mode!r}: choose one of {', '.join(MODES)}")
    dataset = canonical_dataset_name(dataset)
    endpoints = EndpointOptions(
        model_name=model_name,
        vllm_server_url=vllm_server_url,
        director_server_url=director_server_url,
        speaker_server_url=speaker_server_url,
        user_server_url=user_server_url,
        judge_server_url=judge_server_url,
        director_model=director_model,
        speaker_model=speaker_model,
        user_model=user_model,
        judge_model=judge_model,
        director_adapter=director_adapter,
        speaker_adapter=speaker_adapter,
        share_model=share_model,
        max_in_flight=max_in_flight,
        **o.client_settings(locals()),
    )
    if mode == "individual":
        from mascot.cli.individual import run_individual_command

        if dry_run:
            _dry_run_individual(locals())
            return
        run_individual_command(
            dataset=dataset,
            data_file=data_file,
            split=split,
            limit=limit,
            token_budget=token_budget,
            roster=roster,
            num_candidates=num_candidates,
            score_margin=score_margin,
            temperature=temperature,
            max_tokens=max_tokens,
            judge_max_tokens=judge_max_tokens,
            seed=seed,
            endpoints=endpoints,
            output_dir=output_dir,
            resume=resume,
            overwrite=overwrite,
            strict=strict,
            trace_role_calls=trace_role_calls,
            reasoning_allowance=reasoning_allowance,
        )
        return
    _generate_group(**locals())


def _generate_group(**flags) -> None:
    from mascot.dialogue.engine import EngineSettings
    from mascot.dialogue.policies import TURN_POLICIES
    from mascot.dialogue.reasoning import thinking_for
    from mascot.dialogue.run import GroupGenerationConfig, run_group_generation
    from mascot.rosters import big_five_profile

    if flags["generation_mode"] not in GENERATION_MODES:
        raise MascotError(f"unknown --generation-mode {flags['generation_mode']!r}: choose one of {', '.join(GENERATION_MODES)}")
    if flags["turn_policy"] not in TURN_POLICIES:
        raise MascotError(f"unknown --turn-policy {flags['turn_policy']!r}: choose one of {', '.join(TURN_POLICIES)}")
    from mascot.dialogue.prompt_families import check_prompt_family

    check_prompt_family(flags["prompt_family"])
    if not 0.0 <= flags["user_response_probability"] <= 1.0:
        raise MascotError("--user-response-probability must lie between 0 and 1")
    if flags["token_budget"] < 1:
        raise MascotError("--token-budget must be at least 1")
    if flags["num_turns"] < 1 or flags["num_candidates"] < 1 or flags["num_episodes"] < 1:
        raise MascotError("--num-turns, --num-candidates and --num-episodes must be at least 1")
    if flags["user_big_five_profile"]:
        big_five_profile(flags["user_big_five_profile"])  # fail early on a typo
    settings = EngineSettings(
        num_turns=flags["num_turns"],
        generation_mode=flags["generation_mode"],
        num_episodes=flags["num_episodes"],
        num_candidates=flags["num_candidates"],
        user_response_probability=flags["user_response_probability"],
        enable_user_simulation=flags["enable_user_simulation"],
        enable_big_five=flags["enable_big_five"] or bool(flags["user_big_five_profile"]),
        user_big_five_profile=flags["user_big_five_profile"],
        turn_policy=flags["turn_policy"],
        prompt_family=flags["prompt_family"],
        seed=flags["seed"],
        max_concurrent_episodes=flags["max_concurrent_episodes"],
        system=flags["system"],
        temperature=flags["temperature"],
        director_temperature=flags["temperature"],
        max_tokens=flags["max_tokens"],
        director_max_tokens=flags["director_max_tokens"],
        speaker_think=thinking_for(flags["endpoints"], "speaker"),
        director_thinking=thinking_for(flags["endpoints"], "director"),
        user_thinking=thinking_for(flags["endpoints"], "user"),
        reasoning_allowance=flags["reasoning_allowance"],
    )
    group = GroupGenerationConfig(
        dataset=flags["dataset"],
        data_file=flags["data_file"],
        split=flags["split"],
        limit=flags["limit"],
        transcript_window=flags["token_budget"],
        roster=flags["roster"],
        engine=settings,
        endpoints=flags["endpoints"],
        score_margin=flags["score_margin"],
        output_dir=flags["output_dir"],
        resume=flags["resume"],
        overwrite=flags["overwrite"],
        strict=flags["strict"],
        trace_role_calls=flags["trace_role_calls"],
    )
    if flags["dry_run"]:
        _dry_run_group(group)
        return
    run_group_generation(group, command="mascot generate --mode group")


def _dry_run_group(group) -> None:
    from dataclasses import asdict

    from mascot.cli.dryrun import dry_run_generation
    from mascot.dialogue.run import roles_needed, run_dir_for

    dry_run_generation(
        "group",
        dataset=group.dataset,
        data_file=group.data_file,
        split=group.split,
        limit=group.limit,
        roster=group.roster,
        endpoints=group.endpoints,
        roles=roles_needed(group.engine),
        run_dir=run_dir_for(group),
        resume=group.resume,
        overwrite=group.overwrite,
        settings=asdict(group.engine),
    )


def _dry_run_individual(flags: dict) -> None:
    from mascot.cli.dryrun import dry_run_generation
    from mascot.cli.individual import individual_run_dir
    from mascot.llm.routing import DEFAULT_LOCAL_MODEL, resolve_roles

    if flags["num_candidates"] < 2:
        raise MascotError("--num-candidates must be at least 2 to make preference pairs")
    speaker = resolve_roles(flags["endpoints"], ("speaker",))["speaker"].model or DEFAULT_LOCAL_MODEL
    keys = ("num_candidates", "score_margin", "temperature", "max_tokens", "seed")
    dry_run_generation(
        "individual",
        dataset=flags["dataset"],
        data_file=flags["data_file"],
        split=flags["split"],
        limit=flags["limit"],
        roster=flags["roster"],
        endpoints=flags["endpoints"],
        roles=("speaker", "judge"),
        run_dir=individual_run_dir(flags["output_dir"], flags["dataset"], speaker),
        resume=flags["resume"],
        overwrite=flags["overwrite"],
        settings={k: flags[k] for k in keys},
    )
