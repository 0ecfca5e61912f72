"""vgpud: the daemon (trio, pyroute2, pyfuse3, pynvml).

main (start-up, services), api (the admin socket), slices (the slice
manager), policy and compute (placement, admission, shares), config, state,
inventory, metrics, fs (the FUSE file system), kernel (vgpu.ko's netlink).
"""
