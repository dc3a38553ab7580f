# Two commands do all set-up on a fresh machine (as root):
#   make demo   bring the lab fleet up and run the main job on it
#   make test   lint, unit tests, testinfra, molecule scenarios, smoke playbook tests (at most 10
#               minutes warm); make test-all adds every other playbook test (what CI runs)
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV ?= $(CURDIR)/.venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
# The venv's interpreter: Debian's own python3 (the python3-venv package below), not whichever python3 is first
# on PATH. A Python built from source without profile-guided optimisation (pyenv's default build) spends about
# 40 % more CPU on the controller's work (ansible-playbook, ansible-lint's syntax checks, pytest) with the same
# packages: bench/bench_interpreter.py. The stamp names the interpreter, so changing it rebuilds the venv.
VENV_PYTHON ?= /usr/bin/python3
STAMP := $(VENV)/.installed-$(shell sha256sum requirements.txt | cut -c1-12)-$(shell printf %s '$(VENV_PYTHON)' | sha256sum | cut -c1-8)
# Development and CI machines never reach the real fleet (see roles/preflight).
export DSV41_LAB_ONLY := 1
export PATH := $(abspath $(BIN)):$(PATH)
export ANSIBLE_CONFIG := $(abspath ansible.cfg)
export ANSIBLE_ROLES_PATH := $(abspath roles)
export ANSIBLE_LIBRARY := $(abspath library)
export ANSIBLE_MODULE_UTILS := $(abspath module_utils)
export ANSIBLE_FILTER_PLUGINS := $(abspath filter_plugins)
export ANSIBLE_ACTION_PLUGINS := $(abspath action_plugins)
export ANSIBLE_FORCE_COLOR := 0

.PHONY: help setup apt apt-check fresh-check lab-image lab-up lab-ensure lab-down lab-purge lab-status lab-tp4-up lab-tp4-down lab-tp4-ensure drift-all demo status drift lab-suites \
        unit-launch unit-rest \
        test test-slow test-all lint argspecs unit lab-tests molecule playbook-tests bench lab-reset

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

# Every Debian package the lab and the tests need, each with what proves it is there (a command on
# PATH or a file). `make apt` installs whichever is missing (checked one by one, so a machine that
# already has podman still gets iptables, which netavark needs to build the lab image); `make
# apt-check` fails naming each one still missing. `make fresh-check` runs both in a clean Debian
# container, so a package missing from this list cannot hide behind a well-equipped machine.
APT_REQUIRES := podman:podman runc:runc debootstrap:debootstrap uidmap:newuidmap slirp4netns:slirp4netns \
                netavark:/usr/lib/podman/netavark aardvark-dns:/usr/lib/podman/aardvark-dns \
                iptables:iptables openssh-client:ssh-keygen make:make python3-venv:/usr/lib/python3.11/ensurepip \
                ca-certificates:/etc/ssl/certs/ca-certificates.crt bubblewrap:bwrap
APT_PACKAGES := $(foreach r,$(APT_REQUIRES),$(firstword $(subst :, ,$(r))))

