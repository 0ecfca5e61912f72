"""The libcuda tests' driver-API sequence and PTX, and the harness they share
with bench/ (tools/testbed/cuda.py: where NVIDIA's user-space libraries are
unpacked, the ctypes child, nvlog's lines), re-exported here so that the
test files import one module.
"""

from __future__ import annotations

from tools.testbed.cuda import (PRELUDE, RELEASE, control_status, cuda_child,  # noqa: F401
                                in_slice, libcuda_missing, nvidia_lib, nvidia_userspace,
                                nvlog_lines, popen_cuda, run_cuda)

# The driver-API sequence past cuCtxCreate; exact figures are asserted by
# the caller (nvsim directly, or a slice's quota).
SEQUENCE = """
    check('cuInit', 0)
    dev = ctypes.c_int()
    check('cuDeviceGet', ctypes.byref(dev), 0)
    ctx = ctypes.c_void_p()
    check('cuCtxCreate_v2', ctypes.byref(ctx), 0, dev)
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    check('cuMemGetInfo_v2', ctypes.byref(free), ctypes.byref(total))
    out['free'], out['total'] = free.value, total.value
    # cuMemAlloc until CUDA_ERROR_OUT_OF_MEMORY (2), in CHUNK pieces
    chunk, ptrs = CHUNK, []
    while len(ptrs) < 100000:
        p = ctypes.c_uint64()
        r = cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(chunk))
        if r:
            out['alloc_error'] = r
            break
        ptrs.append(p.value)
    out['allocated'] = len(ptrs) * chunk
    for q in ptrs[1:]:
        check('cuMemFree_v2', ctypes.c_uint64(q))
    d = ctypes.c_uint64(ptrs[0])
    src = (ctypes.c_ubyte * 65536)(*[(i * 7 + 3) & 255 for i in range(65536)])
    dst = (ctypes.c_ubyte * 65536)()
    check('cuMemcpyHtoD_v2', d, src, ctypes.c_size_t(65536))
    check('cuMemcpyDtoH_v2', dst, d, ctypes.c_size_t(65536))
    out['copied'] = bytes(src) == bytes(dst)
    hp = ctypes.c_void_p()
    check('cuMemAllocHost_v2', ctypes.byref(hp), ctypes.c_size_t(1 << 20))
    buf = ctypes.create_string_buffer(1 << 20)
    check('cuMemHostRegister_v2', buf, ctypes.c_size_t(1 << 20), 0)
    st, ev = ctypes.c_void_p(), ctypes.c_void_p()
    check('cuStreamCreate', ctypes.byref(st), 0)
    check('cuEventCreate', ctypes.byref(ev), 0)
    check('cuEventRecord', ev, st)
    check('cuEventSynchronize', ev)
    check('cuStreamSynchronize', st)
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    check('cuModuleLoadData', ctypes.byref(mod), PTX)
    check('cuModuleGetFunction', ctypes.byref(fn), mod, b'k')
    arg = ctypes.c_uint64(d.value)
    args = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(arg), ctypes.c_void_p))
    check('cuLaunchKernel', fn, 1, 1, 1, 1, 1, 1, 0, st, args, None)
    check('cuStreamSynchronize', st)
    check('cuMemHostUnregister', buf)
    check('cuMemFreeHost', hp)
    check('cuMemFree_v2', d)
    check('cuCtxDestroy_v2', ctx)
    print(json.dumps(out))
"""

# A kernel that stores 42 through its pointer argument: JIT'd by libcuda
# (libnvidia-ptxjitcompiler) for sm_90.  nvsim never runs it.
PTX = (b".version 7.0\n.target sm_50\n.address_size 64\n"
       b".visible .entry k(.param .u64 p)\n{\n .reg .b64 %rd<2>;\n .reg .b32 %r<2>;\n"
       b" ld.param.u64 %rd1, [p];\n cvta.to.global.u64 %rd1, %rd1;\n"
       b" mov.u32 %r1, 42;\n st.global.u32 [%rd1], %r1;\n ret;\n}\n")


def sequence_body(chunk: int) -> str:
    return f"    CHUNK = {chunk}\n    PTX = {PTX!r}\n" + SEQUENCE
