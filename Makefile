# encdec: the two commands of the README.
#   make test   set up .venv (torch 2.13.0 CPU first, then the project) and run the test suite offline
#   make demo   set up .venv and train + translate with small models on the built-in task
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
TORCH_VERSION ?= 2.13.0
STAMP  := $(VENV)/.installed

export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TRANSFORMERS_NO_ADVISORY_WARNINGS := 1

.PHONY: venv test demo lint benchmark clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch is installed first and pinned: a bare `torch` requirement would pull a CUDA build
$(STAMP): $(PY) pyproject.toml
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet "torch==$(TORCH_VERSION)"
	$(PIP) install --quiet -e ".[dev,ct2,serve]"
	touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests scripts benchmarks

demo: $(STAMP)
	$(PY) -m encdec demo

benchmark: $(STAMP)
	$(PY) scripts/benchmark.py

clean:
	rm -rf $(VENV) runs .pytest_cache
