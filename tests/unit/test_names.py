"""Kernel names told apart by the shortest form that still tells them apart (render/names.py)."""

from nsys_collective.render.names import distinct_names, unique_labels
from nsys_collective.render.text import break_name, wrap

# Four of the DLRM traces' kernels, which all shorten to 'vectorized_elementwise_kernel'.
MUL = ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
       "at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 2> >(int, "
       "at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, "
       "at::detail::Array<char*, 2>)")
FILL_F = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >"
          "(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)")
FILL_I = FILL_F.replace("FillFunctor<float>", "FillFunctor<int>")
SHORT = "vectorized_elementwise_kernel"


def test_only_the_template_arguments_that_differ_are_shown():
    assert distinct_names([SHORT] * 3 + ["gemm"], [MUL, FILL_F, FILL_I, "gemm"]) == [
        f"{SHORT}<…, AUnaryFunctor, …>", f"{SHORT}<…, FillFunctor<float>, …>", f"{SHORT}<…, FillFunctor<int>, …>", "gemm"]


def test_a_name_alone_in_its_table_stays_short():
    assert distinct_names([SHORT, SHORT], [FILL_F, FILL_F]) == [SHORT, SHORT]
    assert unique_labels([FILL_F, MUL]) == [f"{SHORT}<…, FillFunctor, …>", f"{SHORT}<…, AUnaryFunctor, …>"]


def test_names_that_only_their_namespace_tells_apart_keep_it():
    assert distinct_names(["reduce_kernel"] * 2, ["void cub::reduce_kernel(int)", "void at::reduce_kernel(int)"]) == [
        "cub::reduce_kernel(int)", "at::reduce_kernel(int)"]


def test_names_and_prose_break_between_parts_never_inside_a_word():
    assert break_name("ault43.cscs.ch", 12) == "ault43\n.cscs.ch"
    assert break_name("fs24-allreduce2x-9rank-3node", 20) == "fs24-allreduce2x-\n9rank-3node"
    assert wrap("after 0 ms / 0 ms / 0 ms; causality violations 0 -> 0.", 20).splitlines() == [
        "after 0 ms / 0 ms /", "0 ms; causality", "violations 0 -> 0."]
