# User commands. Everything heavy lives in apply.py / patchkit; this file only wires them.
PYTHON ?= python3
VENV   ?= .venv
VPY    := $(VENV)/bin/python
TARGET ?=
# quoted: a TARGET with spaces is one argument (a single quote in it is escaped for the shell)
TARGET_ARG := $(if $(TARGET),--target '$(subst ','\'',$(TARGET))',)
# LINE=NAME: the release line (pin.lock [line."NAME"]); empty: the newest (check: every line)
LINE ?=
LINE_ARG := $(if $(LINE),--line $(LINE),)
# DISCARD_EDITS=1: apply / revert rewrite hand-edited files of the target from the pinned release (--discard-edits)
DISCARD_EDITS ?=
DISCARD_ARG := $(if $(DISCARD_EDITS),--discard-edits,)

.PHONY: apply status revert check test test-gpu carry bench clean help rebase rebase-continue rebase-abort pr pr-check

help:
	@echo "LINE=NAME       any target below on that release line of pin.lock (default: the newest; check: all)"
	@echo "make apply      apply the patch set to the pinned release (build/site-LINE, or TARGET=dir)"
	@echo "make status     per-patch state of build/site-LINE (or TARGET=dir)"
	@echo "make revert     restore the pristine release files"
	@echo "make check      every patch applies exactly and round-trips; upstream's isort/ruff/codespell on what the set adds ($(LINT_VENV))"
	@echo "make test       create $(VENV) (and the AOT and lint venvs) and run the CPU test suite (temporary files: build/pytest-tmp)"
	@echo "make test-gpu   run the GPU tests (on a CUDA machine with torch+triton already installed)"
	@echo "make bench      run every GPU benchmark in bench/ (on a CUDA machine)"
	@echo "make rebase TO=VERSION [FLASHINFER=VERSION] [DRY_RUN=1] [NEW_LINE=1]   carry the LINE's series to a new release (NEW_LINE: as a new line)"
	@echo "make rebase-continue / make rebase-abort                   after resolving a conflict / to give up"
	@echo "make pr PATCH=NAME REPO=DIR [BASE=REF] [SERIES=1] [FORCE=1] [BRANCH=NAME]   one patch (SERIES=1: its stack) as branches + PR bodies on an upstream checkout"
	@echo "make pr-check   per exportable patch of the LINE: applies on the pin, upstream's hooks, its test red -> green on the CPU, its benchmark's suite (opt-in: not in check or CI)"
	@echo "make install    $(SGLANG_VENV): the pinned SGLang + its pinned deps (pip's own configuration), patched; then doctor"
	@echo "make serve [MODEL=path] [TP=n] [HOST=0.0.0.0] [PORT=p] [CONTEXT=n]   launch the patched server (no MODEL: tiny random DSv4)"
	@echo "make smoke [same flags]   start the server, check chat + generate (stream and not), report TTFT, stop it"
	@echo "make smoke BUNDLE=dir [TREE=pinned|patched] [EAGER=1] [SMOKE_LOG=file]   the same from an offline bundle"
	@echo "           [GRAPH_MAX_BS=n] [SGLANG_ARGS="--max-total-tokens 65536"]   fewer graphs / more sglang flags"
	@echo "make field-check [MODEL=path TP=n] [FIELD_OUT=dir] [BUNDLE_SITE=dir]   P1 and the release's own path on this GPU, one report to share (docs/field_check.md)"
	@echo "make bench-e2e [BUNDLE=dir | PINNED_PYTHON=py] [E2E_TREE=both] [TP=n] [E2E_ARGS=...]   end-to-end decode tok/s, pinned vs patched"
	@echo "make test-serve  CPU tests of serving/ against the pinned sglang ($(SERVE_TEST_VENV))"
	@echo "make bundle [GPU_CC=90|120]   build/bundle: everything an offline GPU machine needs to serve (docs/gpu_box.md)"
	@echo "make bundle-budget           do the tree and build/bundle stay within the bundle's budget (48 MiB copied together)?"
	@echo "make tree-copy [TREE_COPY=build/tree-copy]   the checkout as copied to the GPU machine: without bench/runs/' raw output"
	@echo "make carry-triton [CARRY_TRITON=3.8.0] [CARRY_ARCHS=90,120]   build/carry-triton-VERSION: a Triton release packed to copy to the GPU machine"
	@echo "make carry-peers [CARRY_PEERS=\"0.7.2 0.7.4\"]   build/carry-peer-VERSION: FlashInfer's sm_120 decode built for sm_90a, packed"
	@echo "make carry-slice              build/carry-slice-LINE: the files of the line's pristine and patched trees the GPU benches read, packed"
	@echo "make clean      remove build/, $(VENV) and $(LINT_VENV)"

