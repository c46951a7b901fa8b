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
        "cub::reduce_kernel(…)", "at::reduce_kernel(…)"]
    # Overloads: only their parameters tell them apart, so they are shown.
    assert distinct_names(["f", "f"], ["void f(int)", "void f(float)"]) == ["f(int)", "f(float)"]


# The HTA traces' elementwise kernels: each a lambda, named by its whole scope in the template argument.
CLAMP = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar("
         "at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() "
         "const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, "
         "at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
         "at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::"
         "{lambda(float)#1}, at::detail::Array<char*, 2>)")
NAN = ("void at::native::vectorized_elementwise_kernel<4, at::native::nan_to_num_kernel_cuda(at::TensorIteratorBase&, "
       "c10::optional<double>, c10::optional<double>, c10::optional<double>)::{lambda()#1}::operator()() const::"
       "{lambda()#2}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, at::native::"
       "nan_to_num_kernel_cuda(at::TensorIteratorBase&, c10::optional<double>, c10::optional<double>, "
       "c10::optional<double>)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, "
       "at::detail::Array<char*, 2>)")


def test_a_lambda_is_named_by_the_function_it_is_defined_in():
    assert distinct_names([SHORT, SHORT], [CLAMP, NAN]) == [
        f"{SHORT}<…, launch_clamp_scalar, …>", f"{SHORT}<…, nan_to_num_kernel_cuda, …>"]


def test_lambdas_of_one_function_are_told_apart_by_their_scope_without_parameter_lists():
    other = CLAMP.replace("{lambda()#7}", "{lambda()#8}")
    assert distinct_names([SHORT, SHORT], [CLAMP, other]) == [
        f"{SHORT}<…, launch_clamp_scalar(…)::{{lambda()#1}}::{{lambda()#7}}::{{lambda(…)#1}}, …>",
        f"{SHORT}<…, launch_clamp_scalar(…)::{{lambda()#1}}::{{lambda()#8}}::{{lambda(…)#1}}, …>"]


def test_names_and_prose_break_between_parts_never_inside_a_word():
    assert break_name("ault43.cscs.ch", 12) == "ault43\n.cscs.ch"
    assert break_name("fs24-allreduce2x-9rank-3node", 20) == "fs24-allreduce2x-\n9rank-3node"
    assert wrap("after 0 ms / 0 ms / 0 ms; causality violations 0 -> 0.", 20).splitlines() == [
        "after 0 ms / 0 ms /", "0 ms; causality", "violations 0 -> 0."]
