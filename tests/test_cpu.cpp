// The CPU's description (dp_device_name("cpu", i)): the processor and the
// OpenBLAS kernel dp's products run on, and the advice given when OpenBLAS
// did not recognise the CPU and runs a kernel below its vector units.
#include <doctest/doctest.h>

#include <cblas.h>

#include <strings.h>

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
  // The advice follows the kernel's name, when given: only where dp could not
  // change the kernel, an OpenBLAS built for one CPU (no DYNAMIC_ARCH).
  const size_t advice = s.find(". This CPU has ");
  const char* set = std::getenv("OPENBLAS_CORETYPE");
  const bool dynamic = std::string(openblas_get_config()).find("DYNAMIC_ARCH") != std::string::npos;
  if (advice != std::string::npos) {
    CHECK(advice == s.find(kernel) + kernel.size());
    CHECK((!set || !*set));
    CHECK(!dynamic);
  }
  CHECK(dp_device_name("cpu", 1 << 20, &name) == DP_ERR_DEVICE);
}

TEST_CASE("dp runs OpenBLAS's selection again when OpenBLAS did not recognise the CPU, unless OPENBLAS_CORETYPE is set") {
  using dp::blas_kernel_switch;
  // Debian 12's OpenBLAS 0.3.21 on an Emerald Rapids Xeon (model 207): Prescott on a CPU with AVX-512.
  CHECK(blas_kernel_switch("Prescott", 3, "SkylakeX", nullptr) == "SkylakeX");
  CHECK(blas_kernel_switch("Prescott", 3, "SkylakeX", "") == "SkylakeX");
  CHECK(blas_kernel_switch("Haswell", 3, "SkylakeX", nullptr) == "SkylakeX");
  CHECK(blas_kernel_switch("Nehalem", 2, "Zen", nullptr) == "Zen");
  CHECK(blas_kernel_switch("Core2", 1, "Sandybridge", nullptr) == "Sandybridge");
  // OpenBLAS's own choice uses what the CPU has, or the CPU has nothing better: kept.
  for (const char* k : {"SkylakeX", "cooperlake", "SAPPHIRERAPIDS"}) CHECK(blas_kernel_switch(k, 3, "SkylakeX", nullptr).empty());
  CHECK(blas_kernel_switch("Zen", 2, "Zen", nullptr).empty());
  CHECK(blas_kernel_switch("Prescott", 0, "", nullptr).empty());
  // The user's choice stands, even a slower one.
  CHECK(blas_kernel_switch("Prescott", 3, "SkylakeX", "Prescott").empty());
  CHECK(blas_kernel_switch("Haswell", 3, "SkylakeX", "Haswell").empty());

  // What this process runs on. tests/meson.build runs this case a second time
  // with OPENBLAS_CORETYPE=Prescott, which must stand.
  const char* name = nullptr;
  REQUIRE(dp_device_name("cpu", 0, &name) == DP_OK);
  const std::string s = name, core = openblas_get_corename();
  CAPTURE(s);
  const char* set = std::getenv("OPENBLAS_CORETYPE");
  const std::string own = dp::blas_kernel().openblas_choice;
  if (set && *set) {
    CHECK(own.empty());
    CHECK(strcasecmp(core.c_str(), set) == 0);
    CHECK(s.find("dp's choice") == std::string::npos);
  } else if (!own.empty()) {
    CHECK(own != core);
    CHECK(s.find(", OpenBLAS kernel " + core + " (dp's choice for a CPU with ") != std::string::npos);
    CHECK(s.find("OpenBLAS did not recognise the CPU and chose " + own + ";") != std::string::npos);
    // dp leaves the environment as it found it.
    CHECK((!set || !*set));
  }
  // The products are right on the kernel chosen (the whole suite runs on it too).
  const float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {7, 8, 9, 10, 11, 12};
  float c[4] = {};
  dp::gemm(nullptr, false, false, 2, 2, 3, 1.0f, a, 3, b, 2, 0.0f, c, 2);
  CHECK(c[0] == 58);
  CHECK(c[1] == 64);
  CHECK(c[2] == 139);
  CHECK(c[3] == 154);
}