apply:
	$(PYTHON) apply.py apply $(LINE_ARG) $(TARGET_ARG) $(DISCARD_ARG)

status:
	$(PYTHON) apply.py status $(LINE_ARG) $(TARGET_ARG)

revert:
	$(PYTHON) apply.py revert $(LINE_ARG) $(TARGET_ARG) $(DISCARD_ARG)

# The lint gate (lint/gate.py): upstream's formatters and linters, at the versions lint/settings.toml documents,
# on the overlay files and the lines the patches add. Its own venv: the pinned tools from pip's configuration.
LINT_VENV ?= .venv-lint
$(LINT_VENV)/.installed: requirements-lint.txt
	$(PYTHON) -m venv $(LINT_VENV)
	$(LINT_VENV)/bin/python -m pip install -q -r requirements-lint.txt
	touch $@

check: $(LINT_VENV)/.installed
	$(PYTHON) apply.py check $(LINE_ARG)
	$(PYTHON) -m lint.gate --tools $(LINT_VENV)/bin

$(VENV)/.installed: requirements-test.txt
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -r requirements-test.txt
	touch $@

# The AOT gate under the 0.5.23 line's Triton (3.8) and under 3.9, which it follows ahead of any line
# (harness/aot.py aot_runs): a venv each, since one venv holds one Triton; requirements-aot-tritonXY.txt makes
# .venv-tritonXY. Such a venv holds only its Triton: torch (the same 2.13.0 CPU build) and numpy are .venv's,
# reached through a .pth file, which Python puts after the venv's own site-packages, so the venv's Triton
# shadows .venv's. That spares a copy of torch and its dependencies (about 1 GB) per venv.
AOT_VENVS := .venv-triton38 .venv-triton39
SITE_PACKAGES = -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"
.venv-triton%/.installed: requirements-aot-triton%.txt $(VENV)/.installed
	$(PYTHON) -m venv $(@D)
	$(@D)/bin/python -m pip install -q -r $<
	$(VPY) $(SITE_PACKAGES) > "$$($(@D)/bin/python $(SITE_PACKAGES))/test-venv.pth"
	touch $@

