// Routing a request among skill bundles (the probe's --bundle): φ from the backbone's value cache after a prefill
// of the prompt, and the reconstruction-error argmin over the bundles' selection subspaces. The same rule, in the
// same order, as harness/overlay/routing.py (phi_of_values, error, argmin) and harness/overlay/bundle.py (choose).
#pragma once
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

namespace gatehouse {

// One selection subspace of a bundle: its mean and `rank` orthonormal rows (row-major, rank x dim), in double.
struct Subspace {
  std::string name;           // "<skill>/general" or "<skill>/skill"
  size_t runner = 0;          // the session a win routes to (0: the backbone, for a general subspace)
  long rank = 0;
  std::vector<double> mean;
  std::vector<double> basis;
};

// φ of a prompt of `n` tokens from one layer's value cache laid out (kv_heads, stride, head_dim): for each channel
// c = h * head_dim + d, the mean over the n positions, then (at dim + c) the population standard deviation, two
// passes in double.
inline std::vector<double> phi_of_values(const float* v, long kv_heads, long stride, long n, long head_dim) {
  const long channels = kv_heads * head_dim;
  std::vector<double> phi(size_t(2 * channels), 0.0);
  for (long h = 0; h < kv_heads; ++h) {
    for (long d = 0; d < head_dim; ++d) {
      const float* x = v + size_t(h) * size_t(stride) * size_t(head_dim) + size_t(d);
      double sum = 0;
      for (long p = 0; p < n; ++p) sum += double(x[size_t(p) * size_t(head_dim)]);
      const double mean = sum / double(n);
      double sq = 0;
      for (long p = 0; p < n; ++p) {
        const double e = double(x[size_t(p) * size_t(head_dim)]) - mean;
        sq += e * e;
      }
      phi[size_t(h * head_dim + d)] = mean;
      phi[size_t(channels + h * head_dim + d)] = std::sqrt(sq / double(n));
    }
  }
  return phi;
}

// Mean squared error of φ's reconstruction from the subspace: c = φ - mean, r = c - Bᵀ(B c).
inline double reconstruction_error(const std::vector<double>& phi, const Subspace& s) {
  const size_t dim = phi.size();
  std::vector<double> c(dim), r(dim);
  for (size_t i = 0; i < dim; ++i) c[i] = r[i] = phi[i] - s.mean[i];
  for (long k = 0; k < s.rank; ++k) {
    const double* b = s.basis.data() + size_t(k) * dim;
    double dot = 0;
    for (size_t i = 0; i < dim; ++i) dot += b[i] * c[i];
    for (size_t i = 0; i < dim; ++i) r[i] -= dot * b[i];
  }
  double sq = 0;
  for (double x : r) sq += x * x;
  return sq / double(dim);
}

// The index of the first subspace with the smallest error (the caller orders them: every general subspace first),
// and every error in that order.
inline size_t argmin(const std::vector<double>& phi, const std::vector<Subspace>& subspaces, std::vector<double>* errors) {
  size_t best = 0;
  errors->clear();
  for (size_t i = 0; i < subspaces.size(); ++i) {
    errors->push_back(reconstruction_error(phi, subspaces[i]));
    if (i > 0 && (*errors)[i] < (*errors)[best]) best = i;
  }
  return best;
}

}  // namespace gatehouse
