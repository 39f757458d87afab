# The README's two commands are `make quickstart` and `make test`; everything they need
# is installed by scripts/bootstrap-*.sh into ignored folders (.venv, .tools).
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV := .venv
PYTEST := $(VENV)/bin/python -m pytest
RUFF := $(VENV)/bin/ruff

.PHONY: help venv tools quickstart test test-fast lint format lock clean images publish dockerd chart-docs \
  cluster-up cluster-down

help:  ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

venv:  ## create .venv with every extra, pinned by constraints.txt
	@scripts/bootstrap-python.sh dev

tools: venv  ## install pinned helm, kubeconform, helm-unittest, ... into .tools/
	@scripts/bootstrap-tools.sh

quickstart: venv  ## run the whole system locally on demo data
	@$(VENV)/bin/ectl quickstart

lint: venv  ## ruff format --check and ruff check
	$(RUFF) format --check tools tests bench
	$(RUFF) check tools tests bench

format: venv  ## apply ruff formatting and safe fixes
	$(RUFF) format tools tests bench
	$(RUFF) check --fix tools tests bench

# Two pytest-xdist workers: the e2e package (one cluster per machine, mostly waiting on
# pods) beside the rest, one file per work unit (tests/conftest.py); TEST_WORKERS=0: serial.
TEST_WORKERS ?= 2
# What `helm dependency build` leaves in a checkout (ignored, see .gitignore): `ct lint`
# writes the umbrella's Chart.lock, and a build inside a subchart its Chart.lock and a
# packed copy of the common library. A reused checkout keeps them across commits, and a
# lock older than Chart.yaml's dependencies fails chart-testing ("out of sync").
STALE_CHART_FILES := charts/*/Chart.lock charts/elasticctr/charts/*/Chart.lock \
  charts/elasticctr/charts/*/charts/*.tgz
test: venv tools lint images  ## the full suite (CI runs exactly this)
	@rm -f $(STALE_CHART_FILES)
	@source scripts/tools-env.sh && $(PYTEST) tests -n $(TEST_WORKERS) --dist loadfile \
	  --no-loadscope-reorder --durations=40

cluster-up: tools  ## start the one-node Kubernetes + Volcano cluster and a local registry (.cluster/)
	@source scripts/tools-env.sh && reg=$$(scripts/registry.sh start .cluster-registry) \
	  && $(VENV)/bin/python scripts/cluster/harness.py up --registry "$$reg"

cluster-down:  ## stop them and leave the machine clean (the registry's data stays)
	@source scripts/tools-env.sh && $(VENV)/bin/python scripts/cluster/harness.py down \
	  && scripts/registry.sh stop .cluster-registry

test-fast: venv lint  ## quick unit subset
	$(PYTEST) -m fast tests

dockerd:  ## install Debian's docker.io when missing and start dockerd when none answers
	@scripts/images/dockerd.sh >/dev/null

# tools: the console image ships `make tools`' helm (.tools/bin/helm).
images: venv tools  ## build every image the chart runs (cached; docs/images.md)
	@scripts/images/build.sh

publish: images tools  ## push the images and the chart to REGISTRY=HOST:PORT (docs/images.md)
	@test -n "$(REGISTRY)" || { echo "usage: make publish REGISTRY=HOST:PORT" >&2; exit 2; }
	@scripts/images/publish.sh "$(REGISTRY)"

# The umbrella's README lists its subcharts' values too (`cube.shards`, ...), each with its
# `# --` comment; tests/chart/test_chart_readme.py runs helm-docs with these same flags.
HELM_DOCS_FLAGS := --log-level warning --document-dependency-values
chart-docs: tools  ## regenerate each chart's README.md from its values.yaml comments (helm-docs)
	@source scripts/tools-env.sh && helm-docs --chart-search-root charts $(HELM_DOCS_FLAGS)

.PHONY: bench-deepctr
bench-deepctr: venv  ## training throughput vs DeepCTR-Torch (creates .bench-venv/, ~5.6 GB); ARGS="--lines N"
	$(VENV)/bin/python bench/train/deepctr_torch.py $(ARGS)

lock: venv  ## re-resolve constraints.txt from pyproject.toml
	$(VENV)/bin/python -m uv pip compile pyproject.toml --extra dev --python-version 3.11 \
	  -o constraints.txt

clean:  ## remove environments and caches (not the shared tool cache in ~/.cache)
	rm -rf $(VENV) .tools .pytest_cache .ruff_cache
