"""tests/vm/test_vgpu_uvm.py's managed-range tests, run on NVIDIA's own UVM
driver (595.45.04, no GPU: managed ranges are CPU-resident) instead of
nvsim's model of it.  The same test functions, imported: what they assert
of vgpu.ko's charges (mmap, partial munmap, mremap move and shrink, fork,
exit) must hold on the driver the model was written from.

Left out: test_map_external_stays_charged_while_a_forked_copy_holds_the_va_space
(it needs FB to map, hence a GPU).
"""

from __future__ import annotations

# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from vgpu_fixtures import kern, make_slice, vgpu_leak_check, vstate  # noqa: F401
from test_vgpu_uvm import (  # noqa: F401
    usl,
    test_managed_range_charged_while_mapped,
    test_range_over_the_quota_refused,
    test_partial_munmap_returns_that_part,
    test_mremap_move_returns_the_charge_and_pins_nothing,
    test_mremap_shrink_returns_the_tail,
    test_fork_copy_is_disabled_and_charged_once,
    test_exit_with_a_mapped_range_returns_everything,
    test_mm_initialize_is_answered_nothing_to_do,
)
