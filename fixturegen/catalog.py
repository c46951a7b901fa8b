"""The kernels the simulated jobs run: names as real exports spell them (cuBLAS sm90 GEMMs, flash
attention, PyTorch's ATen kernels, NCCL 2.19+ device kernels), launch shapes, and mean durations
on an H100. Durations are drawn per launch around the mean (lognormal, cv per kernel)."""

from __future__ import annotations

from dataclasses import dataclass

US = 1_000
MS = 1_000_000

@dataclass(frozen=True)
class Kern:
    short: str
    demangled: str
    mangled: str
    mean_ns: int
    cv: float
    grid: tuple
    block: tuple
    regs: int
    static_smem: int
    dyn_smem: int
    smem_exec: int
    cluster: tuple = (0, 0, 0)


def _cublas(name, mean_ns, grid, cluster=(2, 1, 1)):
    # cuBLAS sm90 kernels: short == demangled == mangled (as nvjet_* in the 2026.2 file)
    return Kern(name, name, name, mean_ns, 0.03, grid, (384, 1, 1), 168, 0, 213_196, 233_472, cluster)


def _ew(functor_demangled, functor_mangled, mean_ns, grid=(65_536, 1, 1)):
    return Kern(
        "vectorized_elementwise_kernel",
        f"void at::native::vectorized_elementwise_kernel<(int)4, {functor_demangled}, "
        "std::array<char *, (unsigned long)3>>(int, T2, T3)",
        f"_ZN2at6native29vectorized_elementwise_kernelILi4E{functor_mangled}St5arrayIPcLm3EEEEviT0_T1_",
        mean_ns, 0.05, grid, (128, 1, 1), 28, 0, 0, 0,
    )


LN_FWD = Kern(
    "vectorized_layer_norm_kernel",
    "void at::native::<unnamed>::vectorized_layer_norm_kernel<c10::BFloat16, float, (bool)0>"
    "(int, T2, const T1 *, const T1 *, const T1 *, T2 *, T2 *, T1 *)",
    "_ZN2at6native53_GLOBAL__N__21739cd4_20_layer_norm_kernel_cu_9c5ada8a28vectorized_layer_norm_"
    "kernelIN3c108BFloat16EfLb0EEEviT0_PKT_S8_S8_PS5_S9_PS6_",
    38 * US, 0.04, (16_384, 1, 1), (32, 4, 1), 39, 0, 24, 0,
)
GEMM_QKV = _cublas(
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
    "execute_segment_k_off_kernel__5x_cublas", 185 * US, (66, 2, 1))
FLASH_FWD = Kern(
    "flash_fwd_kernel",
    "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<(int)128, (int)128, (int)64, (int)4, "
    "(bool)0, (bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)128, (int)128, (int)64, (int)4, "
    "cutlass::bfloat16_t>>, (bool)1, (bool)0, (bool)0, (bool)0, (bool)1, (bool)1, (bool)0, (bool)0>"
    "(flash::Flash_fwd_params)",
    "_ZN5flash16flash_fwd_kernelI23Flash_fwd_kernel_traitsILi128ELi128ELi64ELi4ELb0ELb0EN7cutlass10"
    "bfloat16_tE19Flash_kernel_traitsILi128ELi128ELi64ELi4ES2_EELb1ELb0ELb0ELb0ELb1ELb1ELb0ELb0EEEv"
    "NS_16Flash_fwd_paramsE",
    240 * US, 0.03, (16, 32, 4), (128, 1, 1), 255, 0, 65_536, 135_168,
)
GEMM_PROJ = _cublas("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN", 120 * US, (132, 1, 1))
ADD = _ew("at::native::CUDAFunctor_add<c10::BFloat16>", "NS0_15CUDAFunctor_addIN3c108BFloat16EEE", 22 * US)
GEMM_MLP = _cublas(
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_"
    "execute_segment_k_off_kernel__5x_cublas", 310 * US, (132, 1, 1))
GELU = _ew(
    "at::native::<unnamed>::GeluCUDAKernelImpl(at::TensorIteratorBase &, at::native::GeluType)::"
    "[lambda() (instance 2)]::operator ()() const::[lambda(c10::BFloat16) (instance 1)]",
    "ZZN2at6native18GeluCUDAKernelImplERNS_18TensorIteratorBaseENS0_8GeluTypeEENKUlvE0_clEvEUlN3c10"
    "8BFloat16EE_", 31 * US)