# LINE=NAME runs that line's own tests, tests/line_NAME (dots as _); without LINE, all of tests/ (every line's)
TEST_DIR = $(or $(wildcard tests/line_$(subst .,_,$(LINE))),tests)
# TEST_WORKERS: pytest-xdist processes; each takes whole test files, so a file's module fixtures (unpacked trees,
# upstream checkouts) are built once, except that each AOT gate run (one Triton's compiles) is a unit of its own,
# and the long setups start first (--dist loadgroup: tests/long_setups_first.py). 2 fits the CI machine's two cores.
TEST_WORKERS ?= 2
# pytest's temporary files (unpacked trees, git repositories: several GB over a run) live in build/pytest-tmp, not
# the system's temporary directory: pytest empties it when a run starts, pytest.ini drops a passed test's own
# directory as soon as it passes, and a green run removes the rest; a red run's stays to be read (docs/testing.md).
# PYTEST_TMP=DIR puts them elsewhere: CI gives a RAM-backed folder where the machine has room (.ci/test_tmp.py).
PYTEST_TMP := build/pytest-tmp
# $(LINT_VENV) too: tests/project/test_lint_gate.py runs upstream's linters from it (and skips without it).
# --durations: every log names the slowest setups and tests (CI's time is budgeted: docs/testing.md).
test: $(VENV)/.installed $(foreach v,$(AOT_VENVS),$(v)/.installed) $(LINT_VENV)/.installed
	mkdir -p $(dir $(PYTEST_TMP))
	$(VPY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=20 --basetemp=$(PYTEST_TMP) $(TEST_DIR)
	rm -rf $(PYTEST_TMP)

# Every venv CI uses (.ci/run: `make -j2 venvs`, pip installs side by side; each stamp makes a later build a no-op).
# LINE: the line of the serving tests' venv (make test-serve LINE=...).
venvs: $(LINT_VENV)/.installed $(VENV)/.installed $(foreach v,$(AOT_VENVS),$(v)/.installed) serve-venv

# The GPU box has its own torch/triton (pin.lock [runtime]); no venv there.
# A box without internet: `make carry` here, ship .carry/ with the tree, then run with PATCHKIT_CACHE=.carry
# (or point pip at a wheelhouse there: PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR; fetching uses pip's own configuration).
# test_flashinfer_compile.py needs no GPU but depends on the torch version's Dynamo: run it on the runtime's torch too.
test-gpu:
	$(PYTHON) -m pytest -q -rA $(PYTEST_ARGS) tests/gpu tests/kernels/test_flashinfer_compile.py

# Every kernel benchmark (bench/kernels/bench_*.py) in turn on the LINE (default: the newest), as a module of the
# checkout (python -m bench.kernels.NAME --line LINE); each prints its command, machine, versions and a table. A bench
# whose patch the line retired says why in one line and exits 3 (harness/line_files.py): the loop goes on.
BENCH_MODULES := $(subst /,.,$(patsubst %.py,%,$(wildcard bench/kernels/bench_*.py)))
bench:
	@set -e; for m in $(BENCH_MODULES); do echo "== $$m"; $(PYTHON) -m $$m $(LINE_ARG) || [ $$? -eq 3 ]; done

carry:
	$(PYTHON) apply.py fetch $(LINE_ARG) --into .carry/artifacts

# Rebase and upstream PRs (docs/rebase.md). Only pin.lock names upstreams; FLASHINFER is --to flashinfer=VERSION
# (alone: FlashInfer moves, SGLang stays); FORCE=1 takes a version the other pin does not accept (--force).
rebase:
	@test -n "$(TO)$(FLASHINFER)" || { echo "usage: make rebase TO=VERSION|FLASHINFER=VERSION [DRY_RUN=1] [LINE=NAME] [NEW_LINE=1] [FORCE=1]"; exit 2; }
	$(PYTHON) apply.py rebase $(LINE_ARG) $(if $(TO),--to $(TO),) $(if $(FLASHINFER),--to flashinfer=$(FLASHINFER),) \
		$(if $(DRY_RUN),--dry-run,) $(if $(NEW_LINE),--new-line,) $(if $(FORCE),--force,)

rebase-continue:
	$(PYTHON) apply.py rebase $(LINE_ARG) --continue

rebase-abort:
	$(PYTHON) apply.py rebase $(LINE_ARG) --abort

pr:
	@test -n "$(PATCH)" -a -n "$(REPO)" || { echo "usage: make pr PATCH=NAME REPO=DIR [BASE=REF] [SERIES=1] [FORCE=1] [BRANCH=NAME]"; exit 2; }
	$(PYTHON) apply.py export-pr $(LINE_ARG) $(PATCH) --repo $(REPO) $(if $(BASE),--base $(BASE),) $(if $(SERIES),--series,) \
		$(if $(FORCE),--force,) $(if $(BRANCH),--branch $(BRANCH),)

# Opt-in, outside `check` and CI: it runs each exportable patch's upstream test on the pristine and patched trees.
pr-check: $(VENV)/.installed $(LINT_VENV)/.installed
	$(VPY) -m lint.pr_check --tools $(LINT_VENV)/bin $(LINE_ARG)

clean:
	rm -rf build $(VENV) $(LINT_VENV) $(AOT_VENVS)

# ---- serving (serving/, docs/serving.md) ---------------------------------------------------------
SGLANG_VENV     ?= .venv-sglang
SERVE_TEST_VENV ?= .venv-serve
MODEL   ?=
TP      ?= 1
PORT    ?= 30000
HOST    ?= 127.0.0.1
CONTEXT ?=
SMOKE_TIMEOUT ?= 1200
# BUNDLE=dir: serve from an offline bundle (serving/bundle.py; installed on first use into build/bundle-site)
# with this machine's $(PYTHON) instead of $(SGLANG_VENV). TREE=pinned asks for the pinned baseline on purpose.
BUNDLE  ?=
TREE    ?= patched
EAGER   ?=
GRAPH_MAX_BS ?=
SGLANG_ARGS ?=
SMOKE_LOG ?= build/smoke-server.log
SERVE_PY = $(if $(BUNDLE),$(PYTHON),$(SGLANG_VENV)/bin/python)
SERVE_ARGS = --python $(SERVE_PY) $(if $(MODEL),--model $(MODEL)) --tp $(TP) --host $(HOST) --port $(PORT) $(if $(CONTEXT),--context $(CONTEXT)) \
             $(if $(BUNDLE),--bundle $(BUNDLE)) --tree $(TREE) $(if $(EAGER),--eager) $(if $(GRAPH_MAX_BS),--graph-max-bs $(GRAPH_MAX_BS)) \
             $(if $(SGLANG_ARGS),--sglang-args '$(SGLANG_ARGS)')
# With BUNDLE the gate runs inside serve_cmd/smoke (after the install, on the bundle's tree).
SERVE_GATE = $(if $(BUNDLE),,$(PYTHON) apply.py doctor $(LINE_ARG) --gate --venv $(SGLANG_VENV) --tree $(TREE))

.PHONY: install serve smoke serve-venv test-serve bench-e2e field-check venvs

install:
	$(PYTHON) -m serving.install --venv $(SGLANG_VENV) $(LINE_ARG)

# Both stop at once, with doctor's one-line reason, where no usable GPU/environment is found.
serve:
	@$(SERVE_GATE)
	$(PYTHON) -m serving.serve_cmd $(SERVE_ARGS)

smoke:
	@$(SERVE_GATE)
	$(PYTHON) -m serving.smoke $(SERVE_ARGS) --timeout $(SMOKE_TIMEOUT) --log $(SMOKE_LOG)

# field-check (docs/field_check.md): run in the sglang environment (make install), or with BUNDLE_SITE=dir in an
# installed bundle's patched tree (python3 -m serving.bundle install build/bundle --into dir) on this machine's $(PYTHON).
FIELD_OUT ?= .
FIELD_BUDGET ?=
BUNDLE_SITE ?=
FIELD_PY = $(if $(BUNDLE_SITE),$(PYTHON),$(SGLANG_VENV)/bin/python)
field-check:
	$(if $(BUNDLE_SITE),eval "$$($(PYTHON) -m serving.bundle env '$(BUNDLE_SITE)' patched)" && )$(FIELD_PY) apply.py field-check $(LINE_ARG) --out '$(FIELD_OUT)' $(if $(FIELD_BUDGET),--budget $(FIELD_BUDGET)) $(if $(MODEL),--model '$(MODEL)' --tp $(TP))

# End-to-end decode throughput, pinned vs patched (python -m bench.server.bench_e2e --help; E2E_ARGS passes more flags).
E2E_TREE ?= both
E2E_ARGS ?=
# Without BUNDLE the pinned baseline needs PINNED_PYTHON (an unpatched sglang's interpreter); else it is refused.
PINNED_PYTHON ?=
bench-e2e:
	$(PYTHON) -m bench.server.bench_e2e $(if $(BUNDLE),--bundle $(BUNDLE)) $(if $(PINNED_PYTHON),--pinned-python $(PINNED_PYTHON)) --tree $(E2E_TREE) --tp $(TP) $(E2E_ARGS)

serve-venv:
	$(PYTHON) -m serving.install --cpu-test-venv $(SERVE_TEST_VENV) $(LINE_ARG)

test-serve: serve-venv
	SERVE_TESTS_REQUIRE_SGLANG=1 $(SERVE_TEST_VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup tests/serving/test_serve_*.py tests/serving/test_emulate_sm120.py tests/bench/test_bench_e2e_args.py

# ---- offline bundle for a GPU machine without internet (serving/bundle.py, docs/gpu_box.md) ----------------------
# GPU_CC: the GPU machine's compute capability (90 = H100/H200; 120 = RTX PRO 6000 and other sm_120 cards).
# JIT_CACHE: tvm-ffi caches to carry (default: build/jit-cache, a cache back from a GPU run, and build/jit-cache-<arch>
# from `make prebuild-jit`, where they exist; modules of another arch are left out).
BUNDLE_OUT ?= build/bundle
GPU_CC     ?= 90
JIT_ARCH   := $(shell echo $(GPU_CC) | sed 's/\(.\)$$/.\1/')
JIT_CACHE  ?= $(wildcard build/jit-cache build/jit-cache-$(JIT_ARCH))

.PHONY: bundle bundle-budget prebuild-jit tree-copy

# The checkout as it is copied to the GPU machine (serving/tree_copy.py): the raw output recorded under bench/runs/
# stays in git and here; the budget below counts the same files.
TREE_COPY ?= build/tree-copy
tree-copy:
	rm -rf $(TREE_COPY)
	$(PYTHON) -m serving.bundle tree-copy --out $(TREE_COPY)

bundle:
	$(PYTHON) -m serving.bundle build $(LINE_ARG) --out $(BUNDLE_OUT) --gpu-cc $(GPU_CC) $(foreach d,$(JIT_CACHE),--jit-cache $(d))

# The tree with the largest bundle make bundle builds (its size limit: what CI checks, no bundle built there),
# then, where one is built, with the real bundle. Each fails when the two together are over the bundle's budget.
bundle-budget:
	$(PYTHON) -m serving.bundle budget --limit-only
	@if [ -f $(BUNDLE_OUT)/manifest.json ]; then $(PYTHON) -m serving.bundle budget --bundle $(BUNDLE_OUT); fi

prebuild-jit: $(VENV)/.installed
	$(PYTHON) -m serving.bundle prebuild-jit $(LINE_ARG) --arch $(JIT_ARCH) --out build/jit-cache-$(JIT_ARCH) --python $(VPY)

# ---- P1 under another Triton, beside FlashInfer, on the GPU machine (docs/gpu_box.md) ----------------------------
# build/carry-triton-VERSION: the Triton release packed small enough to copy beside the tree (bench/airgapped/carry_triton.py);
# build/carry-peer-VERSION: the FlashInfer sm_120 decode built for sm_90a, packed (bench/kernels/peers/).
# Both live in the ignored build/: copy them to the GPU machine only for the run that needs them.
CARRY_TRITON ?= 3.8.0
# CARRY_ARCHS: the GPU archs the payload compiles for (each keeps the ptxas the release's get_ptxas picks for it)
CARRY_ARCHS  ?= 90,120
CARRY_PEERS  ?= 0.7.2 0.7.4
.PHONY: carry-triton carry-peers carry-slice
carry-triton:
	$(PYTHON) -m bench.airgapped.carry_triton build --version $(CARRY_TRITON) --archs $(CARRY_ARCHS)

carry-peers: $(VENV)/.installed
	set -e; for v in $(CARRY_PEERS); do $(VPY) -m bench.kernels.peers.flashinfer_sm120_sources --flashinfer $$v; \
		$(VPY) -m bench.kernels.peers.flashinfer_sm120_build --flashinfer $$v --arch sm_90a --carry build/carry-peer-$$v; done

# build/carry-slice-LINE: the files of the line's (default: the newest) pristine and patched trees the P1/P3 benches
# read (bench/airgapped/tree_slice.py), packed like the payloads above (bench/airgapped/v41_rows.sh installs it there).
SLICE_LINE = $(or $(LINE),$(shell $(PYTHON) -c "from patchkit.lockfile import load_lock; print(load_lock('pin.lock').line)"))
carry-slice: $(VENV)/.installed
	rm -rf build/slice-$(SLICE_LINE) build/carry-slice-$(SLICE_LINE)
	$(VPY) -m bench.airgapped.tree_slice build/slice-$(SLICE_LINE) --line $(SLICE_LINE)
	$(VPY) -m bench.airgapped.carry pack-dir build/slice-$(SLICE_LINE) --keep pristine,patched --out build/carry-slice-$(SLICE_LINE)
