# encdec: the two commands of the README.
#   make test   set up .venv (torch 2.13.0 CPU first, then the project) and run the test suite offline
#   make demo   set up .venv and train + translate with small models on the built-in task
#   make web    build the browser runtime of `encdec export --format web` (Node.js and npm; `make test` builds it)
# A .venv where the project is already installed (by hand, as the README's Install section says) is used as it is.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
TORCH_VERSION ?= 2.13.0
STAMP  := $(VENV)/.installed
# the optional extras of pyproject.toml that the tests need
EXTRAS ?= dev,ct2,onnx,serve,peft
# pytest-xdist workers for `make test` (this project's machine has 2 cores); each test file runs whole on one worker
# (--dist loadfile), so a file's module fixtures are built once; conftest.built_once shares the session ones
TEST_WORKERS ?= 2

export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TRANSFORMERS_NO_ADVISORY_WARNINGS := 1

# The browser runtime (src/encdec/ship/web_export.py): npm ci installs web/package-lock.json's packages (pinned by
# version and integrity hash; no install scripts run), esbuild bundles them into package data. Built, never committed.
WEB_RUNTIME := src/encdec/ship/web_runtime/web-runtime.json
# The official Node.js clients the tests run against `encdec serve` (deepl-node), pinned by their lockfile
NODE_CLIENTS := tests/node_clients/node_modules/.package-lock.json

.PHONY: venv test demo lint benchmark clean web node-clients

$(PY):
	$(PYTHON) -m venv $(VENV)

# Whether $(VENV) already holds what the install below puts there (a project installed by hand, as the README's
# Install section says): this checkout's encdec, editable (src/ is what runs), every requirement of pyproject.toml's
# dependencies and of the extras in $(EXTRAS) installed at a version that satisfies it, and torch importable.
# It exits 1 with one line saying what is missing (Python 3.10 has no tomllib: there it always says so).
define INSTALL_CHECK
import importlib.metadata as metadata
import importlib.util
import os
import pathlib
import sys


def missing():
    try:
        import tomllib
        from packaging.requirements import Requirement
    except ImportError as error:
        return f"{error.name} (to read pyproject.toml)"
    spec = importlib.util.find_spec("encdec")
    if spec is None or pathlib.Path(spec.origin).resolve().parent.parent != pathlib.Path("src").resolve():
        return "encdec installed from this checkout (pip install -e .)"
    project = tomllib.loads(pathlib.Path("pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    for line in project["dependencies"] + [line for name in os.environ["EXTRAS"].split(",") for line in extras[name]]:
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        try:
            version = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            return line
        if not requirement.specifier.contains(version, prereleases=True):
            return f"{line} (found {version})"
    try:
        import torch  # noqa: F401
    except Exception as error:
        return f"an importable torch ({error})"
    return None


need = missing()
if need:
    sys.exit(f"installing into the venv, which lacks {need}")
endef
export INSTALL_CHECK

# A venv without a stamp that passes INSTALL_CHECK is only stamped; otherwise, and whenever pyproject.toml is newer
# than the stamp (the requirements may have changed; pip is quick when they are met), the project is installed.
# torch is installed first and pinned: a bare `torch` requirement would pull a CUDA build.
$(STAMP): $(PY) pyproject.toml
	@if [ ! -e $@ ] && EXTRAS=$(EXTRAS) $(PY) -c "$$INSTALL_CHECK"; then \
		echo "using the existing install in $(VENV)"; \
	else \
		set -ex; \
		$(PIP) install --quiet --upgrade pip; \
		$(PIP) install --quiet "torch==$(TORCH_VERSION)"; \
		$(PIP) install --quiet -e ".[$(EXTRAS)]"; \
	fi
	@touch $@

venv: $(STAMP)

$(WEB_RUNTIME): web/package.json web/package-lock.json web/build.mjs web/index.html $(wildcard web/src/*.js)
	cd web && npm ci --ignore-scripts --no-audit --no-fund && npm run build

web: $(WEB_RUNTIME)

$(NODE_CLIENTS): tests/node_clients/package.json tests/node_clients/package-lock.json
	cd tests/node_clients && npm ci --ignore-scripts --no-audit --no-fund

node-clients: $(NODE_CLIENTS)

test: $(STAMP) $(WEB_RUNTIME) $(NODE_CLIENTS)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests scripts benchmarks

demo: $(STAMP)
	$(PY) -m encdec demo

benchmark: $(STAMP)
	$(PY) scripts/benchmark.py

clean:
	rm -rf $(VENV) runs .pytest_cache web/node_modules tests/node_clients/node_modules src/encdec/ship/web_runtime
