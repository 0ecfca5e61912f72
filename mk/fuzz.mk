# The ioctl fuzzer (docs/fuzzing.md): tools/fuzz/nvfuzz.c built into
# build/nvfuzz (mk/build.mk), run by tools/fuzz/run.py in the VM on three
# slices (small quotas) and on nvsim's own nodes at once, which then checks
# quotas, the charges against nvsim's, and that everything returns to zero.
# FUZZ_SEED: default time-based (printed; rerun with it); FUZZ_CALLS: total
# calls of all fuzzers (default 200000 unless FUZZ_SECONDS is given);
# FUZZ_SECONDS: time budget per fuzzer; FUZZ_ARGS: more run.py options
# (--slices, --quota, --procs, --threads); FUZZ_KERNEL=debug: on the debug
# kernel (as make fuzz-debug).
.PHONY: fuzz fuzz-debug

FUZZ_SEED ?= $(shell date +%s)
FUZZ_SEED := $(FUZZ_SEED)
FUZZ_SECONDS ?=
FUZZ_CALLS ?= $(if $(FUZZ_SECONDS),,200000)
FUZZ_ARGS ?=
FUZZ_KERNEL ?=
FUZZ_VM_TIMEOUT ?= 3000
FUZZ_RUN = $(VPY) tools/fuzz/run.py --seed $(FUZZ_SEED) $(if $(FUZZ_CALLS),--calls $(FUZZ_CALLS)) \
	$(if $(FUZZ_SECONDS),--seconds $(FUZZ_SECONDS)) $(FUZZ_ARGS)

ifeq ($(FUZZ_KERNEL),debug)
fuzz: fuzz-debug
else
fuzz: deps-python modules build/nvfuzz
	@echo "==== fuzz: seed $(FUZZ_SEED) (rerun: make fuzz FUZZ_SEED=$(FUZZ_SEED)) ===="
	$(VM) $(VM_LOAD) --timeout $(FUZZ_VM_TIMEOUT) -- $(FUZZ_RUN)
endif

# on the debug kernel (mk/debug.mk)
fuzz-debug: deps-python deps-debug build/nvfuzz
	@$(DEBUG_MODULES); \
	echo "==== fuzz on the debug kernel ($$kdir): seed $(FUZZ_SEED) ===="; \
	$(DEBUG_VM) -- $(FUZZ_RUN)
