// The CPU's description (dp_device_name("cpu", i)): the processor and the
// OpenBLAS kernel dp's products run on, and the advice given when OpenBLAS
// did not recognise the CPU and runs a kernel below its vector units.
#include <doctest/doctest.h>

#include <cblas.h>

#include <cstdlib>
#include <string>

#include "core/blas.h"
#include "dp.h"

TEST_CASE("advice only when the kernel uses less than the CPU has, and OPENBLAS_CORETYPE is unset") {
  using dp::blas_kernel_advice;
  // What this project's VM gave: a CPU with AVX-512 that OpenBLAS 0.3.21 did not recognise.
  const std::string a = blas_kernel_advice("Prescott", 3, "SkylakeX", nullptr);
  CHECK(a == ". This CPU has AVX-512, which OpenBLAS's kernel does not use (it did not recognise the CPU): "
             "run with OPENBLAS_CORETYPE=SkylakeX to use it");
  CHECK(blas_kernel_advice("Prescott", 3, "SkylakeX", "") == a);  // set but empty: OpenBLAS ignores it too
  CHECK(blas_kernel_advice("Haswell", 3, "SkylakeX", nullptr).find("OPENBLAS_CORETYPE=SkylakeX") != std::string::npos);
  CHECK(blas_kernel_advice("Sandybridge", 2, "Zen", nullptr).find("has AVX2,") != std::string::npos);
  CHECK(blas_kernel_advice("Nehalem", 1, "Sandybridge", nullptr).find("has AVX,") != std::string::npos);
  // The kernel already uses what the CPU has (names compared without case), or more.
  for (const char* k : {"SkylakeX", "COOPERLAKE", "sapphirerapids"}) CHECK(blas_kernel_advice(k, 3, "SkylakeX", nullptr).empty());
  for (const char* k : {"Haswell", "Zen", "Excavator"}) CHECK(blas_kernel_advice(k, 2, "Haswell", nullptr).empty());
  CHECK(blas_kernel_advice("SkylakeX", 2, "Haswell", nullptr).empty());
  CHECK(blas_kernel_advice("Prescott", 0, "", nullptr).empty());  // no AVX at all, or not x86
  // The user chose a kernel: theirs stands, even a slower one.
  CHECK(blas_kernel_advice("Prescott", 3, "SkylakeX", "Prescott").empty());
  // ... unless it needs vector units the CPU lacks: OpenBLAS would stop the program with SIGILL.
  CHECK(blas_kernel_advice("SkylakeX", 2, "Zen", "SkylakeX") ==
        ". OPENBLAS_CORETYPE=SkylakeX selects a kernel for AVX-512, which this CPU lacks (it has AVX2): its products "
        "would stop the program (SIGILL); unset it or use OPENBLAS_CORETYPE=Zen");
  CHECK(blas_kernel_advice("Haswell", 1, "Sandybridge", "Haswell").find("kernel for AVX2, which this CPU lacks (it has AVX)") !=
        std::string::npos);
  CHECK(blas_kernel_advice("Haswell", 2, "Zen", "Haswell").empty());
}

TEST_CASE("dp_device_name(\"cpu\") names the processor and the kernel OpenBLAS runs") {
  const char* name = nullptr;
  REQUIRE(dp_device_name("cpu", 1, &name) == DP_OK);
  const std::string s = name;
  CAPTURE(s);
  CHECK(s.rfind("CPU core 1 of ", 0) == 0);
  const std::string kernel = std::string(", OpenBLAS kernel ") + openblas_get_corename();
  CHECK(s.find(kernel) != std::string::npos);
  // The advice follows the kernel's name, when given.
  const size_t advice = s.find(". This CPU has ");
  if (advice != std::string::npos) {
    CHECK(advice == s.find(kernel) + kernel.size());
    const char* set = std::getenv("OPENBLAS_CORETYPE");
    CHECK((!set || !*set));
  }
  CHECK(dp_device_name("cpu", 1 << 20, &name) == DP_ERR_DEVICE);
}
