"""vgpu.ko's generic-netlink family "vgpu" as a library, for vgpud, tools/
and bench/ alike:

- ``netlink``: raw netlink, standard library only: constants, the header
  structs, the one attribute encoder (``Nla``, ``encode_attrs``, ``nla``,
  ``nest``, ``nlmsg``) and walker, the socket, the error parser; the fuzzer
  (tools/fuzz/nlfuzz.py) encodes with it too;
- ``messages``: the family's messages as pyroute2 classes, the data types
  and their decoders;
- ``client``: ``VgpuKernel``, the blocking client;
- ``streams``: ``EventStream`` and ``TraceStream``, the multicast listeners.

This package's __init__ imports nothing, so ``vgpu.vgpuko.netlink`` loads
without pyroute2.
"""
