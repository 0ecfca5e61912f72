# vgpu: build, test and demo entry points.  See README.md.
#
#   make demo    the main job: boot the VM with the simulated GPU and run it
#   make test    all tests: host tests, the VM tests against nvsim, then on NVIDIA's driver
#   make deps    what demo and test install first: Debian packages, the Python venv,
#                NVIDIA's 535.261.03 user space unpacked into $(VGPU_CACHE) (idempotent)
#   make test-debug  the VM tests on the debug kernel (KASAN, lockdep, kmemleak...)
#   make test-vm-real  the first tests on NVIDIA's own driver (595.45.04, no GPU) in the VM
#   make test-vm-real535  NVIDIA's 535.261.03 driver, libcuda and nvidia-smi, alone and through a slice
#   make fuzz    fuzz the ioctl surface in the VM (FUZZ_SEED, FUZZ_CALLS, FUZZ_SECONDS; docs/fuzzing.md)
#   make install on a real GPU node: vgpud/vgpuctl, unit, config, DKMS sources
#
SHELL := /bin/bash

# The kernel the modules are built for and the VM boots: the newest one with
# headers installed (Debian's linux-image-amd64 / linux-headers-amd64).
KVER ?= $(shell ls -d /lib/modules/*/build 2>/dev/null | sort -V | tail -n1 | cut -d/ -f4)
KDIR ?= /lib/modules/$(KVER)/build
PYTHON ?= python3
VENV := .venv
VPY := $(CURDIR)/$(VENV)/bin/python
VM := $(PYTHON) tools/vm/vm.py run --kernel $(KVER)
VM_TESTS ?= tests/vm
PYTEST_ARGS ?=
# The mediation suite again with nvsim presenting the oldest release vgpu.ko
# has tables for (the full suite runs with the newest, nvsim's default), and
# its GPUs' memory as NUMA node 0, as on a coherent platform (NUMA_INFO).
RELEASES := $(shell $(PYTHON) -c 'import sys; sys.path.insert(0, "."); \
	from tools.nvgen import kernel; print(*kernel.releases())' 2>/dev/null)
OLDEST_RELEASE := $(firstword $(RELEASES))
MIDDLE_RELEASES := $(filter-out $(OLDEST_RELEASE) $(lastword $(RELEASES)),$(RELEASES))
NVSIM_AS = --nvsim-params "num_gpus=2 fb_size=17179869184 driver_version=$(1)"
NVSIM_OLDEST := $(call NVSIM_AS,$(OLDEST_RELEASE) numa_node=0)
VM_TESTS_OLDEST ?= $(wildcard tests/vm/test_vgpu_*.py) tests/vm/test_nvidia_smi.py

APT_PACKAGES := qemu-system-x86 linux-image-amd64 linux-headers-amd64 busybox-static \
	libfuse3-dev fuse3 pkg-config kmod cpio runc containerd build-essential gcc make \
	python3-venv python3-dev patch chromium

# vgpu.ko joins the build (and the VM test run) once its sources exist.
KMODS := nvsim $(if $(wildcard kmod/vgpu/Kbuild),vgpu)
VM_LOAD := --load-nvsim $(if $(wildcard kmod/vgpu/Kbuild),--load-vgpu)

.PHONY: all deps deps-apt deps-python deps-nvidia modules test test-run demo-run test-host test-vm test-vm-oldest test-vm-releases test-vm-real test-vm-real535 demo bench-compute clean help \
	install uninstall deps-debug debug-kernel test-debug

all: modules runtime

help:
	@sed -n '2,12p' Makefile | sed 's/^# \{0,1\}//'

deps: deps-apt deps-python deps-nvidia

deps-apt:
	@missing=$$(for p in $(APT_PACKAGES); do \
		dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; \
	done); \
	if [ -n "$$missing" ] && [ "$$(id -u)" != 0 ]; then \
		echo "deps: missing Debian packages:" $$missing; \
		echo "deps: run 'make deps' as root (or: sudo apt-get install" $$missing")"; exit 1; \
	elif [ -n "$$missing" ]; then \
		echo "deps: installing:" $$missing; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	else echo "deps: Debian packages present"; fi

deps-python: $(VENV)/.deps-stamp

# NVIDIA's own user space (libcuda, NVML, nvidia-smi) of 535.261.03, from
# Debian's non-free component, unpacked into $(VGPU_CACHE)/nvidia-userspace
# and never installed into the system (tools/nvuser.py; a stamp: a second
# run only checks).  The VM tests on NVIDIA's 535 driver run it.
deps-nvidia: deps-apt
	@VGPU_CACHE=$(VGPU_CACHE) $(PYTHON) -m tools.nvuser fetch

$(VENV)/.deps-stamp: pyproject.toml
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $@

# vgpu-runtime's fast path (container-hook/vgpu-runtime.c): execs runc at once
# for containers that cannot ask for a slice, else the Python slow path
# (VGPU_SLOW_PATH, overridden by $$VGPU_RUNTIME_SLOW)
.PHONY: runtime
RUNTIME_CFLAGS := -O2 -Wall -Wextra -Werror
VGPU_SLOW_PATH = $(VGPU_VENV)/bin/vgpu-runtime-slow
runtime: build/vgpu-runtime
build/vgpu-runtime: container-hook/vgpu-runtime.c
	@mkdir -p build
	$(CC) $(RUNTIME_CFLAGS) -DVGPU_SLOW_PATH='"$(VGPU_SLOW_PATH)"' -o $@ $<

modules:
	@test -d "$(KDIR)" || { echo "no kernel headers at $(KDIR): run 'make deps'"; exit 1; }
	@for m in $(KMODS); do \
		$(MAKE) --no-print-directory -C $(KDIR) M=$(CURDIR)/kmod/$$m modules || exit 1; \
	done

# vgpu.ko's netlink policies, uapi header and Python tables from their spec,
# kmod/netlink/vgpu.yaml (the outputs are committed: building needs no Python)
.PHONY: generate
generate:
	$(PYTHON) tools/ynl_gen.py

# `make test` and `make demo` install what is missing first (make deps is
# idempotent: a dpkg query and a stamp when all is there), then run in a
# fresh make, which sees the kernel headers deps may just have installed.
test: deps
	@$(MAKE) --no-print-directory test-run

test-run: deps-python modules runtime build/nvfuzz build/nvlog.so
	@rc=0; \
	echo "==== host tests ===="; \
	$(VPY) -m pytest $(PYTEST_ARGS) tests/host || rc=1; \
	echo "==== VM tests (nvsim in qemu) ===="; \
	$(VM) $(VM_LOAD) -- $(VPY) -m pytest --color=no $(PYTEST_ARGS) $(VM_TESTS) || rc=1; \
	echo "==== VM mediation tests, nvsim as $(OLDEST_RELEASE) ===="; \
	$(VM) $(VM_LOAD) $(NVSIM_OLDEST) -- $(VPY) -m pytest --color=no $(PYTEST_ARGS) \
		$(VM_TESTS_OLDEST) || rc=1; \
	for r in $(MIDDLE_RELEASES); do \
		echo "==== VM policy tests, nvsim as $$r ===="; \
		$(VM) $(VM_LOAD) $(call NVSIM_AS,$$r) -- $(VPY) -m pytest --color=no $(PYTEST_ARGS) \
			tests/vm/test_vgpu_policy.py || rc=1; \
	done; \
	echo "==== VM tests that reload nvsim (start without vgpu.ko): start-up, client-memory channels, tinygrad on nvsim and through a slice in a containerd container, the trace corpus replayed, NVIDIA's libcuda on nvsim and through a slice, libcuda and nvidia-smi in a containerd container ===="; \
	$(VM) --load-nvsim -- $(VPY) -m pytest --color=no $(PYTEST_ARGS) \
		tests/vm/test_nvsim_startup.py tests/vm/test_nvsim_pbdma.py tests/vm/test_tinygrad.py \
		tests/vm/test_tinygrad_slice.py tests/vm/test_trace_corpus.py \
		tests/vm/test_cuda.py tests/vm/test_cuda_slice.py tests/vm/test_container_nvidia.py || rc=1; \
	$(REALDRV_RUN) || rc=1; \
	$(REALDRV535_RUN) || rc=1; \
	if [ $$rc = 0 ]; then echo "make test: all passed"; else echo "make test: FAILED"; fi; \
	exit $$rc

test-host: deps-python
	$(VPY) -m pytest $(PYTEST_ARGS) tests/host

test-vm: deps-python modules runtime
	$(VM) $(VM_LOAD) -- $(VPY) -m pytest --color=no $(PYTEST_ARGS) $(VM_TESTS)

test-vm-oldest: deps-python modules
	$(VM) $(VM_LOAD) $(NVSIM_OLDEST) -- $(VPY) -m pytest --color=no $(PYTEST_ARGS) $(VM_TESTS_OLDEST)

# The per-item policy test for every release between the oldest and newest.
test-vm-releases: deps-python modules
	@rc=0; for r in $(MIDDLE_RELEASES); do \
		echo "==== VM policy tests, nvsim as $$r ===="; \
		$(VM) $(VM_LOAD) $(call NVSIM_AS,$$r) -- $(VPY) -m pytest --color=no $(PYTEST_ARGS) \
			tests/vm/test_vgpu_policy.py || rc=1; \
	done; exit $$rc

# NVIDIA's own driver in the VM (tools/realdrv): 595.45.04's nvidia.ko and
# nvidia-uvm.ko, built once per machine from the vendor archive into
# $(VGPU_CACHE)/realdrv (about 11 min on two cores), loaded with no GPU (the
# RM core and UVM only), and vgpu.ko linked against them.
REALDRV_VGPU := build/realdrv
REALDRV_RUN = { drv=$$(VGPU_CACHE=$(VGPU_CACHE) $(VPY) -m tools.realdrv.build \
		--vgpu-out $(REALDRV_VGPU)) && \
	echo "==== VM tests on NVIDIA's driver ($$drv) ====" && \
	$(VM) --load-nvidia "$$drv" --load-vgpu --vgpu-ko $(CURDIR)/$(REALDRV_VGPU)/kmod/vgpu/vgpu.ko \
		-- $(VPY) -m pytest --color=no $(PYTEST_ARGS) tests/realdrv; }
test-vm-real: deps-python
	@$(REALDRV_RUN)

# The same for 535.261.03, the release whose user space Debian ships (make
# deps unpacks it, tools/nvuser.py): NVIDIA's libcuda and nvidia-smi on
# NVIDIA's driver, alone and through a slice, logged by build/nvlog.so
# (tests/realdrv535; cold build about 20 min on two cores, then cached).
REALDRV535_VGPU := build/realdrv535
REALDRV535_RUN = { drv=$$(VGPU_CACHE=$(VGPU_CACHE) $(VPY) -m tools.realdrv.build \
		--release 535.261.03 --vgpu-out $(REALDRV535_VGPU)) && \
	echo "==== VM tests on NVIDIA's 535 driver and user space ($$drv) ====" && \
	$(VM) --load-nvidia "$$drv" --load-vgpu --vgpu-ko $(CURDIR)/$(REALDRV535_VGPU)/kmod/vgpu/vgpu.ko \
		-- $(VPY) -m pytest --color=no $(PYTEST_ARGS) tests/realdrv535; }
test-vm-real535: deps-python build/nvlog.so
	@$(REALDRV535_RUN)

# The debug kernel (README "The debug kernel"): Debian's linux-source-6.1
# with KASAN, lockdep, kmemleak, UBSAN, DEBUG_LIST and fault injection, built
# once per machine into $(VGPU_CACHE)/debug-kernel/ by tools/vm/debug-kernel.sh
# (39 min with make -j2 on two cores); nvsim.ko and vgpu.ko built for it from a copy
# of kmod/ in $(DEBUG_KMOD) (kmod/'s own objects are left alone).  The run
# fails on any kernel report and on a kmemleak scan after the run.
VGPU_CACHE ?= /var/cache/vgpu
DEBUG_KMOD := build/debug-kmod
DEBUG_APT_PACKAGES := linux-source-6.1 build-essential bc flex bison libelf-dev libssl-dev cpio
DEBUG_VM_TIMEOUT ?= 14400
DEBUG_TEST_TIMEOUT ?= 3600
# TCG's "-cpu max" has 5-level paging, and KASAN then reports a wild access
# in an interrupt taken while the boot CPU is identified: boot with 4 levels
DEBUG_APPEND ?= no5lvl

deps-debug:
	@$(MAKE) --no-print-directory deps-apt APT_PACKAGES="$(DEBUG_APT_PACKAGES)"

debug-kernel: deps-debug
	VGPU_CACHE=$(VGPU_CACHE) tools/vm/debug-kernel.sh build

test-debug: deps-python deps-debug runtime
	@kdir=$$(VGPU_CACHE=$(VGPU_CACHE) tools/vm/debug-kernel.sh modules $(DEBUG_KMOD)) || exit 1; \
	echo "==== VM tests on the debug kernel ($$kdir) ===="; \
	$(PYTHON) tools/vm/vm.py run --kernel-dir "$$kdir" --kmemleak --mem 3072 \
		--timeout $(DEBUG_VM_TIMEOUT) $(VM_LOAD) --append "$(DEBUG_APPEND)" \
		--nvsim-ko $(CURDIR)/$(DEBUG_KMOD)/nvsim/nvsim.ko --vgpu-ko $(CURDIR)/$(DEBUG_KMOD)/vgpu/vgpu.ko \
		-- $(VPY) -m pytest --color=no --timeout=$(DEBUG_TEST_TIMEOUT) $(PYTEST_ARGS) $(VM_TESTS)

# The ioctl fuzzer (docs/fuzzing.md): tools/fuzz/nvfuzz.c built into
# build/nvfuzz, run by tools/fuzz/run.py in the VM on three slices (small
# quotas) and on nvsim's own nodes at once, which then checks quotas, the
# charges against nvsim's, and that everything returns to zero.
# FUZZ_SEED: default time-based (printed; rerun with it); FUZZ_CALLS: total
# calls of all fuzzers (default 200000 unless FUZZ_SECONDS is given);
# FUZZ_SECONDS: time budget per fuzzer; FUZZ_ARGS: more run.py options
# (--slices, --quota, --procs, --threads); FUZZ_KERNEL=debug: on the debug
# kernel (as make fuzz-debug).
FUZZ_SEED ?= $(shell date +%s)
FUZZ_SEED := $(FUZZ_SEED)
FUZZ_SECONDS ?=
FUZZ_CALLS ?= $(if $(FUZZ_SECONDS),,200000)
FUZZ_ARGS ?=
FUZZ_KERNEL ?=
FUZZ_VM_TIMEOUT ?= 3000
NVFUZZ_CFLAGS := $(RUNTIME_CFLAGS) -pthread -Itools/fuzz/shim -Ikmod/include
FUZZ_RUN = $(VPY) tools/fuzz/run.py --seed $(FUZZ_SEED) $(if $(FUZZ_CALLS),--calls $(FUZZ_CALLS)) \
	$(if $(FUZZ_SECONDS),--seconds $(FUZZ_SECONDS)) $(FUZZ_ARGS)

# nvlog.so: an LD_PRELOAD logger of a program's NVIDIA ioctls (tools/nvlog/nvlog.c)
build/nvlog.so: tools/nvlog/nvlog.c
	@mkdir -p build
	$(CC) $(RUNTIME_CFLAGS) -fPIC -shared -o $@ $< -ldl -lpthread

.PHONY: nvfuzz fuzz fuzz-debug
nvfuzz: build/nvfuzz
build/nvfuzz: tools/fuzz/nvfuzz.c kmod/include/nvabi.h kmod/include/nvrel.h \
		kmod/include/nvrel_tables.h $(wildcard tools/fuzz/shim/linux/*.h)
	@mkdir -p build
	$(CC) $(NVFUZZ_CFLAGS) -o $@ $<

ifeq ($(FUZZ_KERNEL),debug)
fuzz: fuzz-debug
else
fuzz: deps-python modules build/nvfuzz
	@echo "==== fuzz: seed $(FUZZ_SEED) (rerun: make fuzz FUZZ_SEED=$(FUZZ_SEED)) ===="
	$(VM) $(VM_LOAD) --timeout $(FUZZ_VM_TIMEOUT) -- $(FUZZ_RUN)
endif

fuzz-debug: deps-python deps-debug build/nvfuzz
	@kdir=$$(VGPU_CACHE=$(VGPU_CACHE) tools/vm/debug-kernel.sh modules $(DEBUG_KMOD)) || exit 1; \
	echo "==== fuzz on the debug kernel ($$kdir): seed $(FUZZ_SEED) ===="; \
	$(PYTHON) tools/vm/vm.py run --kernel-dir "$$kdir" --kmemleak --mem 3072 \
		--timeout $(DEBUG_VM_TIMEOUT) $(VM_LOAD) --append "$(DEBUG_APPEND)" \
		--nvsim-ko $(CURDIR)/$(DEBUG_KMOD)/nvsim/nvsim.ko --vgpu-ko $(CURDIR)/$(DEBUG_KMOD)/vgpu/vgpu.ko \
		-- $(FUZZ_RUN)

# The compute accuracy benchmark (docs/compute.md): configured vs achieved
# GPU time per case and per layer, measured by nvsim's busy accounting.
bench-compute: deps-python modules
	@mkdir -p build
	$(CC) -O2 -Wall -o build/tcg_factor bench/tcg_factor.c
	build/tcg_factor > build/tcg-host.json
	$(VM) $(VM_LOAD) --timeout 2400 -- $(VPY) bench/compute_accuracy.py --markdown - \
		--host-figures build/tcg-host.json \
		| tee build/bench-compute.log
	@{ echo "# Compute accuracy report"; echo; \
	  echo "Generated by \`make bench-compute\` on $$(date -u +%Y-%m-%d) ($$(nproc) host cores, emulated VM, nvsim;"; \
	  echo "period 100 ms, 5 s windows, 1 ms work items). Achieved = nvsim's busy time / wall time."; echo; \
	  sed -n '/^---- markdown ----$$/,/^---- end ----$$/p' build/bench-compute.log | sed '1d;$$d'; \
	} > bench/compute-report.md
	@echo "wrote bench/compute-report.md"

demo: deps
	@$(MAKE) --no-print-directory demo-run

# nvsim presents 535.261.03, the release of the NVIDIA user space make deps
# unpacks, so that nvidia-smi runs inside the demo's containers
demo-run: deps-python modules runtime
	$(VM) $(VM_LOAD) $(call NVSIM_AS,535.261.03) -- /bin/sh tools/demo.sh

clean:
	@for m in $(KMODS); do $(MAKE) --no-print-directory -C $(KDIR) M=$(CURDIR)/kmod/$$m clean >/dev/null 2>&1 || true; done
	rm -rf build

# ---------------------------------------------------------------- install
# On a real GPU node (README "On a real GPU node"): the Python package in its
# own venv under $(VGPU_HOME), the commands symlinked into $(BINDIR), the
# example config (as the config only where none exists), the systemd unit,
# and vgpu.ko's sources with dkms.conf under /usr/src/vgpu-<version>.
# install-unit (the unit and the docs its Documentation= names) and
# install-dkms (the DKMS sources) stage alone too: tests/vm/test_unit.py and
# tests/host/test_dkms.py install what they check that way.
# DESTDIR stages the whole tree (paths inside it are the final ones).
# PIP_INSTALL_ARGS passes options to pip (e.g. --no-index --find-links DIR).
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
SYSCONFDIR ?= /etc
VGPU_HOME ?= /opt/vgpu
UNITDIR ?= /etc/systemd/system
DOCDIR ?= $(PREFIX)/share/doc/vgpu
DKMSDIR ?= /usr/src
PIP_INSTALL_ARGS ?=
# the one version (pyproject.toml reads it from there too)
VGPU_VERSION := $(shell sed -n 's/^__version__ *= *"\(.*\)"/\1/p' vgpu/__init__.py)
VGPU_VENV := $(VGPU_HOME)/venv
VGPU_SRC := $(DKMSDIR)/vgpu-$(VGPU_VERSION)
VGPU_COMMANDS := vgpud vgpuctl vgpu-oci-hook
VGPU_DOCS := README.md $(wildcard docs/*.md)
# systemctl only on the live system, not into a staging tree
LIVE_SYSTEMD := $(if $(DESTDIR),,$(wildcard /run/systemd/system))

.PHONY: install-unit install-dkms
install: install-unit install-dkms
	@case "$(VGPU_HOME)" in /?*) ;; *) echo "install: VGPU_HOME must be an absolute path"; exit 1;; esac
	test -d $(DESTDIR)$(VGPU_VENV) || $(PYTHON) -m venv $(DESTDIR)$(VGPU_VENV)
	@# built from a copy, so that setuptools leaves no build/ or egg-info here
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	cp -r pyproject.toml README.md vgpu "$$tmp"/ && rm -rf "$$tmp"/vgpu/__pycache__ && \
	$(DESTDIR)$(VGPU_VENV)/bin/python -m pip install -q --disable-pip-version-check \
		--no-warn-script-location --upgrade $(PIP_INSTALL_ARGS) "$$tmp"
	@# a staged venv names its staging path in scripts and activate: make it the final one
	$(if $(DESTDIR),grep -rlI -F -- '$(DESTDIR)$(VGPU_VENV)' $(DESTDIR)$(VGPU_VENV)/bin \
		$(DESTDIR)$(VGPU_VENV)/pyvenv.cfg | xargs -r sed -i 's|$(DESTDIR)$(VGPU_VENV)|$(VGPU_VENV)|g')
	@# the hook and the runtime wrapper run isolated whatever environment they
	@# are started with (-I: no PYTHONPATH, PYTHONWARNINGS, user site or working
	@# directory on sys.path); pip's console scripts start a plain python
	for c in vgpu-oci-hook:hook vgpu-runtime:runtime; do \
		f=$(DESTDIR)$(VGPU_VENV)/bin/$${c%%:*}; \
		printf '#!%s -I\nimport sys\nfrom vgpu.%s import main\nsys.exit(main())\n' \
			'$(VGPU_VENV)/bin/python' "$${c#*:}" > $$f && chmod 0755 $$f || exit 1; \
	done
	install -d $(DESTDIR)$(BINDIR)
	for c in $(VGPU_COMMANDS); do ln -sfn $(VGPU_VENV)/bin/$$c $(DESTDIR)$(BINDIR)/$$c; done
	@# vgpu-runtime: the C fast path, which execs runc, or for a bundle that may
	@# ask for a slice vgpu-runtime-slow: this venv's Python, isolated and
	@# without the site import (-IS), with the package's directory named
	site=$$($(DESTDIR)$(VGPU_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))') && \
	site=$${site#$(DESTDIR)} && \
	printf '#!%s -IS\nimport sys\nsys.path.insert(0, %s)\nfrom vgpu.cli.runtime import main\nsys.exit(main())\n' \
		'$(VGPU_VENV)/bin/python' "'$$site'" > $(DESTDIR)$(VGPU_SLOW_PATH) && \
		chmod 0755 $(DESTDIR)$(VGPU_SLOW_PATH)
	rm -f $(DESTDIR)$(BINDIR)/vgpu-runtime
	$(CC) $(RUNTIME_CFLAGS) -DVGPU_SLOW_PATH='"$(VGPU_SLOW_PATH)"' \
		-o $(DESTDIR)$(BINDIR)/vgpu-runtime container-hook/vgpu-runtime.c
	install -d $(DESTDIR)$(VGPU_HOME)/share $(DESTDIR)$(SYSCONFDIR)/vgpu
	install -m 0644 config/vgpud.example.toml $(DESTDIR)$(VGPU_HOME)/share/vgpud.example.toml
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/vgpu/vgpud.toml ]; then \
		echo "install: kept the existing $(SYSCONFDIR)/vgpu/vgpud.toml"; \
	else install -m 0644 config/vgpud.example.toml $(DESTDIR)$(SYSCONFDIR)/vgpu/vgpud.toml; fi
	@echo "install: done.  Next: dkms install vgpu/$(VGPU_VERSION); edit $(SYSCONFDIR)/vgpu/vgpud.toml;"
	@echo "         systemctl enable --now vgpud"

# the unit names its commands in /usr/bin and its docs in /usr/share/doc/vgpu:
# both are rewritten to where they are installed
install-unit:
	install -d $(DESTDIR)$(DOCDIR)
	install -m 0644 $(VGPU_DOCS) $(DESTDIR)$(DOCDIR)/
	install -d $(DESTDIR)$(UNITDIR)
	sed -E -e 's#(/usr/local/bin|/usr/bin)/(vgpud|vgpuctl|vgpu-oci-hook)([[:space:]]|$$)#$(BINDIR)/\2\3#g' \
		-e 's#file:///usr/share/doc/vgpu/#file://$(DOCDIR)/#g' \
		packaging/vgpud.service > $(DESTDIR)$(UNITDIR)/vgpud.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/vgpud.service
	$(if $(LIVE_SYSTEMD),-systemctl daemon-reload)

install-dkms:
	rm -rf $(DESTDIR)$(VGPU_SRC)
	install -d $(DESTDIR)$(VGPU_SRC)/vgpu $(DESTDIR)$(VGPU_SRC)/include/uapi
	install -m 0644 kmod/vgpu/Kbuild $(filter-out %.mod.c,$(wildcard kmod/vgpu/*.c)) \
		kmod/vgpu/*.h $(DESTDIR)$(VGPU_SRC)/vgpu/
	install -m 0644 kmod/include/nvabi.h kmod/include/nvrel.h kmod/include/nvrel_tables.h $(DESTDIR)$(VGPU_SRC)/include/
	install -m 0644 kmod/include/uapi/*.h $(DESTDIR)$(VGPU_SRC)/include/uapi/
	install -m 0755 kmod/dkms-build.sh kmod/nvidia-symvers.sh $(DESTDIR)$(VGPU_SRC)/
	sed 's/@VERSION@/$(VGPU_VERSION)/' kmod/dkms.conf > $(DESTDIR)$(VGPU_SRC)/dkms.conf

uninstall:
	@case "$(VGPU_HOME)" in /?*) ;; *) echo "uninstall: VGPU_HOME must be an absolute path"; exit 1;; esac
	$(if $(LIVE_SYSTEMD),-systemctl disable --now vgpud 2>/dev/null)
	rm -f $(DESTDIR)$(UNITDIR)/vgpud.service
	$(if $(LIVE_SYSTEMD),-systemctl daemon-reload)
	for c in $(VGPU_COMMANDS); do l=$(DESTDIR)$(BINDIR)/$$c; \
		case "$$(readlink $$l 2>/dev/null)" in $(VGPU_VENV)/*) rm -f $$l;; esac; done
	-grep -qsF '$(VGPU_SLOW_PATH)' $(DESTDIR)$(BINDIR)/vgpu-runtime && rm -f $(DESTDIR)$(BINDIR)/vgpu-runtime
	$(if $(DESTDIR),,-if command -v dkms >/dev/null && dkms status vgpu/$(VGPU_VERSION) | grep -q .; \
		then dkms remove vgpu/$(VGPU_VERSION) --all; fi)
	rm -rf $(DESTDIR)$(VGPU_SRC) $(DESTDIR)$(VGPU_VENV) $(DESTDIR)$(DOCDIR)
	rm -f $(DESTDIR)$(VGPU_HOME)/share/vgpud.example.toml
	-rmdir $(DESTDIR)$(VGPU_HOME)/share $(DESTDIR)$(VGPU_HOME) 2>/dev/null
	@echo "uninstall: kept $(SYSCONFDIR)/vgpu (the config) and vgpud's state directory"
