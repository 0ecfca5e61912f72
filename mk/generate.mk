# make generate: every committed generated file again, from what it is made
# from, in dependency order; `git diff` then shows what a change to a
# generator or its inputs changed.  Each generator is a target of its own; a
# new one joins with a line `generate: generate-foo` (here or in its own
# mk/*.mk file), with its own prerequisites for what it reads.
#
# Not here: the tables measured from NVIDIA's headers (python3 -m tools.nvgen,
# tools.nvgen.embedded, tools.nvgen.nvproxy: they need the vendor archives,
# NVIDIA's git clone and a gVisor checkout, tools/nvgen/README.md), which
# come before these, and bench/compute-report.md (make bench-compute).
.PHONY: generate generate-policy generate-lists generate-kernel generate-names

# the vendor archives (tools/nvgen/README.md); without them the params lists
# are not measured again and the committed ones are used
NVGEN_VENDOR ?= $(abspath $(CURDIR)/../shared/vendor)
GENERATE_LISTS := $(if $(wildcard $(NVGEN_VENDOR)/nvidia-abi-headers-*.tar.xz),generate-lists)

generate: generate-policy $(GENERATE_LISTS) generate-kernel generate-names

# the mediation policy per release: kmod/vgpu/policy/<release>.tsv and its
# README.md, from tools/nvgen/out, embedded and nvproxy
generate-policy:
	$(PYTHON) -m tools.nvgen.policy

# where in its params each list an item points to lies (tools/nvgen/out/
# <release>/lists*.tsv), measured with gcc against the release's headers
generate-lists: generate-policy
	$(PYTHON) -m tools.nvgen.lists --vendor $(NVGEN_VENDOR)

# the kernel's per-release tables (kmod/include/nvrel_tables.h) and
# vgpu/abi/nvrel.py, from the policy and the lists
generate-kernel: generate-policy $(GENERATE_LISTS)
	$(PYTHON) -m tools.nvgen.kernel

# NVIDIA's names by number (vgpu/abi/nvnames.py), from the policy
generate-names: generate-policy
	$(PYTHON) -m tools.nvgen.names

# vgpu.ko's netlink policies, ops and uapi header and the Python tables,
# from their spec, kmod/netlink/vgpu.yaml (tools/ynl_gen.py)
.PHONY: generate-netlink
generate: generate-netlink
generate-netlink:
	$(PYTHON) tools/ynl_gen.py
