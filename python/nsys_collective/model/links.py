"""Which link a collective's traffic crossed, and what that link can carry.

A collective whose members sit on more than one host crossed the network. Its capacity, the NIC
port's speed, is not in a capture: TARGET_INFO_NIC_INFO names each NIC's model (deviceId, e.g.
ConnectX-4, via ENUM_NET_DEVICE_ID) and link layer, never its speed, and one model ships at several
speeds (ConnectX-4: 10 to 100 Gb/s), nor does it say which port NCCL used; so it stays None
unless the user gives it (`--nic-gbps`: the speed of the NIC each GPU uses, in Gb/s as NICs are
sold; a capacity in GB/s is an eighth of it). Inside one host, NVLink on the GPUs that have it (SXM and NVL parts), else
PCIe. Capacities are per direction, as nccl-tests' bus bandwidth counts them: busbw over capacity
is the share of the link the transfer used.
"""

from __future__ import annotations

# (substring of the GPU name, the link inside a host, its capacity in GB/s per direction); the
# longest matching name wins, so "H100 PCIe" is not an H100 SXM.
GPU_LINKS = (
    ("H100 PCIe", "pcie", 64.0), ("H100 NVL", "nvlink", 300.0), ("H100", "nvlink", 450.0), ("H200", "nvlink", 450.0),
    ("GH200", "nvlink", 450.0), ("H20", "nvlink", 450.0), ("B200", "nvlink", 900.0), ("GB200", "nvlink", 900.0),
    ("A100-PCIE", "pcie", 32.0), ("A100 PCIe", "pcie", 32.0), ("A100", "nvlink", 300.0),
    ("V100-PCIE", "pcie", 16.0), ("V100-SXM2", "nvlink", 150.0), ("V100-SXM3", "nvlink", 150.0),
    ("A40", "pcie", 32.0), ("A30", "pcie", 32.0), ("A10", "pcie", 32.0), ("L40S", "pcie", 32.0), ("L40", "pcie", 32.0),
    ("L4", "pcie", 32.0), ("T4", "pcie", 16.0), ("RTX 4090", "pcie", 32.0), ("RTX 3090", "pcie", 32.0),
)


NIC_OPTION = "--nic-gbps"
"""Where a network capacity came from (collectives[].link_capacity_source): the user's option."""


def link_of(hosts: set[str | None], gpu_names: list[str | None],
            nic_gbps: float | None = None) -> tuple[str | None, float | None]:
    """(link, capacity GB/s per direction) of a collective over these hosts and member GPUs; the
    link is None inside one host of unknown GPUs, the capacity None where unknown. `nic_gbps`:
    the NIC speed the user gave (Gb/s), the network's capacity."""
    if None in hosts:  # a capture that names no host (a Kineto trace): where the ranks sat is unknown
        return None, None
    if len(hosts) > 1:
        return "network", (nic_gbps / 8 if nic_gbps else None)
    found = []
    for name in gpu_names:
        match = max((g for g in GPU_LINKS if name and g[0] in name), key=lambda g: len(g[0]), default=None)
        found.append(match)
    if not found or any(f is None for f in found):
        return None, None
    links = {f[1] for f in found}
    if len(links) > 1:
        return "pcie", min(f[2] for f in found if f[1] == "pcie")
    return found[0][1], min(f[2] for f in found)
