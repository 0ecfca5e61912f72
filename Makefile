# vgpu: build, test and demo entry points.  See README.md.
#
#   make deps    install every Debian package and the Python environment (idempotent)
#   make demo    the main job: boot the VM with the simulated GPU and run it
#   make test    all tests: host tests, then the VM tests against nvsim
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

APT_PACKAGES := qemu-system-x86 linux-image-amd64 linux-headers-amd64 busybox-static \
	libfuse3-dev fuse3 pkg-config kmod cpio runc containerd build-essential gcc make \
	python3-venv

# vgpu.ko joins the build (and the VM test run) once its sources exist.
KMODS := nvsim $(if $(wildcard kmod/vgpu/Kbuild),vgpu)
VM_LOAD := --load-nvsim $(if $(wildcard kmod/vgpu/Kbuild),--load-vgpu)

.PHONY: all deps deps-apt deps-python modules test test-host test-vm demo clean help \
	install uninstall

all: modules

help:
	@sed -n '2,8p' Makefile | sed 's/^# \{0,1\}//'

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

# ---------------------------------------------------------------- install
# On a real GPU node (README "On a real GPU node"): the Python package in its
# own venv under $(VGPU_HOME), the commands symlinked into $(BINDIR), the
# example config (as the config only where none exists), the systemd unit,
# and vgpu.ko's sources with dkms.conf under /usr/src/vgpu-<version>.
# DESTDIR stages the whole tree (paths inside it are the final ones).
# PIP_INSTALL_ARGS passes options to pip (e.g. --no-index --find-links DIR).
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
SYSCONFDIR ?= /etc
VGPU_HOME ?= /opt/vgpu
UNITDIR ?= /etc/systemd/system
DKMSDIR ?= /usr/src
PIP_INSTALL_ARGS ?=
VGPU_VERSION := $(shell sed -n 's/^version *= *"\(.*\)"/\1/p' pyproject.toml)
VGPU_VENV := $(VGPU_HOME)/venv
VGPU_SRC := $(DKMSDIR)/vgpu-$(VGPU_VERSION)
VGPU_COMMANDS := vgpud vgpuctl vgpu-oci-hook vgpu-runtime
# systemctl only on the live system, not into a staging tree
LIVE_SYSTEMD := $(if $(DESTDIR),,$(wildcard /run/systemd/system))

install:
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
	install -d $(DESTDIR)$(BINDIR)
	for c in $(VGPU_COMMANDS); do ln -sfn $(VGPU_VENV)/bin/$$c $(DESTDIR)$(BINDIR)/$$c; done
	install -d $(DESTDIR)$(VGPU_HOME)/share $(DESTDIR)$(SYSCONFDIR)/vgpu
	install -m 0644 config/vgpud.example.toml $(DESTDIR)$(VGPU_HOME)/share/vgpud.example.toml
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/vgpu/vgpud.toml ]; then \
		echo "install: kept the existing $(SYSCONFDIR)/vgpu/vgpud.toml"; \
	else install -m 0644 config/vgpud.example.toml $(DESTDIR)$(SYSCONFDIR)/vgpu/vgpud.toml; fi
	@if [ -f packaging/vgpud.service ]; then \
		install -d $(DESTDIR)$(UNITDIR) && \
		sed -E 's#(/usr/local/bin|/usr/bin)/(vgpud|vgpuctl|vgpu-oci-hook)([[:space:]]|$$)#$(BINDIR)/\2\3#g' \
			packaging/vgpud.service > $(DESTDIR)$(UNITDIR)/vgpud.service && \
		chmod 0644 $(DESTDIR)$(UNITDIR)/vgpud.service && \
		echo "install: $(UNITDIR)/vgpud.service"; \
	else echo "install: no packaging/vgpud.service yet: no unit installed"; fi
	$(if $(LIVE_SYSTEMD),-systemctl daemon-reload)
	rm -rf $(DESTDIR)$(VGPU_SRC)
	install -d $(DESTDIR)$(VGPU_SRC)/vgpu $(DESTDIR)$(VGPU_SRC)/include/uapi
	install -m 0644 kmod/vgpu/Kbuild $(filter-out %.mod.c,$(wildcard kmod/vgpu/*.c)) \
		kmod/vgpu/*.h $(DESTDIR)$(VGPU_SRC)/vgpu/
	install -m 0644 kmod/include/nvabi.h $(DESTDIR)$(VGPU_SRC)/include/
	install -m 0644 kmod/include/uapi/*.h $(DESTDIR)$(VGPU_SRC)/include/uapi/
	install -m 0755 kmod/dkms-build.sh $(DESTDIR)$(VGPU_SRC)/
	sed 's/@VERSION@/$(VGPU_VERSION)/' kmod/dkms.conf > $(DESTDIR)$(VGPU_SRC)/dkms.conf
	@echo "install: done.  Next: dkms install vgpu/$(VGPU_VERSION); edit $(SYSCONFDIR)/vgpu/vgpud.toml;"
	@echo "         systemctl enable --now vgpud"

uninstall:
	@case "$(VGPU_HOME)" in /?*) ;; *) echo "uninstall: VGPU_HOME must be an absolute path"; exit 1;; esac
	$(if $(LIVE_SYSTEMD),-systemctl disable --now vgpud 2>/dev/null)
	rm -f $(DESTDIR)$(UNITDIR)/vgpud.service
	$(if $(LIVE_SYSTEMD),-systemctl daemon-reload)
	for c in $(VGPU_COMMANDS); do l=$(DESTDIR)$(BINDIR)/$$c; \
		case "$$(readlink $$l 2>/dev/null)" in $(VGPU_VENV)/*) rm -f $$l;; esac; done
	$(if $(DESTDIR),,-if command -v dkms >/dev/null && dkms status vgpu/$(VGPU_VERSION) | grep -q .; \
		then dkms remove vgpu/$(VGPU_VERSION) --all; fi)
	rm -rf $(DESTDIR)$(VGPU_SRC) $(DESTDIR)$(VGPU_VENV)
	rm -f $(DESTDIR)$(VGPU_HOME)/share/vgpud.example.toml
	-rmdir $(DESTDIR)$(VGPU_HOME)/share $(DESTDIR)$(VGPU_HOME) 2>/dev/null
	@echo "uninstall: kept $(SYSCONFDIR)/vgpu (the config) and vgpud's state directory"
