"""The rules shared by vgpud, vgpuctl, the OCI hook, vgpu-runtime and the
device plugin, standard library only (tests/host/test_layers.py checks):

- ``values``: every value's one parser and formatter (sizes, percentages,
  durations, names);
- ``request``: how a container asks for a slice (annotations, VGPU_* env,
  the annotation contract with the device plugin) and ``hook_argv``;
- ``apiclient``: vgpud's API client;
- ``histdoc``: the usage-history document;
- ``forecast``: the demand model;
- ``files``: ``atomic_write``.
"""
