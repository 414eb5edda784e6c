# liveunwind: `make demo` shows it working, `make test` runs the whole suite.
# Both do all their own set-up on a fresh Debian machine (apt-get when root).

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
# What the test suite drives: compilers for the test programs, the oracles
# (gdb, eu-stack, readelf, objdump), and the programs nobody here wrote.
SYSTEM_PACKAGES := gcc g++ make binutils gdb elfutils sqlite3 python3 debootstrap xz-utils linux-perf \
	gcc-aarch64-linux-gnu libc6-dev-arm64-cross binutils-aarch64-linux-gnu \
	qemu-user gdb-multiarch libunwind-dev clang-16 lld-16 llvm-16 \
	gcc-riscv64-linux-gnu libc6-dev-riscv64-cross binutils-riscv64-linux-gnu \
	libc6-dbg zstd lz4 debuginfod gdbserver golang-go rustc python3-dbg python3-dev \
	chromium docker.io libatomic1

.PHONY: all system-deps venv testprogs sid-rootfs freethreaded-python demo test unit lint fuzz soak \
	bench accuracy-deps accuracy integration clean

all: venv testprogs

system-deps:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		missing=$$(for p in $(SYSTEM_PACKAGES); do \
			dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
		if [ -n "$$missing" ]; then \
			echo "installing:" $$missing; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
		fi; \
	else \
		echo "not root: skipping apt-get; install $(SYSTEM_PACKAGES) yourself"; \
	fi

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -e '.[fast,test]'
	touch $@

testprogs:
	$(MAKE) -C testprogs -j2
	$(MAKE) -C testprogs/fallback -j2
	$(MAKE) -C testprogs/crash -j2
	$(MAKE) -C testprogs/jit -j2
	$(MAKE) -C testprogs/macho -j2
	$(MAKE) -C testprogs/lines -j2

# A Debian sid root file system (cached outside the checkout) whose binutils
# writes SFrame version 3; tests that need it skip, saying why, without it.
sid-rootfs:
	@tools/sid-rootfs.sh

# Free-threaded CPython (--disable-gil) built once from Debian's source package in
# that root file system (about 4 minutes of two cores); --python tests skip without it.
freethreaded-python: sid-rootfs
	@tools/freethreaded-python.sh

demo: system-deps venv testprogs
	@$(VPY) tools/demo.py

lint: venv
	$(VPY) -m ruff check liveunwind tests tools bench
	$(VPY) -m ruff format --check liveunwind tests tools bench
	$(VPY) -m mypy

# tests/unit, tests/system and tests/fuzz (tests/README.md says which is which);
# tests/integration is `make integration`.
test: system-deps venv testprogs sid-rootfs freethreaded-python lint
	$(VPY) -m pytest -q -p no:cacheprovider tests

# The unit tests alone: no process, no compiler, no oracle; well under a minute.
unit: venv
	$(VPY) -m pytest -q -p no:cacheprovider tests/unit

# The fuzz campaign (tests/fuzz/): a new seed, FUZZ_SECONDS per target (FUZZ_TARGETS: a
# pytest -k expression to run some).  Each finding's input and report are written into
# tests/fuzz/corpus/TARGET/ (or FUZZ_FINDINGS/TARGET/), to fix and commit; -rP prints how many
# inputs each ran.  `make test` draws nothing: it replays that corpus and a fixed number of a
# fixed seed's inputs.
FUZZ_SECONDS ?= 300
FUZZ_FINDINGS ?=
FUZZ_TARGETS ?= test_
FUZZ_SEED ?= $(shell date +%s%N | cut -c1-10)
fuzz: system-deps venv testprogs
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_FINDINGS=$(FUZZ_FINDINGS) FUZZ_SEED=$(FUZZ_SEED) \
		nice -n 19 $(VPY) -m pytest -q -rP -p no:cacheprovider tests/fuzz -k '$(FUZZ_TARGETS)'

# The long soak (tests/system/test_soak.py and test_interrupts.py with SOAK=long):
# testprogs/jit/jit-soak profiled for 20,000 slots at 1000 Hz and backtraced with
# --repeat 2000 while liveunwind's RSS and descriptors are watched, and 100 signals
# at random instants; `make test` runs the short form.  Figures: docs/profiling.md.
soak: system-deps venv testprogs
	SOAK=long $(VPY) -m pytest -q -s -p no:cacheprovider tests/system/test_soak.py \
		tests/system/test_interrupts.py

# Not part of `make test`: times liveunwind against its peers (see bench/run.py)
# and writes bench/results.json; bench/profile.py: `profile` against py-spy and perf;
# bench/cores.py: `core DIR --group` over 200 cores against a loop of `core`;
# bench/containers.py: a container's processes by --container beside shell loops;
# bench/perfdata.py: `liveunwind perf` against `perf script` on one perf.data.
bench: system-deps venv
	$(VPY) -m pip install -q pystack py-spy
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VPY) bench/run.py
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VPY) bench/lines.py
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VPY) bench/cores.py
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VPY) bench/profile.py
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VPY) bench/containers.py
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VPY) bench/perfdata.py

# Not part of `make test`: busy programs from Debian packages (a JIT runtime,
# hand-written assembly, PostgreSQL's LLVM JIT, chromium) stopped at random
# instants, every thread compared with gdb and eu-stack (docs/accuracy.md).
# Writes build/accuracy/report.md and report.json. Heavy: it runs niced.
# A package that cannot be installed is named, and its program skipped.
ACCURACY_PACKAGES := openjdk-17-jdk-headless erlang-base ffmpeg postgresql-15 chromium gdb elfutils
ACCURACY_INSTANTS ?= 3
ACCURACY_PROGRAMS ?= openjdk,erlang,ffmpeg,postgresql,chromium
accuracy-deps:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		missing=$$(for p in $(ACCURACY_PACKAGES); do \
			dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
		if [ -n "$$missing" ]; then \
			echo "installing:" $$missing; apt-get update -qq; \
			for p in $$missing; do \
				DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$p >/dev/null \
					|| echo "accuracy: $$p cannot be installed; the program that needs it is skipped"; \
			done; \
		fi; \
	else \
		echo "not root: skipping apt-get; install $(ACCURACY_PACKAGES) yourself"; \
	fi

accuracy: accuracy-deps venv
	nice -n 19 $(VPY) -m tools.accuracy --instants $(ACCURACY_INSTANTS) \
		--programs $(ACCURACY_PROGRAMS) --out build/accuracy

# Not part of `make test`: tests/integration/ in x86_64 and arm64 containers,
# an arm64 VM and a riscv64 VM, built from nothing (docker/run-integration;
# docs/integration.md). Writes docker/results/{x86_64,arm64,arm64-vm,riscv64-vm}.xml.
integration: venv
	docker/run-integration

clean:
	$(MAKE) -C testprogs clean
	rm -rf $(VENV) *.egg-info
