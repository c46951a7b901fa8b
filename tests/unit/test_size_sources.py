"""Message sizes from what record_param_comms and NCCL kernel names say (model/nccl.py)."""

from __future__ import annotations

import pytest

from nsys_collective.model.nccl import _dims_elements, _first_type, kernel_dtype_bytes


@pytest.mark.parametrize("name, size", [
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 2),
    ("ncclDevKernel_ReduceScatter_Sum_f16_RING_LL", 2),
    ("ncclDevKernel_AllReduce_Sum_f32_TREE_LL128", 4),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", 4),
    ("ncclKernel_AllReduce_RING_LL_Sum_half(ncclDevComm*, unsigned long, ncclWork*)", 2),
    ("ncclDevKernel_AllReduce_Sum_u8_RING_LL", 1),
    ("ncclDevKernel_AllGather_RING_LL", -1),  # NCCL 2.19+ all-gathers move bytes: no type in the name
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", -1),  # bytes, not the tensor's type
])
def test_element_size_from_the_kernel_name(name, size):
    assert kernel_dtype_bytes(name) == size


@pytest.mark.parametrize("text, elements", [
    ("[[4,2048,4096],[],[]]", 4 * 2048 * 4096),  # Megatron's all-reduce of a [4, 2048, 4096] tensor
    ("[[6144],[],[],[],[],[],[]]", 6144),  # PARAM's DLRM trace
    ("[[],[],[]]", -1),  # a tensor list: no dims
    ("[]", -1), ("[[2.5]]", -1), ("[[-1, 3]]", -1), ("not json", -1), (None, -1),
])
def test_elements_from_input_dims(text, elements):
    assert _dims_elements(text) == elements


def test_the_first_input_type():
    assert _first_type('["float","Scalar","Scalar"]') == "float"
    assert _first_type('["TensorList","Scalar"]') == "TensorList"
    assert _first_type("[]") is None and _first_type(None) is None


def test_the_link_a_collective_crossed():
    from nsys_collective.model.links import link_of

    assert link_of({"node0", "node1"}, ["NVIDIA H100 80GB HBM3"] * 2) == ("network", None)
    assert link_of({"node0"}, ["NVIDIA H100 80GB HBM3"] * 2) == ("nvlink", 450.0)
    assert link_of({"node0"}, ["NVIDIA H100 PCIe"] * 2) == ("pcie", 64.0)  # not the SXM part's NVLink
    assert link_of({"node0"}, ["Tesla V100-SXM2-32GB"] * 8) == ("nvlink", 150.0)
    assert link_of({"node0"}, ["NVIDIA GeForce RTX 3090"] * 3) == ("pcie", 32.0)
    assert link_of({"node0"}, ["NVIDIA H100 80GB HBM3", None]) == (None, None)  # a member's GPU unknown
    assert link_of({None}, ["NVIDIA H100 80GB HBM3"] * 2) == (None, None)  # hosts unknown (Kineto)
    # The NIC speed the user gave (--nic-gbps, Gb/s) is the network's capacity, in GB/s
    assert link_of({"node0", "node1"}, ["NVIDIA H100 80GB HBM3"] * 2, 400.0) == ("network", 50.0)
    assert link_of({"node0"}, ["NVIDIA H100 80GB HBM3"] * 2, 400.0) == ("nvlink", 450.0)
    assert link_of({None}, ["NVIDIA H100 80GB HBM3"] * 2, 400.0) == (None, None)