apt: ## install the Debian packages the lab needs (podman, runc, iptables, debootstrap, ...)
	@missing=$$(for p in $(APT_PACKAGES); do \
	    dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed$$' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "apt: installing" $$missing; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@$(MAKE) --no-print-directory apt-check

apt-check: ## fail naming every lab package whose command or file is missing
	@bad=""; for r in $(APT_REQUIRES); do p=$${r%%:*}; what=$${r#*:}; \
	  case $$what in /*) [ -e "$$what" ] ;; *) command -v "$$what" >/dev/null ;; esac || bad="$$bad $$p($$what)"; \
	done; if [ -n "$$bad" ]; then echo "apt-check: missing Debian packages:$$bad" >&2; exit 1; fi

fresh-check: ## make apt + apt-check + make setup in a clean Debian 12 container (nothing preinstalled)
	bash lab/fresh_machine_check.sh

$(STAMP): requirements.txt
	$(VENV_PYTHON) -m venv --clear $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	rm -f $(VENV)/.installed-* && touch $@

setup: apt $(STAMP) ## the project virtual environment (pinned requirements.txt) and apt packages

lab-image: setup ## build the lab image if its inputs changed
	python3 lab/labctl.py build

lab-up: setup ## start spark1..spark3 in the report's state (replaces a stale lab)
	python3 lab/labctl.py up

lab-ensure: setup
	python3 lab/labctl.py ensure

lab-reset: setup ## put the running lab back in the report's state in seconds (up if it is not up)
	python3 lab/labctl.py reset

lab-down: ## remove the lab hosts, network, keys and connection files
	python3 lab/labctl.py down

lab-purge: ## lab-down, then also the lab images and generated checkpoints
	python3 lab/labctl.py purge

lab-status:
	python3 lab/labctl.py status

lab-tp4-up: setup ## start the TP4 lab (spark1..spark4, inventory/lab-tp4) beside the TP3 one
	DSV41_LAB_TP=4 python3 lab/labctl.py up

lab-tp4-down: ## remove the TP4 lab's hosts, network and connection files
	DSV41_LAB_TP=4 python3 lab/labctl.py down

drift-all: lab-ensure lab-tp4-ensure ## one drift check of both labs at once (bin/fleet-drift --all), the worst exit code
	$(PY) bin/fleet-drift --all --fleet lab --fleet lab-tp4

lab-tp4-ensure: setup
	DSV41_LAB_TP=4 python3 lab/labctl.py ensure

status: lab-ensure ## fleet status on the lab (read-only)
	$(BIN)/ansible-playbook fleet_status.yml

drift: lab-ensure ## read-only drift check of the lab (exit 0 none, 2 drift, 3 unreachable; records/lab/drift/)
	$(PY) bin/fleet-drift

demo: lab-up ## bring the lab up and run the main job on it (stage A in check mode)
	$(BIN)/ansible-playbook fleet_status.yml
	@# In the report's state the preflight stops at spark2 (short of space): that verdict is the demo. The
	@# preflight writes one line, where stage A stops and the next command, which ends the demo.
	@summary=$$(mktemp); $(BIN)/ansible-playbook stage_a_pack.yml --check -e engram_pack_summary_file=$$summary; \
	  rc=$$?; echo; if [ -s "$$summary" ]; then cat "$$summary"; \
	  else echo "stage A --check ended (exit $$rc) before the preflight's verdict: see the output above"; fi; \
	  rm -f "$$summary"

# What ansible-lint reads: every top-level directory (.ansible-lint's exclude_paths still apply inside them) and
# the configuration files at the top, but not the root playbooks. Those are one import each of playbooks/<same
# name> (kubespray's entry points, their shape asserted by tests/playbooks/test_inventory.py in `make test`);
# linting them re-ran the syntax check of every playbook they import twice more (36 of 87 ansible-playbook runs:
# about 22 of 60 CPU-seconds of this target). yamllint still reads them.
LINT_PATHS = .ansible-lint .yamllint .config $(filter-out tests/ bench/ records/,$(wildcard */))

lint: setup ## yamllint and ansible-lint (production profile)
	$(BIN)/yamllint -s .
	$(BIN)/ansible-lint --offline $(LINT_PATHS)

argspecs: setup ## every role's meta/argument_specs.yml matches its defaults
	$(PY) tests/check_argument_specs.py

unit: setup ## pytest: modules, module_utils, filters, stand-ins
	$(BIN)/pytest -q tests/unit

# The same tests in two halves that `make test` runs side by side: the launcher evaluations (each runs a
# launcher in the bubblewrap sandbox, mostly waiting on processes) and everything else.
UNIT_LAUNCH := tests/unit/module_utils/launcher/test_launch_*.py tests/unit/module_utils/launcher/test_launcher_*.py \
	tests/unit/modules/test_launcher_*.py tests/unit/filters/test_launch_*.py tests/unit/filters/test_container_env*.py
