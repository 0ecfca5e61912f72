# make test: every part of the test run, each its own target.
.PHONY: test test-run test-host test-vm test-vm-oldest test-vm-releases test-vm-reload \
	test-vm-real test-vm-real535 test-vm-nvml

# `make test` and `make demo` install what is missing first (make deps is
# idempotent: a dpkg query and a stamp when all is there), then run in a
# fresh make, which sees the kernel headers deps may just have installed.
test: deps
	@$(MAKE) --no-print-directory test-run

# The whole run is its parts, in this order.  test-run builds what they all
# need once; each part then runs in a sub-make that does not remake that
# (make's -o).  A part that fails does not stop the next ones; the run fails
# if any part failed.  A new part is a target below added to TEST_PARTS.
TEST_PARTS := test-host test-vm test-vm-oldest test-vm-releases test-vm-reload \
	test-vm-real test-vm-real535 test-vm-nvml
TEST_BUILT := deps-python modules runtime build/nvfuzz build/nvlog.so
test-run: $(TEST_BUILT)
	@rc=0; for t in $(TEST_PARTS); do \
		$(MAKE) --no-print-directory $(addprefix -o ,$(TEST_BUILT)) $$t || rc=1; \
	done; \
	if [ $$rc = 0 ]; then echo "make test: all passed"; else echo "make test: FAILED"; fi; \
	exit $$rc

test-host: deps-python
	@echo "==== host tests ===="
	$(VPY) -m pytest $(PYTEST_ARGS) tests/host

test-vm: deps-python modules runtime build/nvfuzz build/nvlog.so
	@echo "==== VM tests (nvsim in qemu) ===="
	$(VM) $(VM_LOAD) -- $(VPY) -m pytest --color=no $(PYTEST_ARGS) $(VM_TESTS)

test-vm-oldest: deps-python modules
	@echo "==== VM mediation tests, nvsim as $(OLDEST_RELEASE) ===="
	$(VM) $(VM_LOAD) $(NVSIM_OLDEST) -- $(VPY) -m pytest --color=no $(PYTEST_ARGS) $(VM_TESTS_OLDEST)

# The per-item policy test for every release between the oldest and newest.
test-vm-releases: deps-python modules
	@rc=0; for r in $(MIDDLE_RELEASES); do \
		echo "==== VM policy tests, nvsim as $$r ===="; \
		$(VM) $(VM_LOAD) $(call NVSIM_AS,$$r) -- $(VPY) -m pytest --color=no $(PYTEST_ARGS) \
			tests/vm/test_vgpu_policy.py || rc=1; \
	done; exit $$rc

# The VM tests that load nvsim themselves and start without vgpu.ko.
VM_TESTS_RELOAD := tests/vm/test_nvsim_startup.py tests/vm/test_nvsim_pbdma.py \
	tests/vm/test_tinygrad.py tests/vm/test_tinygrad_slice.py tests/vm/test_trace_corpus.py \
	tests/vm/test_cuda.py tests/vm/test_cuda_slice.py tests/vm/test_container_nvidia.py
test-vm-reload: deps-python modules runtime build/nvlog.so
	@echo "==== VM tests that reload nvsim (start without vgpu.ko): start-up, client-memory channels, tinygrad on nvsim and through a slice in a containerd container, the trace corpus replayed, NVIDIA's libcuda on nvsim and through a slice, libcuda and nvidia-smi in a containerd container ===="
	$(VM) --load-nvsim -- $(VPY) -m pytest --color=no $(PYTEST_ARGS) $(VM_TESTS_RELOAD)

# NVIDIA's own driver in the VM (tools/realdrv): 595.45.04's nvidia.ko and
# nvidia-uvm.ko, built once per machine from the vendor archive into
# $(VGPU_CACHE)/realdrv (about 11 min on two cores), loaded with no GPU (the
# RM core and UVM only), and vgpu.ko linked against them.
REALDRV_VGPU := build/realdrv
test-vm-real: deps-python
	@drv=$$(VGPU_CACHE=$(VGPU_CACHE) $(VPY) -m tools.realdrv.build \
		--vgpu-out $(REALDRV_VGPU)) && \
	echo "==== VM tests on NVIDIA's driver ($$drv) ====" && \
	$(VM) --load-nvidia "$$drv" --load-vgpu --vgpu-ko $(CURDIR)/$(REALDRV_VGPU)/kmod/vgpu/vgpu.ko \
		-- $(VPY) -m pytest --color=no $(PYTEST_ARGS) tests/realdrv

# The same for 535.261.03, the release whose user space Debian ships (make
# deps unpacks it, tools/nvuser.py): NVIDIA's libcuda and nvidia-smi on
# NVIDIA's driver, alone and through a slice, logged by build/nvlog.so
# (tests/realdrv535; cold build about 20 min on two cores, then cached).
REALDRV535_VGPU := build/realdrv535
test-vm-real535: deps-python build/nvlog.so
	@drv=$$(VGPU_CACHE=$(VGPU_CACHE) $(VPY) -m tools.realdrv.build \
		--release 535.261.03 --vgpu-out $(REALDRV535_VGPU)) && \
	echo "==== VM tests on NVIDIA's 535 driver and user space ($$drv) ====" && \
	$(VM) --load-nvidia "$$drv" --load-vgpu --vgpu-ko $(CURDIR)/$(REALDRV535_VGPU)/kmod/vgpu/vgpu.ko \
		-- $(VPY) -m pytest --color=no $(PYTEST_ARGS) tests/realdrv535


# nvidia-smi and NVML with NVIDIA's libcuda as the compute app, on nvsim and
# through slices (docs/nvml.md): nvsim presents 535.261.03 with fb_backing=1,
# which libcuda's cuCtxCreate needs (the other tests of the two files run
# here too; test-vm-oldest runs them without fb_backing, the CUDA ones skip).
VM_TESTS_NVML := tests/vm/test_nvidia_smi.py tests/vm/test_vgpu_nvidia_smi.py
test-vm-nvml: deps-python modules runtime
	@echo "==== VM tests: nvidia-smi and NVML with NVIDIA's libcuda, on nvsim and through slices ===="
	$(VM) $(VM_LOAD) $(call NVSIM_AS,535.261.03 fb_backing=1) -- \
		$(VPY) -m pytest --color=no $(PYTEST_ARGS) $(VM_TESTS_NVML)
