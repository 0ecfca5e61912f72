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
#   make generate  regenerate the committed generated files (policy, kernel tables, names)
#   make install on a real GPU node: vgpud/vgpuctl, unit, config, DKMS sources
#
# The rules are in mk/, one file per concern, included below in this order:
# deps.mk (make deps), build.mk (modules and C programs), test.mk (make test
# and its parts), debug.mk (the debug kernel), fuzz.mk, demo.mk (the demo and
# the compute benchmark), generate.mk, install.mk.
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
# Where what is built once per machine is kept: NVIDIA's user space
# (make deps), NVIDIA's drivers (tools/realdrv), the debug kernel.
VGPU_CACHE ?= /var/cache/vgpu
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

# vgpu.ko joins the build (and the VM test run) once its sources exist.
KMODS := nvsim $(if $(wildcard kmod/vgpu/Kbuild),vgpu)
VM_LOAD := --load-nvsim $(if $(wildcard kmod/vgpu/Kbuild),--load-vgpu)

.PHONY: all help
all: modules runtime

# this file's opening comment, up to its first line that is not one
help:
	@sed -n '/^#/!q; 2,$$p' Makefile | sed 's/^# \{0,1\}//'

include mk/deps.mk mk/build.mk mk/test.mk mk/debug.mk mk/fuzz.mk mk/demo.mk \
	mk/generate.mk mk/install.mk
