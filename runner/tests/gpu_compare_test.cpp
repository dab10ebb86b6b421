// The device comparison of the correctness gate (problems/src/cuda/compare_cuda.cu) must agree
// exactly with the host one (compare.cpp): verdict, wrong-element count, low-signal rule and
// maximum errors, on every dtype path. Needs a CUDA device (label gpu).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "atrex/problems/compare.h"
#include "atrex/problems/cuda_ops.h"
#include "atrex/problems/numeric.h"

namespace atrex::problems {
namespace {

class GpuCompareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
  }
  void TearDown() override {
    for (void* p : owned_) cudaFree(p);
  }
  void* upload(const std::vector<uint8_t>& host) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(host.size(), 16)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
    owned_.push_back(p);
    return p;
  }
  // Compares on both sides and expects the same result.
  CompareResult both(const TensorDesc& d, const std::vector<uint8_t>& cand,
                     const std::vector<uint8_t>& ref, double atol = 1e-2, double rtol = 5e-2) {
    const CompareResult host = compare_output(d, cand.data(), ref.data(), atol, rtol);
    CompareResult dev;
    const auto compared =
        cuda::compare_output(d, upload(cand), upload(ref), atol, rtol, nullptr, dev);
    EXPECT_TRUE(compared) << compared.error().message;
    EXPECT_EQ(dev.pass, host.pass) << d.name;
    EXPECT_EQ(dev.bad_count, host.bad_count) << d.name;
    EXPECT_EQ(dev.low_signal, host.low_signal) << d.name;
    EXPECT_EQ(dev.max_abs_error, host.max_abs_error) << d.name;
    EXPECT_EQ(dev.max_rel_error, host.max_rel_error) << d.name;
    return host;
  }
  std::vector<void*> owned_;
};

template <class T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TEST_F(GpuCompareTest, Bf16WithinAndBeyondTolerance) {
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.f, 1.f);
  const int64_t n = 300'001;
  std::vector<uint16_t> ref(n), cand(n);
  for (int64_t i = 0; i < n; ++i) {
    ref[i] = num::float_to_bf16(g(rng));
    cand[i] = num::float_to_bf16(num::bf16_to_float(ref[i]) * 1.01f);
  }
  TensorDesc d{"out", DType::kBF16, {n}};
  EXPECT_TRUE(both(d, bytes_of(cand), bytes_of(ref)).pass);
  for (int64_t i : {0L, 17L, 123'456L, n - 1})
    cand[i] = num::float_to_bf16(num::bf16_to_float(ref[i]) + 3.f);
  const CompareResult r = both(d, bytes_of(cand), bytes_of(ref));
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.bad_count, 4);
}

TEST_F(GpuCompareTest, NonFiniteValuesAndLowSignal) {
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  std::vector<float> ref{1.f, nan, inf, -inf, 2.f, 0.f, 5.f},
      cand{1.f, nan, inf, -inf, nan, 0.f, inf};
  TensorDesc d{"y", DType::kF32, {7}};
  const CompareResult r = both(d, bytes_of(cand), bytes_of(ref));
  EXPECT_EQ(r.bad_count, 2);
  cand = {1.f, 0.f, -inf, -inf, 2.f, 0.f, 5.f};  // NaN and +inf not matched
  EXPECT_EQ(both(d, bytes_of(cand), bytes_of(ref)).bad_count, 2);
  // Quantisation scales: an all-zero output would pass atol, so the tolerance is relative.
  std::vector<float> small(1000), off(1000);
  for (int i = 0; i < 1000; ++i) small[i] = off[i] = 1e-4f * static_cast<float>(i % 37 + 1);
  off[500] *= 1.5f;
  TensorDesc s{"scale", DType::kF32, {1000}};
  const CompareResult ls = both(s, bytes_of(off), bytes_of(small));
  EXPECT_TRUE(ls.low_signal);
  EXPECT_FALSE(ls.pass);
}

TEST_F(GpuCompareTest, AtolALargeFractionOfTheOutputIsLowSignalOnBothSides) {
  // Peak 0.02 under atol 1e-2 (fused_moe's outputs): zeros fail on the peaks, yet the output is
  // low-signal by the fraction rule; halving every element must fail, as on the host.
  std::vector<float> ref(4096), half(4096);
  for (int i = 0; i < 4096; ++i) {
    ref[i] = 0.02f * static_cast<float>((i * 37) % 101 - 50) / 50.f;
    half[i] = ref[i] * 0.5f;
  }
  TensorDesc d{"out", DType::kF32, {4096}};
  const CompareResult r = both(d, bytes_of(half), bytes_of(ref));
  EXPECT_TRUE(r.low_signal);
  EXPECT_FALSE(r.pass);
  EXPECT_TRUE(both(d, bytes_of(ref), bytes_of(ref)).pass);
}

TEST_F(GpuCompareTest, IntegersAndFp8) {
  std::vector<int32_t> ref(10'000), cand;
  for (int i = 0; i < 10'000; ++i) ref[i] = i * 7 % 1013;
  cand = ref;
  TensorDesc d{"ids", DType::kI32, {100, 100}};
  EXPECT_TRUE(both(d, bytes_of(cand), bytes_of(ref)).pass);
  cand[9'999] += 1;
  EXPECT_EQ(both(d, bytes_of(cand), bytes_of(ref)).bad_count, 1);
  std::vector<uint8_t> q(4096), qc;
  for (int i = 0; i < 4096; ++i) q[i] = static_cast<uint8_t>(i % 0x7e);
  qc = q;
  qc[100] = 0x7f;  // NaN where the reference is finite
  qc[200] ^= 0x08;
  TensorDesc f{"q", DType::kFP8E4M3, {4096}};
  EXPECT_FALSE(both(f, qc, q).pass);
}

TEST_F(GpuCompareTest, FirstDifferingByte) {
  std::vector<uint8_t> a(1'000'003), b;
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i * 31);
  b = a;
  void* da = upload(a);
  auto first = [&] {
    const auto idx = cuda::first_difference(da, upload(b), a.size(), nullptr);
    EXPECT_TRUE(idx) << idx.error().message;
    return idx.value_or(-2);
  };
  EXPECT_EQ(first(), -1);
  b[999'999] ^= 1;
  b[12'345] ^= 0x80;
  EXPECT_EQ(first(), 12'345);
  b = a;
  b[1'000'002] = ~b[1'000'002];  // in the tail past the last whole word
  EXPECT_EQ(first(), 1'000'002);
}

// A guard region starts right after an output of odd byte length: pointers that are not 8-byte
// aligned (H200, 2026-12-02: cudaErrorMisalignedAddress before the byte-wise path).
TEST_F(GpuCompareTest, FirstDifferingByteAtUnalignedAddresses) {
  std::vector<uint8_t> a(4099), b;
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i * 7 + 3);
  b = a;
  b[1000] ^= 4;
  auto* da = static_cast<uint8_t*>(upload(a));
  auto* db = static_cast<uint8_t*>(upload(b));
  for (size_t off : {1, 3, 5}) {
    const auto idx = cuda::first_difference(da + off, db + off, a.size() - off, nullptr);
    ASSERT_TRUE(idx) << idx.error().message;
    EXPECT_EQ(idx.value(), static_cast<int64_t>(1000 - off)) << off;
  }
  const auto same = cuda::first_difference(da + 1, da + 1, 4096, nullptr);
  ASSERT_TRUE(same) << same.error().message;
  EXPECT_EQ(same.value(), -1);
}

}  // namespace
}  // namespace atrex::problems