SOFTMAX = Kern(
    "softmax_warp_forward",
    "void softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, (int)5, (bool)0, (bool)0>"
    "(T2 *, const T1 *, int, int, int, const bool *, int, bool)",
    "_Z20softmax_warp_forwardIN3c108BFloat16ES1_fLi5ELb0ELb0EEvPT0_PKT_iiiPKbib",
    16 * US, 0.05, (4_096, 1, 1), (128, 1, 1), 40, 0, 0, 0,
)
GELU_BWD = _ew(
    "at::native::<unnamed>::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase &, at::native::GeluType)"
    "::[lambda() (instance 2)]::operator ()() const::[lambda(c10::BFloat16, c10::BFloat16) (instance 1)]",
    "ZZN2at6native26GeluBackwardCUDAKernelImplERNS_18TensorIteratorBaseENS0_8GeluTypeEENKUlvE0_clEv"
    "EUlN3c108BFloat16ES6_E_", 34 * US)
GEMM_DGRAD = _cublas(
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x256x64_warpgroupsize2x1x1_"
    "execute_segment_k_off_kernel__5x_cublas", 205 * US, (132, 1, 1))
GEMM_WGRAD = _cublas(
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize256x128x64_warpgroupsize2x1x1_"
    "execute_segment_k_on_kernel__5x_cublas", 215 * US, (132, 1, 1))
FLASH_BWD = Kern(
    "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel",
    "void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<(int)128, "
    "(int)64, (int)128, (int)8, (int)2, (int)4, (int)2, (bool)0, (bool)0, cutlass::bfloat16_t, "
    "Flash_kernel_traits<(int)128, (int)64, (int)128, (int)8, cutlass::bfloat16_t>>, (bool)1, (bool)0, "
    "(bool)0, (bool)0, (bool)1, (bool)0, (bool)0>(flash::Flash_bwd_params)",
    "_ZN5flash44flash_bwd_dq_dk_dv_loop_seqk_parallel_kernelI23Flash_bwd_kernel_traitsILi128ELi64E"
    "Li128ELi8ELi2ELi4ELi2ELb0ELb0EN7cutlass10bfloat16_tE19Flash_kernel_traitsILi128ELi64ELi128ELi8E"
    "S2_EELb1ELb0ELb0ELb0ELb1ELb0ELb0EEEvNS_16Flash_bwd_paramsE",
    560 * US, 0.03, (32, 32, 4), (256, 1, 1), 255, 0, 147_456, 233_472,
)
LN_BWD = Kern(
    "layer_norm_grad_input_kernel",
    "void at::native::<unnamed>::layer_norm_grad_input_kernel<c10::BFloat16, float>"
    "(const T1 *, const T1 *, const T2 *, const T2 *, const T1 *, T1 *, int)",
    "_ZN2at6native53_GLOBAL__N__21739cd4_20_layer_norm_kernel_cu_9c5ada8a28layer_norm_grad_input_"
    "kernelIN3c108BFloat16EfEEvPKT_S7_PKT0_SA_S7_PS5_i",
    46 * US, 0.04, (16_384, 1, 1), (128, 1, 1), 40, 0, 0, 0,
)
GAMMA_BETA = Kern(
    "GammaBetaBackwardCUDAKernel_32x32",
    "void at::native::<unnamed>::GammaBetaBackwardCUDAKernel_32x32<c10::BFloat16, float>"
    "(long, long, const T1 *, const T1 *, const T2 *, const T2 *, T1 *, T1 *)",
    "_ZN2at6native53_GLOBAL__N__21739cd4_20_layer_norm_kernel_cu_9c5ada8a33GammaBetaBackwardCUDA"
    "Kernel_32x32IN3c108BFloat16EfEEvllPKT_S7_PKT0_SA_PS5_SB_",
    30 * US, 0.04, (128, 1, 1), (32, 32, 1), 64, 8_448, 0, 16_384,
)
ADAM = Kern(
    "multi_tensor_apply_kernel",
    "void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata"
    "<(int)4>, at::native::<unnamed>::FusedAdamMathFunctor<c10::BFloat16, (int)4, "
    "(at::native::ADAM_MODE)1, (bool)0>, double *, double, double, double, double, double, bool, "
    "const float *, const float *>(T1, T2, T3...)",
    "_ZN2at6native12_GLOBAL__N_125multi_tensor_apply_kernelINS1_18TensorListMetadataILi4EEENS1_20"
    "FusedAdamMathFunctorIN3c108BFloat16ELi4ELNS0_9ADAM_MODEE1ELb0EEEJPddddddbPKfSB_EEEvT_T0_DpT1_",
    650 * US, 0.03, (320, 1, 1), (512, 1, 1), 64, 0, 0, 0,
)
ZERO = _ew("at::native::FillFunctor<c10::BFloat16>", "NS0_11FillFunctorIN3c108BFloat16EEE", 12 * US)
INDEX_PUT = Kern(
    "index_put_kernel",
    "void at::native::index_put_kernel<c10::BFloat16, long>"
    "(c10::BFloat16 *, const long *, const c10::BFloat16 *, long, long)",
    "_ZN2at6native16index_put_kernelIN3c108BFloat16ElEEvPT_PKT0_PKS4_ll",
    380 * US, 0.05, (2_048, 1, 1), (256, 1, 1), 32, 0, 0, 0,
)
CONTEND = _cublas(
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize256x128x64_warpgroupsize2x1x1_"
    "execute_segment_k_off_kernel__5x_cublas", 0, (132, 1, 1))


