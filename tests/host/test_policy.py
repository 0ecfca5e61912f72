"""vgpu.daemon.policy: admission rules and placement (docs/api.md)."""
import pytest

from vgpu.daemon.policy import AdmissionError, GpuView, admit, place, reserves_compute

GiB = 1 << 30


def gpu(i, total=16, alloc=0, fixed=0.0):
    return GpuView(index=i, uuid=f"GPU-{i}", memory_total=total * GiB,
                   memory_allocated=alloc * GiB, compute_fixed=fixed)


# ---- memory ---------------------------------------------------------------

def test_admit_fits():
    admit(gpu(0, alloc=8), 8 * GiB, None, None, oversubscribe=False)


def test_admit_single_quota_larger_than_gpu():
    with pytest.raises(AdmissionError) as ei:
        admit(gpu(0), 40 * GiB, None, None, oversubscribe=False)
    assert str(ei.value) == "memory 40 GiB exceeds GPU 0's 16 GiB (oversubscription is off)"


def test_admit_sum_past_gpu_memory():
    with pytest.raises(AdmissionError) as ei:
        admit(gpu(1, alloc=12), 8 * GiB, None, None, oversubscribe=False)
    msg = str(ei.value)
    assert "8 GiB" in msg and "GPU 1" in msg and "12 GiB" in msg and "4 GiB free" in msg
    assert "oversubscription is off" in msg


def test_admit_exactly_full_is_allowed():
    admit(gpu(0, alloc=12), 4 * GiB, None, None, oversubscribe=False)
    with pytest.raises(AdmissionError):
        admit(gpu(0, alloc=12), 4 * GiB + 1, None, None, oversubscribe=False)


def test_oversubscription_lifts_both_memory_rules():
    admit(gpu(0, alloc=12), 8 * GiB, None, None, oversubscribe=True)
    admit(gpu(0), 40 * GiB, None, None, oversubscribe=True)


def test_negative_memory_refused():
    with pytest.raises(AdmissionError):
        admit(gpu(0), -1, None, None, oversubscribe=True)


def test_memory_must_be_int():
    with pytest.raises(TypeError):
        admit(gpu(0), 1.5, None, None, oversubscribe=False)


# ---- compute --------------------------------------------------------------

def test_fixed_compute_sum_past_100():
    with pytest.raises(AdmissionError) as ei:
        admit(gpu(0, fixed=80), GiB, 30, "fixed", oversubscribe=False)
    msg = str(ei.value)
    assert "30%" in msg and "80%" in msg and "20% free" in msg and "GPU 0" in msg


def test_fixed_compute_to_exactly_100():
    admit(gpu(0, fixed=70), GiB, 30, "fixed", oversubscribe=False)
    admit(gpu(0, fixed=66.6), GiB, 33.4, "fixed", oversubscribe=False)   # float noise
    with pytest.raises(AdmissionError):
        admit(gpu(0, fixed=70), GiB, 30.01, "fixed", oversubscribe=False)


def test_burst_reserves_like_fixed():
    assert reserves_compute("burst") and reserves_compute("fixed")
    with pytest.raises(AdmissionError):
        admit(gpu(0, fixed=80), GiB, 30, "burst", oversubscribe=False)


def test_share_compute_is_never_refused():
    assert not reserves_compute("share") and not reserves_compute(None)
    admit(gpu(0, fixed=100), GiB, 90, "share", oversubscribe=False)
    admit(gpu(0, fixed=100), GiB, None, None, oversubscribe=False)


def test_compute_out_of_range():
    with pytest.raises(AdmissionError, match="out of range"):
        admit(gpu(0), GiB, 150, "share", oversubscribe=False)


# ---- replacing an existing quota (set-quota) ---------------------------------

def test_replacing_frees_the_old_memory():
    g = gpu(0, alloc=12)          # this slice holds 8 of the 12 allocated
    with pytest.raises(AdmissionError):
        admit(g, 10 * GiB, None, None, oversubscribe=False)
    admit(g, 12 * GiB, None, None, oversubscribe=False, replacing=(8 * GiB, None, None))
    with pytest.raises(AdmissionError):
        admit(g, 12 * GiB + 1, None, None, oversubscribe=False, replacing=(8 * GiB, None, None))


