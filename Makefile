# vgpu: build, test and demo entry points.  See README.md.
#
#   make deps    install every Debian package and the Python environment (idempotent)
#   make demo    the main job: boot the VM with the simulated GPU and run it
#   make test    all tests: host tests, then the VM tests against nvsim
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

APT_PACKAGES := qemu-system-x86 linux-image-amd64 linux-headers-amd64 busybox-static \
	libfuse3-dev fuse3 pkg-config kmod cpio runc containerd build-essential gcc make \
	python3-venv

# vgpu.ko joins the build (and the VM test run) once its sources exist.
KMODS := nvsim $(if $(wildcard kmod/vgpu/Kbuild),vgpu)
VM_LOAD := --load-nvsim $(if $(wildcard kmod/vgpu/Kbuild),--load-vgpu)

.PHONY: all deps deps-apt deps-python modules test test-host test-vm demo clean help

all: modules

help:
	@sed -n '2,7p' Makefile | sed 's/^# \{0,1\}//'

deps: deps-apt deps-python

deps-apt:
	@missing=$$(for p in $(APT_PACKAGES); do \
		dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; \
	done); \
	if [ -n "$$missing" ]; then \
		echo "deps: installing:" $$missing; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	else echo "deps: Debian packages present"; fi

deps-python: $(VENV)/.deps-stamp

$(VENV)/.deps-stamp: pyproject.toml
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $@

modules:
	@test -d "$(KDIR)" || { echo "no kernel headers at $(KDIR): run 'make deps'"; exit 1; }
	@for m in $(KMODS); do \
		$(MAKE) --no-print-directory -C $(KDIR) M=$(CURDIR)/kmod/$$m modules || exit 1; \
	done

test: deps-python modules
	@rc=0; \
	echo "==== host tests ===="; \
	$(VPY) -m pytest $(PYTEST_ARGS) tests/host || rc=1; \
	echo "==== VM tests (nvsim in qemu) ===="; \
	$(VM) $(VM_LOAD) -- $(VPY) -m pytest --color=no $(PYTEST_ARGS) $(VM_TESTS) || rc=1; \
	if [ $$rc = 0 ]; then echo "make test: all passed"; else echo "make test: FAILED"; fi; \
	exit $$rc

test-host: deps-python
	$(VPY) -m pytest $(PYTEST_ARGS) tests/host

test-vm: deps-python modules
	$(VM) $(VM_LOAD) -- $(VPY) -m pytest --color=no $(PYTEST_ARGS) $(VM_TESTS)

demo: deps-python modules
	$(VM) $(VM_LOAD) -- /bin/sh tools/demo.sh

clean:
	@for m in $(KMODS); do $(MAKE) --no-print-directory -C $(KDIR) M=$(CURDIR)/kmod/$$m clean >/dev/null 2>&1 || true; done
	rm -rf build