def _nccl(name, regs=96, static_smem=21_568):
    """An NCCL 2.19+ device kernel (grid X = channels, set per job; block 640)."""
    return Kern(name, f"{name}(ncclDevKernelArgsStorage<(unsigned long)4096>)",
                f"_Z{len(name)}{name}24ncclDevKernelArgsStorageILm4096EE",
                0, 0.0, (16, 1, 1), (640, 1, 1), regs, static_smem, 82_240, 135_168)


NCCL_ALLREDUCE = _nccl("ncclDevKernel_AllReduce_Sum_bf16_RING_LL")
NCCL_ALLGATHER = _nccl("ncclDevKernel_AllGather_RING_LL")
NCCL_REDUCESCATTER = _nccl("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL")
NCCL_SENDRECV = _nccl("ncclDevKernel_SendRecv", regs=80, static_smem=17_472)
NCCL = NCCL_ALLREDUCE  # the DDP bucket all-reduce

EMBED = Kern(
    "indexSelectLargeIndex",
    "void at::native::<unnamed>::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, (int)2, (int)2, (int)-2, "
    "(bool)1>(at::cuda::detail::TensorInfo<T1, T3>, at::cuda::detail::TensorInfo<const T1, T3>, "
    "at::cuda::detail::TensorInfo<const T2, T3>, int, int, T3, T3, long)",
    "_ZN2at6native12_GLOBAL__N_121indexSelectLargeIndexIN3c108BFloat16EljLi2ELi2ELin2ELb1EEEvNS_4cuda6detail"
    "10TensorInfoIT_T1_EENS7_IKS8_S9_EENS7_IKT0_S9_EEiiS9_S9_l",
    45 * US, 0.04, (4_096, 1, 1), (128, 1, 1), 32, 0, 0, 0,
)
EMBED_BWD = Kern(
    "embedding_backward_feature_kernel",
    "void at::native::embedding_backward_feature_kernel<c10::BFloat16, float, long>"
    "(const long *, const T1 *, T1 *, int, long, int, int)",
    "_ZN2at6native33embedding_backward_feature_kernelIN3c108BFloat16EflEEvPKT1_PKT_PS7_ilii",
    92 * US, 0.05, (2_048, 1, 1), (32, 32, 1), 40, 0, 8_192, 8_192,
)
LOG_SOFTMAX = Kern(
    "cunn_SoftMaxForward",
    "void at::native::<unnamed>::cunn_SoftMaxForward<(int)8, c10::BFloat16, float, c10::BFloat16, "
    "at::native::<unnamed>::LogSoftMaxForwardEpilogue>(T4 *, const T2 *, int)",
    "_ZN2at6native12_GLOBAL__N_119cunn_SoftMaxForwardILi8EN3c108BFloat16EfS4_NS1_25LogSoftMaxForwardEpilogueEEEvPT2_PKT0_i",
    118 * US, 0.03, (8_192, 1, 1), (512, 1, 1), 38, 0, 0, 0,
)
NLL_LOSS = Kern(
    "nll_loss_forward_reduce_cuda_kernel_2d",
    "void at::native::<unnamed>::nll_loss_forward_reduce_cuda_kernel_2d<c10::BFloat16, float, long>"
    "(T1 *, T1 *, const T1 *, const T3 *, const T1 *, bool, long, long, long, long)",
    "_ZN2at6native12_GLOBAL__N_138nll_loss_forward_reduce_cuda_kernel_2dIN3c108BFloat16EflEEvPT_S6_PKS5_PKT1_S8_bllll",
    18 * US, 0.05, (1, 1, 1), (1_024, 1, 1), 32, 8_192, 0, 8_192,
)
LOG_SOFTMAX_BWD = Kern(
    "cunn_SoftMaxBackward",
    "void at::native::<unnamed>::cunn_SoftMaxBackward<(int)8, c10::BFloat16, float, c10::BFloat16, "
    "at::native::<unnamed>::LogSoftMaxBackwardEpilogue>(T2 *, const T4 *, const T4 *, long)",
    "_ZN2at6native12_GLOBAL__N_120cunn_SoftMaxBackwardILi8EN3c108BFloat16EfS4_NS1_26LogSoftMaxBackwardEpilogueEEEvPT0_PKT2_SA_l",
    126 * US, 0.03, (8_192, 1, 1), (512, 1, 1), 40, 0, 0, 0,
)