def test_replacing_frees_the_old_fixed_compute():
    g = gpu(0, alloc=4, fixed=100)     # this slice holds 60% fixed
    with pytest.raises(AdmissionError):
        admit(g, 4 * GiB, 70, "fixed", oversubscribe=False)
    admit(g, 4 * GiB, 60, "fixed", oversubscribe=False, replacing=(4 * GiB, 60, "fixed"))
    with pytest.raises(AdmissionError):
        admit(g, 4 * GiB, 61, "fixed", oversubscribe=False, replacing=(4 * GiB, 60, "fixed"))
    # a share slice held no reservation: replacing it frees none
    with pytest.raises(AdmissionError):
        admit(g, 4 * GiB, 10, "fixed", oversubscribe=False, replacing=(4 * GiB, 60, "share"))


def test_shrinking_always_admitted_even_when_overcommitted():
    g = gpu(0, alloc=20, fixed=120)    # oversubscribed before the switch was turned off
    admit(g, 2 * GiB, 10, "fixed", oversubscribe=False, replacing=(8 * GiB, 30, "fixed"))
    g = gpu(0, alloc=30, fixed=150)    # others alone hold 22 GiB and 120%
    admit(g, 8 * GiB, 30, "fixed", oversubscribe=False, replacing=(8 * GiB, 30, "fixed"))
    admit(g, 2 * GiB, 10, "fixed", oversubscribe=False, replacing=(8 * GiB, 30, "fixed"))
    admit(g, 2 * GiB, 90, "share", oversubscribe=False, replacing=(8 * GiB, 30, "fixed"))
    admit(gpu(0), 40 * GiB, None, None, oversubscribe=False, replacing=(48 * GiB, None, None))
    with pytest.raises(AdmissionError):      # but growing is checked
        admit(g, 9 * GiB, 30, "fixed", oversubscribe=False, replacing=(8 * GiB, 30, "fixed"))
    with pytest.raises(AdmissionError):
        admit(g, 8 * GiB, 31, "fixed", oversubscribe=False, replacing=(8 * GiB, 30, "fixed"))


# ---- placement ------------------------------------------------------------

def test_spread_picks_most_unallocated():
    gpus = [gpu(0, alloc=8), gpu(1, alloc=2), gpu(2, alloc=4)]
    assert place(gpus, GiB) == [1]
    assert place(gpus, GiB, count=3) == [1, 2, 0]


def test_binpack_picks_fullest_that_fits():
    gpus = [gpu(0, alloc=8), gpu(1, alloc=14), gpu(2, alloc=4)]
    assert place(gpus, GiB, placement="binpack") == [1]
    assert place(gpus, 4 * GiB, placement="binpack") == [0]    # GPU 1 has only 2 free
    assert place(gpus, 4 * GiB, count=2, placement="binpack") == [0, 2]


def test_ties_go_to_lower_index():
    gpus = [gpu(3), gpu(1), gpu(2)]
    assert place(gpus, GiB) == [1]
    assert place(gpus, GiB, placement="binpack") == [1]


def test_spread_across_different_sizes_uses_free_memory():
    gpus = [gpu(0, total=16, alloc=0), gpu(1, total=80, alloc=40)]
    assert place(gpus, GiB) == [1]


def test_place_nothing_fits_names_each_gpu():
    gpus = [gpu(0, alloc=15), gpu(1, alloc=16)]
    with pytest.raises(AdmissionError) as ei:
        place(gpus, 2 * GiB)
    msg = str(ei.value)
    assert msg.startswith("no GPU can take the slice")
    assert "GPU 0" in msg and "GPU 1" in msg


def test_place_with_oversubscription():
    gpus = [gpu(0, alloc=15), gpu(1, alloc=16)]
    assert place(gpus, 2 * GiB, oversubscribe=True) == [0]
    assert place(gpus, 2 * GiB, oversubscribe=True, placement="binpack") == [1]


def test_place_checks_compute_when_given():
    gpus = [gpu(0, fixed=90), gpu(1, alloc=8, fixed=10)]
    assert place(gpus, GiB) == [0]
    assert place(gpus, GiB, compute=20, policy="fixed") == [1]


def test_place_count_more_than_fit():
    gpus = [gpu(0, alloc=15), gpu(1)]
    with pytest.raises(AdmissionError, match="only 1 of the 2"):
        place(gpus, 2 * GiB, count=2)
    with pytest.raises(AdmissionError, match="3 GPUs asked for"):
        place(gpus, GiB, count=3)


def test_place_bad_arguments():
    with pytest.raises(AdmissionError):
        place([], GiB)
    with pytest.raises(ValueError):
        place([gpu(0)], GiB, placement="random")
    with pytest.raises(ValueError):
        place([gpu(0)], GiB, count=0)
