"""MASCOT's vocabulary: the names and default sizes that several modules (and --help) share.

One declaration each: a settings class, a client, a validator and a help text import the name
from here, so that a new turn policy or a changed default is one line. This module imports
nothing, not even other mascot modules, so any module (however cheap it must stay) may read it.
"""

from __future__ import annotations

# ---- roles
DIRECTOR, SPEAKER, USER, JUDGE = "director", "speaker", "user", "judge"
DIALOGUE_ROLES = (DIRECTOR, SPEAKER, USER)  # the roles of a group conversation
ROLES = (*DIALOGUE_ROLES, JUDGE)  # every role a run may name an endpoint for
# The safety screen's model stage: an endpoint only when given (never the shared one, never a local
# model), kept out of ROLES so that runs without it record and digest what they always did.
SAFETY = "safety"
SAFETY_MODEL_SCOPES = ("unsure", "all")  # the messages the model stage is asked about
SAFETY_MODEL_SCOPE_HELP = (
    "Messages the safety screen's model stage (--safety-server-url) is asked about: unsure (those the rules and the embedding "
    "check leave unsure) or all (every message they do not flag: for a capable served model)."
)
REPETITION_PENALTY_HELP = (
    "Repetition penalty of the Speakers' replies (vLLM and the local model; 1.0: off): tokens already in the prompt or the reply "
    "are made less likely; 1.15 ends the loops of small models (docs/judging_and_metrics.md)."
)

# ---- how a conversation unfolds
MULTIAGENTESC = "multiagentesc"  # the MultiAgentESC baseline: strategists vote, then one writes the reply
TURN_POLICIES = ("director", "round-robin", "random", MULTIAGENTESC)
# Versions of the Director, Speaker and user prompts (mascot.dialogue.prompts); the default is the
# one the conversation checks (mascot.metrics.conversation) measured better (docs/judging_and_metrics.md).
PROMPT_VERSIONS = ("v1", "v2")
PROMPT_VERSION = "v2"
FIRST_PROMPT_VERSION = PROMPT_VERSIONS[0]  # what runs recorded before prompts had versions used
MAX_CONSECUTIVE_TURNS = 2
PROMPT_FAMILIES = ("persona", "zero-shot", "zero-shot-cot", "few-shot", "few-shot-cot")
GENERATION_MODES = ("directed", "independent", "branching", "tree")
TREE_MAX_CONVERSATIONS = 81  # tree mode: roster size ** rounds conversations per context, at most this many
# Branching: the directives each decision point is continued with. director: --num-candidates
# sampled from the Director; roster: one per companion, the Director writing each one's directive.
BRANCH_PROPOSALS = ("director", "roster")
GENERATE_MODES = ("group", "individual")  # `mascot generate --mode`
SAFETY_MODES = ("auto", "on", "off")
# Simulated-user profile sets (mascot.rosters.PROFILE_SETS: one data file each); Big Five is the
# set a profile name is looked up in when no set is named.
USER_PROFILE_SETS = ("big_five", "mbti")
DEFAULT_USER_PROFILE_SET = "big_five"

# ---- judging
JUDGE_SCORING_MODES = ("auto", "logprobs", "json")
# Who serves a --judge model: an OpenAI-compatible server (vllm is the same), or a hosted API.
JUDGE_PROVIDERS = ("openai-compatible", "vllm", "openai", "anthropic", "gemini")
PROVIDER_HELP = "openai-compatible (vllm) | openai | anthropic | gemini, for --judge."
DEFAULT_RUBRIC_VERSION = "paper_v2"  # paper_v1's prompts, reported under the names the paper uses
THINKING_CHOICES = ("on", "off", "default")  # a role's reasoning mode; default: the server's
PLUGIN_JUDGE_HELP = " A judge named python:PATH_OR_MODULE:FUNCTION is a Python function (e.g. python:mascot.judge.rules:persona_rules)."
JUDGES_FILE_HELP = "YAML list of judges: name, model, url, provider, api_key_env (model: python:PATH_OR_MODULE:FUNCTION for a function)."

# ---- models
DEFAULT_LOCAL_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the embedded model, in-process

# ---- sizes
TRANSCRIPT_WINDOW = 1500  # QMSum: estimated tokens of meeting transcript a context carries
MAX_TOKENS = 160  # longest Speaker reply
USER_MAX_TOKENS = 120  # longest simulated-user reply
JUDGE_MAX_TOKENS = 512
REASONING_ALLOWANCE = 1024  # extra completion tokens for a role that thinks
NUM_CANDIDATES = 8
NUM_EPISODES = 2  # episodes per context in independent mode
MAX_CONCURRENT_EPISODES = 64  # contexts (group) or queries (Stage 1) in flight at once
SCORE_MARGIN = 0.5
SEED = 42
TEMPERATURE = 0.7

# ---- client limits (mascot.settings_groups.ClientLimits)
MAX_IN_FLIGHT = 64  # requests in flight per endpoint
REQUEST_TIMEOUT_S = 120.0
RETRY_BUDGET_S = 60.0  # rides out a server restart of about 30 s
MAX_RETRIES = 10
MAX_STOP_STRINGS = 4  # stock vLLM refuses more than 4
LOCAL_BATCH_SIZE = 32  # rows decoded together: on 2 CPU cores 32 gives 2.8x the tokens a second of 8 (benchmarks/local_batching.py)