# One transformer layer's kernels. DDP jobs cycle through FWD/BWD_PATTERN for their kernel count (as
# the first generator did); layer-structured styles (fsdp, tp, pp) use the attention and MLP halves.
FWD_PATTERN = [LN_FWD, GEMM_QKV, FLASH_FWD, GEMM_PROJ, ADD, LN_FWD, GEMM_MLP, GELU, GEMM_PROJ, ADD, SOFTMAX]
BWD_PATTERN = [GELU_BWD, GEMM_DGRAD, GEMM_WGRAD, FLASH_BWD, LN_BWD, GAMMA_BETA, GEMM_DGRAD, GEMM_WGRAD]
FWD_ATTN = [LN_FWD, GEMM_QKV, FLASH_FWD, GEMM_PROJ]
FWD_MLP = [LN_FWD, GEMM_MLP, GELU, GEMM_PROJ, ADD]
BWD_MLP = [GELU_BWD, GEMM_DGRAD, GEMM_WGRAD, LN_BWD]
BWD_ATTN = [FLASH_BWD, GEMM_DGRAD, GEMM_WGRAD, GAMMA_BETA, ADD]
FILLER = [ADD, SOFTMAX, GELU]  # the kernels a step's count is topped up with
OPT_PATTERN = [ADAM, ZERO]
# The overlap causes' kernels (overlap_causes.py): after the base catalog, so the base kernels keep
# their indices, and written to an export only where a job runs them (the committed sets unchanged).
SLOWER = Kern(
    "flash_bwd_dq_dk_dv_loop_seqq_parallel_kernel",
    "void flash::flash_bwd_dq_dk_dv_loop_seqq_parallel_kernel<Flash_bwd_kernel_traits<(int)128, (int)64, "
    "(int)128, (int)8, (int)4, (int)2, (int)2, (bool)0, (bool)0, cutlass::bfloat16_t, Flash_kernel_traits<"
    "(int)128, (int)64, (int)128, (int)8, cutlass::bfloat16_t>>, (bool)1, (bool)0>(flash::Flash_bwd_params)",
    "_ZN5flash44flash_bwd_dq_dk_dv_loop_seqq_parallel_kernelI23Flash_bwd_kernel_traitsILi128ELi64ELi128E"
    "Li8ELi4ELi2ELi2ELb0ELb0EN7cutlass10bfloat16_tE19Flash_kernel_traitsILi128ELi64ELi128ELi8ES2_EELb1ELb0EEEv"
    "NS_16Flash_bwd_paramsE",
    0, 0.0, (32, 32, 4), (256, 1, 1), 255, 0, 147_456, 233_472,
)
PARTNER = Kern(
    "flash_bwd_convert_dq_kernel",
    "void flash::flash_bwd_convert_dq_kernel<Flash_bwd_kernel_traits<(int)128, (int)64, (int)128, (int)8, "
    "(int)4, (int)2, (int)2, (bool)0, (bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)128, (int)64, "
    "(int)128, (int)8, cutlass::bfloat16_t>>>(flash::Flash_bwd_params, int)",
    "_ZN5flash27flash_bwd_convert_dq_kernelI23Flash_bwd_kernel_traitsILi128ELi64ELi128ELi8ELi4ELi2ELi2ELb0E"
    "Lb0EN7cutlass10bfloat16_tE19Flash_kernel_traitsILi128ELi64ELi128ELi8ES2_EEEEvNS_16Flash_bwd_paramsEi",
    0, 0.0, (64, 32, 4), (256, 1, 1), 64, 0, 0, 0,
)
BYSTANDER_GEMM = _cublas("nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT", 0, (132, 1, 1))
BYSTANDER_FLASH = Kern(
    "flash_fwd_splitkv_kernel",
    "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<(int)128, (int)64, (int)128, (int)4, "
    "(bool)0, (bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)128, (int)64, (int)128, (int)4, "
    "cutlass::bfloat16_t>>, (bool)1, (bool)0>(flash::Flash_fwd_params)",
    "_ZN5flash24flash_fwd_splitkv_kernelI23Flash_fwd_kernel_traitsILi128ELi64ELi128ELi4ELb0ELb0EN7cutlass10"
    "bfloat16_tE19Flash_kernel_traitsILi128ELi64ELi128ELi4ES2_EELb1ELb0EEEvNS_16Flash_fwd_paramsE",
    0, 0.0, (16, 32, 4), (128, 1, 1), 255, 0, 65_536, 135_168,
)
VICTIM = Kern(
    "fused_dropout_add_layernorm_fwd_kernel",
    "void layer_norm::ln_fwd_kernel<layer_norm::Kernel_traits<c10::BFloat16, c10::BFloat16, float, "
    "(unsigned int)4096, (unsigned int)1, (unsigned int)4, (unsigned int)16>, (bool)1>"
    "(layer_norm::FwdParams)",
    "_ZN10layer_norm38fused_dropout_add_layernorm_fwd_kernelENS_9FwdParamsE",
    140 * US, 0.03, (1_024, 1, 1), (128, 1, 1), 64, 0, 0, 0,
)
OVERLAP_KERNELS = [SLOWER, PARTNER, BYSTANDER_GEMM, BYSTANDER_FLASH, VICTIM]
BASE_CATALOG = list(dict.fromkeys(
    FWD_PATTERN + BWD_PATTERN + FWD_ATTN + FWD_MLP + BWD_MLP + BWD_ATTN + OPT_PATTERN
    + [INDEX_PUT, CONTEND, EMBED, EMBED_BWD, LOG_SOFTMAX, NLL_LOSS, LOG_SOFTMAX_BWD,
       NCCL_ALLREDUCE, NCCL_ALLGATHER, NCCL_REDUCESCATTER, NCCL_SENDRECV]))
