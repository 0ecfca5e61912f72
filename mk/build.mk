# What the tests and the demo run that is built here: the kernel modules,
# vgpu-runtime's C fast path, nvlog.so and the ioctl fuzzer.
.PHONY: modules runtime nvfuzz clean

modules:
	@test -d "$(KDIR)" || { echo "no kernel headers at $(KDIR): run 'make deps'"; exit 1; }
	@for m in $(KMODS); do \
		$(MAKE) --no-print-directory -C $(KDIR) M=$(CURDIR)/kmod/$$m modules || exit 1; \
	done

# vgpu-runtime's fast path (container-hook/vgpu-runtime.c): execs runc at once
# for containers that cannot ask for a slice, else the Python slow path
# (VGPU_SLOW_PATH, overridden by $$VGPU_RUNTIME_SLOW)
RUNTIME_CFLAGS := -O2 -Wall -Wextra -Werror
VGPU_SLOW_PATH = $(VGPU_VENV)/bin/vgpu-runtime-slow
runtime: build/vgpu-runtime
build/vgpu-runtime: container-hook/vgpu-runtime.c
	@mkdir -p build
	$(CC) $(RUNTIME_CFLAGS) -DVGPU_SLOW_PATH='"$(VGPU_SLOW_PATH)"' -o $@ $<

# nvlog.so: an LD_PRELOAD logger of a program's NVIDIA ioctls (tools/nvlog/nvlog.c)
build/nvlog.so: tools/nvlog/nvlog.c
	@mkdir -p build
	$(CC) $(RUNTIME_CFLAGS) -fPIC -shared -o $@ $< -ldl -lpthread

# the ioctl fuzzer (mk/fuzz.mk, docs/fuzzing.md)
NVFUZZ_CFLAGS := $(RUNTIME_CFLAGS) -pthread -Itools/fuzz/shim -Ikmod/include
nvfuzz: build/nvfuzz
build/nvfuzz: tools/fuzz/nvfuzz.c kmod/include/nvabi.h kmod/include/nvrel.h \
		kmod/include/nvrel_tables.h $(wildcard tools/fuzz/shim/linux/*.h)
	@mkdir -p build
	$(CC) $(NVFUZZ_CFLAGS) -o $@ $<

clean:
	@for m in $(KMODS); do $(MAKE) --no-print-directory -C $(KDIR) M=$(CURDIR)/kmod/$$m clean >/dev/null 2>&1 || true; done
	rm -rf build
