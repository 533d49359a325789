// The min/max box bound's inner kernel (sparse/chunk_bound.h owns the bound): one query head
// against one box, on_max . max + on_min . min over a head's channels, where on_max and on_min are
// the parts of the query that meet the box's maxima and minima (for the upper bound the query's
// positive and negative parts; for the lower bound the other way round). A scalar reference and
// an AVX2+FMA path, picked once by cpu_path() (core/cpu_features.h).
#pragma once

namespace leoam::kernels {

using BoxBoundFn = float (*)(const float* on_max, const float* on_min, const float* max, const float* min, int n);

// The fastest kernel this CPU runs; the same sums as ref::box_bound up to float rounding.
BoxBoundFn box_bound_kernel();

namespace ref {
// In float, channel by channel.
float box_bound(const float* on_max, const float* on_min, const float* max, const float* min, int n);
}  // namespace ref

}  // namespace leoam::kernels