CATALOG = BASE_CATALOG + OVERLAP_KERNELS
SPEC = {k: i for i, k in enumerate(CATALOG)}
SLOW_KERNEL = GEMM_DGRAD  # the kernel slow_kernel slows: the backward dgrad GEMM, in every layer
EXTRA_KERNEL = INDEX_PUT  # the kernel extra_kernel adds: an index_put_ a rank's batch needs

# the ATen operator (Kineto cpu_op) around each compute kernel's launch
ATEN_OP = {SPEC[k]: op for k, op in [
    (LN_FWD, "aten::native_layer_norm"), (GEMM_QKV, "aten::addmm"), (FLASH_FWD, "aten::_flash_attention_forward"),
    (GEMM_PROJ, "aten::addmm"), (ADD, "aten::add"), (GEMM_MLP, "aten::addmm"), (GELU, "aten::gelu"),
    (SOFTMAX, "aten::_softmax"), (GELU_BWD, "aten::gelu_backward"), (GEMM_DGRAD, "aten::mm"), (GEMM_WGRAD, "aten::mm"),
    (FLASH_BWD, "aten::_flash_attention_backward"), (LN_BWD, "aten::native_layer_norm_backward"),
    (GAMMA_BETA, "aten::native_layer_norm_backward"), (ADAM, "aten::_fused_adam_"), (ZERO, "aten::fill_"),
    (INDEX_PUT, "aten::index_put_"), (CONTEND, "aten::mm"), (EMBED, "aten::embedding"),
    (EMBED_BWD, "aten::embedding_dense_backward"), (LOG_SOFTMAX, "aten::_log_softmax"),
    (NLL_LOSS, "aten::nll_loss_forward"), (LOG_SOFTMAX_BWD, "aten::_log_softmax_backward_data"),
    (SLOWER, "aten::_flash_attention_backward"), (PARTNER, "aten::_flash_attention_backward"),
    (BYSTANDER_GEMM, "aten::mm"), (BYSTANDER_FLASH, "aten::_flash_attention_forward"), (VICTIM, "aten::dropout")]}

# per NCCL operation: kernel, NCCL's NVTX range (domain NCCL), PyTorch's c10d range, and the
# record_param_comms "Collective name" ProcessGroupNCCL records for it
NCCL_OPS = {
    "AllReduce": (NCCL_ALLREDUCE, "ncclAllReduce", "nccl:all_reduce", "allreduce"),
    "AllGather": (NCCL_ALLGATHER, "ncclAllGather", "nccl:_allgather_base", "_allgather_base"),
    "ReduceScatter": (NCCL_REDUCESCATTER, "ncclReduceScatter", "nccl:_reduce_scatter_base", "_reduce_scatter_base"),
    "Send": (NCCL_SENDRECV, "ncclSend", "nccl:send", "send"),
    "Recv": (NCCL_SENDRECV, "ncclRecv", "nccl:recv", "recv"),
}
