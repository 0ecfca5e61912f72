.PHONY: deps-debug debug-kernel test-debug

# The debug kernel (README "The debug kernel"): Debian's linux-source-6.1
# with KASAN, lockdep, kmemleak, UBSAN, DEBUG_LIST and fault injection, built
# once per machine into $(VGPU_CACHE)/debug-kernel/ by tools/vm/debug-kernel.sh
# (39 min with make -j2 on two cores); nvsim.ko and vgpu.ko built for it from a copy
# of kmod/ in $(DEBUG_KMOD) (kmod/'s own objects are left alone).  The run
# fails on any kernel report and on a kmemleak scan after the run.
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

# The debug kernel's modules (built if needed; the shell variable kdir names
# the kernel) and the VM command that boots it, for test-debug and fuzz-debug
DEBUG_MODULES = kdir=$$(VGPU_CACHE=$(VGPU_CACHE) tools/vm/debug-kernel.sh modules $(DEBUG_KMOD)) || exit 1
DEBUG_VM = $(PYTHON) tools/vm/vm.py run --kernel-dir "$$kdir" --kmemleak --mem 3072 \
	--timeout $(DEBUG_VM_TIMEOUT) $(VM_LOAD) --append "$(DEBUG_APPEND)" \
	--nvsim-ko $(CURDIR)/$(DEBUG_KMOD)/nvsim/nvsim.ko --vgpu-ko $(CURDIR)/$(DEBUG_KMOD)/vgpu/vgpu.ko

test-debug: deps-python deps-debug runtime
	@$(DEBUG_MODULES); \
	echo "==== VM tests on the debug kernel ($$kdir) ===="; \
	$(DEBUG_VM) -- $(VPY) -m pytest --color=no --timeout=$(DEBUG_TEST_TIMEOUT) $(PYTEST_ARGS) $(VM_TESTS)

