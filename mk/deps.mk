# make deps: what demo and test install first (idempotent: a dpkg query and
# a stamp when all is there).
.PHONY: deps deps-apt deps-python deps-nvidia

APT_PACKAGES := qemu-system-x86 linux-image-amd64 linux-headers-amd64 busybox-static \
	libfuse3-dev fuse3 pkg-config kmod cpio runc containerd build-essential gcc make \
	python3-venv python3-dev patch chromium podman \
	ibverbs-utils rdmacm-utils perftest

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

