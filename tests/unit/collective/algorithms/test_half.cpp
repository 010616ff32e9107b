// float16 / bfloat16 conversions: exact values, rounding to nearest even,
// overflow to infinity, subnormals, NaN.
#include "algorithms/half.h"
#include "algorithms/reduce.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

using namespace hvd::collective::detail;

TEST_CASE("float16 conversions round to nearest even", "[collective][half]") {
  CHECK(float_to_half(1.0f) == 0x3c00);
  CHECK(float_to_half(-2.0f) == 0xc000);
  CHECK(float_to_half(65504.0f) == 0x7bff);
  CHECK(float_to_half(65519.0f) == 0x7bff);
  CHECK(float_to_half(65520.0f) == 0x7c00);  // rounds to infinity
  CHECK(float_to_half(1e9f) == 0x7c00);
  CHECK(float_to_half(-std::numeric_limits<float>::infinity()) == 0xfc00);
  CHECK((float_to_half(std::nanf("")) & 0x7c00) == 0x7c00);
  CHECK((float_to_half(std::nanf("")) & 0x3ff) != 0);
  // Ties: 2049 is halfway between 2048 and 2050 -> even (2048); 2051 -> 2052.
  CHECK(half_to_float(float_to_half(2049.0f)) == 2048.0f);
  CHECK(half_to_float(float_to_half(2051.0f)) == 2052.0f);
  CHECK(half_to_float(float_to_half(2050.9f)) == 2050.0f);
  // Subnormals: 2^-24 is the smallest; half of it ties to zero (even).
  CHECK(float_to_half(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(float_to_half(std::ldexp(1.0f, -25)) == 0x0000);
  CHECK(float_to_half(std::ldexp(3.0f, -25)) == 0x0002);
  CHECK(float_to_half(std::ldexp(1.0f, -14)) == 0x0400);
  CHECK(half_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(half_to_float(0x03ff) == std::ldexp(1023.0f, -24));
  CHECK(std::isinf(half_to_float(0x7c00)));
  CHECK(std::isnan(half_to_float(0x7e00)));
  // Every half survives a round trip.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaN payloads may be quieted
    REQUIRE(float_to_half(half_to_float(static_cast<uint16_t>(h))) == h);
  }
}

TEST_CASE("bfloat16 conversions round to nearest even", "[collective][half]") {
  CHECK(float_to_bfloat16(1.0f) == 0x3f80);
  CHECK(bfloat16_to_float(0x3f80) == 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
  CHECK(float_to_bfloat16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);
  CHECK(float_to_bfloat16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);
  CHECK(float_to_bfloat16(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(std::isnan(bfloat16_to_float(float_to_bfloat16(std::nanf("")))));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7f80) == 0x7f80 && (h & 0x7f)) continue;
    REQUIRE(float_to_bfloat16(bfloat16_to_float(static_cast<uint16_t>(h))) == h);
  }
}

TEST_CASE("integer Average divides by job sizes beyond the dtype's range", "[collective][reduce]") {
  // 128..255 ranks do not fit int8, 256 ranks do not fit uint8: the division
  // happens in int64 (before the fix, int8 divided by a negative number and
  // uint8 by zero).
  std::vector<int8_t> s8 = {-128, 127, 100, -1};
  finalize(hvd::collective::DataType::Int8, hvd::collective::ReduceOp::Average, s8.data(), s8.size(), 200, 1.0);
  CHECK(s8 == std::vector<int8_t>{0, 0, 0, 0});
  std::vector<int8_t> t8 = {-128, 127, 64};
  finalize(hvd::collective::DataType::Int8, hvd::collective::ReduceOp::Average, t8.data(), t8.size(), 64, 1.0);
  CHECK(t8 == std::vector<int8_t>{-2, 1, 1});
  std::vector<uint8_t> u8 = {255, 3};
  finalize(hvd::collective::DataType::UInt8, hvd::collective::ReduceOp::Average, u8.data(), u8.size(), 256, 1.0);
  CHECK(u8 == std::vector<uint8_t>{0, 0});
  std::vector<uint8_t> v8 = {255, 200};
  finalize(hvd::collective::DataType::UInt8, hvd::collective::ReduceOp::Average, v8.data(), v8.size(), 100, 1.0);
  CHECK(v8 == std::vector<uint8_t>{2, 2});
  std::vector<int32_t> i32 = {-7, 7};
  finalize(hvd::collective::DataType::Int32, hvd::collective::ReduceOp::Average, i32.data(), i32.size(), 2, 1.0);
  CHECK(i32 == std::vector<int32_t>{-3, 3});  // truncation toward zero
}

TEST_CASE("integer scaling out of the dtype's range wraps (truncated in int64)", "[collective][reduce]") {
  std::vector<int8_t> s8 = {100, -100, 3};
  scale(hvd::collective::DataType::Int8, s8.data(), s8.size(), 3.0);
  CHECK(s8 == std::vector<int8_t>{44, -44, 9});  // 300 -> 44, -300 -> -44
  std::vector<uint8_t> u8 = {200, 1};
  scale(hvd::collective::DataType::UInt8, u8.data(), u8.size(), -1.5);
  CHECK(u8 == std::vector<uint8_t>{static_cast<uint8_t>(-300), static_cast<uint8_t>(-1)});
  std::vector<int32_t> i32 = {2000000000};
  scale(hvd::collective::DataType::Int32, i32.data(), i32.size(), 2.0);
  CHECK(i32[0] == static_cast<int32_t>(static_cast<uint32_t>(4000000000u)));
}
