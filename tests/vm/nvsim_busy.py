"""nvsim's busy accounting, /sys/kernel/debug/nvsim/busy: the truth that the
engine and compute tests measure against (docs/compute.md, section 1).

    gpu <index> busy_ns <n> now_ns <ktime>
    tsg <gpu> <tsg id> 0x<hClient> 0x<handle> tgid <n> busy_ns <n> items <n> enabled <0|1>
    pid <tgid> <gpu> busy_ns <n>

The parser is strict: a line of another shape fails the test.
"""
from __future__ import annotations

from pathlib import Path

BUSY = Path("/sys/kernel/debug/nvsim/busy")


class Busy:
    """A parsed snapshot of the busy file."""

    def __init__(self, text: str):
        self.text = text
        self.gpus: dict[int, dict] = {}
        self.tsgs: dict[tuple[int, int], dict] = {}    # (hClient, handle) -> fields
        self.pids: dict[tuple[int, int], int] = {}     # (tgid, gpu) -> busy_ns
        for line in text.splitlines():
            f = line.split()
            if f[0] == "gpu":
                assert f[2] == "busy_ns" and f[4] == "now_ns", line
                self.gpus[int(f[1])] = {"busy_ns": int(f[3]), "now_ns": int(f[5])}
            elif f[0] == "tsg":
                assert (f[5], f[7], f[9], f[11]) == ("tgid", "busy_ns", "items", "enabled"), line
                self.tsgs[(int(f[3], 16), int(f[4], 16))] = {
                    "gpu": int(f[1]), "id": int(f[2]), "tgid": int(f[6]),
                    "busy_ns": int(f[8]), "items": int(f[10]), "enabled": int(f[12])}
            elif f[0] == "pid":
                assert f[3] == "busy_ns", line
                self.pids[(int(f[1]), int(f[2]))] = int(f[4])
            else:
                raise AssertionError(f"unknown busy line: {line!r}")

    def tsg(self, ch) -> dict:
        """The line of a vgpu.abi.nvclient.Channel's TSG."""
        return self.tsgs[(ch.client.hClient, ch.htsg)]

    def tsg_ns(self, ch) -> int:
        return self.tsg(ch)["busy_ns"]


def busy() -> Busy:
    return Busy(BUSY.read_text())