unit-launch: setup ## pytest: the launcher evaluations only (half of `unit`)
	$(BIN)/pytest -q $(UNIT_LAUNCH)

unit-rest: setup ## pytest: everything in `unit` but the launcher evaluations
	$(BIN)/pytest -q tests/unit $(foreach f,$(UNIT_LAUNCH),--ignore-glob='$(f)')

# The test suite's lab answers chat requests 10x faster than the real-time latency model (lab/labctl.py
# engine_knobs): benchmarks in molecule and playbook tests measure structure, never speed.
lab-tests molecule playbook-tests: export DSV41_LAB_ENGINE_KNOBS ?= LAB_ENGINE_SPEED=10

lab-tests: lab-up ## testinfra: the lab reproduces the report's fleet
	$(BIN)/pytest -q tests/testinfra --hosts=ansible://dsv41_ranks --ansible-inventory=inventory/lab --connection=ansible

# One lab for every scenario: reset once here, then each scenario's destroy resets what it changed
# (.config/molecule/config.yml, molecule/shared/).
molecule: setup ## molecule scenarios of every role, on one lab reset between scenarios
	python3 lab/labctl.py reset
	set -e; for scenario in $$(dirname roles/*/molecule/*/molecule.yml); do \
	  role=$$(basename $$(dirname $$(dirname $$scenario))); name=$$(basename $$scenario); \
	  echo "== molecule $$role/$$name"; (cd roles/$$role && { $(BIN)/molecule reset -s $$name >/dev/null 2>&1 || true; } \
	    && $(BIN)/molecule test -s $$name); done

playbook-tests: setup ## stage and check-mode tests of the playbooks on the lab (reset before each test module)
	$(BIN)/pytest -q --durations=15 tests/playbooks

# Every lab-level job (testinfra, each molecule scenario, each playbook test module) spread over
# DSV41_TEST_SHARES lab instances (default 3, instances 1..N, each in its own scratch checkout; the demo
# lab, instance 0, is left alone), longest first by their last measured durations. Logs and the plan:
# tests/run_lab_suites.py --list; /tmp/dsv41-lab-suites/logs/. TIER: fast (testinfra, molecule, the
# playbook tests marked smoke: what `make test` runs), slow (every other playbook test) or all.
TIER ?= all
lab-suites: lab-image ## lab-level jobs of one TIER (fast, slow, all) on several lab instances at once
	$(PY) tests/run_lab_suites.py --tier $(TIER)

# `make test` and `make test-all` run lint and the unit tests beside the lab shares (--with lint unit): they
# need no lab, and their CPU fills the shares' waits. They start first, and the runner builds the lab image
# beside them (--build-image): on a fresh machine the base image's debootstrap waits on the network. Each
# failure is named in the runner's summary.
test: argspecs setup ## the fast suite, at most 10 min warm: lint, unit, testinfra, molecule, smoke playbook tests
	$(PY) tests/run_lab_suites.py --tier fast --build-image --with lint unit-launch unit-rest

test-slow: lab-image ## every playbook test not in `make test`: stages, experiments, packs, converges run for real
	$(PY) tests/run_lab_suites.py --tier slow

test-all: argspecs setup ## everything (what CI runs): the fast suite and the slow tier in one plan
	$(PY) tests/run_lab_suites.py --tier all --build-image --with lint unit-launch unit-rest

bench: setup ## benchmarks (ratios against a baseline in the same run)
	$(PY) bench/bench_plan.py
	$(PY) bench/bench_pack.py
	$(PY) bench/bench_engram_packed.py
	$(PY) bench/bench_uptime.py
	$(PY) bench/bench_drift.py
	$(PY) bench/bench_launch_eval.py
	$(PY) bench/bench_controller.py
	$(PY) bench/bench_interpreter.py
