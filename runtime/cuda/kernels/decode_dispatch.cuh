/* decode_dispatch.cuh — the one runtime-type -> compile-time-decoder switch.
 *
 * Owns: qc_dev_visit(t, f), which calls f(std::integral_constant<int, T>()) for
 * the T of qtype.def equal to t when qc_dev<T> has a device decoder, and
 * qc_dev_find<Fn>(t, of), the launcher of(T) for t or nullptr. Every kernel
 * templated on a type (dequant_f16, embed, gemv_q, moe_gemm) picks its
 * instance through these, so the list of types is read from qtype.def in one
 * place and a type without a decoder instantiates nothing.
 * Invariant: a kernel is instantiated for exactly the types with qc_dev<T>::ok
 * (the discarded if-constexpr branch is never instantiated); host code only.
 */
#ifndef QC_CUDA_DECODE_DISPATCH_CUH
#define QC_CUDA_DECODE_DISPATCH_CUH

#include <type_traits>

#include "decode.cuh"

/* f(tag of T) when T has a device decoder; false (f not called) when not. */
template <int T, typename F> static bool qc_dev_call(F &f)
{
	if constexpr (qc_dev<T>::ok) {
		f(std::integral_constant<int, T>());
		return true;
	} else {
		return false;
	}
}

/* Calls f(std::integral_constant<int, T>()) for T == t; false when t is not in
 * qtype.def or has no device decoder (f is then not called). */
template <typename F> static bool qc_dev_visit(enum qc_type t, F &&f)
{
#define QC_TYPE(E, ...) \
	if (t == QC_TYPE_##E) \
		return qc_dev_call<QC_TYPE_##E>(f);
#include "qtype.def"
#undef QC_TYPE
	return false;
}

/* of(std::integral_constant<int, T>()) for T == t (a launcher of type Fn), or
 * nullptr when t has no device decoder. */
template <typename Fn, typename Of> static Fn qc_dev_find(enum qc_type t, Of of)
{
	Fn fn = nullptr;
	qc_dev_visit(t, [&](auto tag) { fn = of(tag); });
	return fn;
}

#endif
