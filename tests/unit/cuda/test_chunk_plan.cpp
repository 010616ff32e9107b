#include "chunk_plan.h"

#include "hvd/common/error.h"

#include <catch2/catch.hpp>

using namespace hvd::collective::cuda::detail;

namespace {
void require_cover(const std::vector<Chunk>& chunks, std::size_t bytes) {
  std::size_t next = 0;
  for (const auto& c : chunks) {
    REQUIRE(c.offset == next);
    REQUIRE(c.bytes > 0);
    next += c.bytes;
  }
  REQUIRE(next == bytes);
}
}  // namespace

TEST_CASE("cuda: plan_chunks covers the buffer with aligned, element-whole chunks", "[cuda][chunk]") {
  for (std::size_t elem : {1u, 2u, 4u, 8u}) {
    for (std::size_t count : {1u, 7u, 1000u, 65536u, 1000003u}) {
      const std::size_t bytes = count * elem;
      for (std::size_t chunk : {1u, 256u, 1000u, 4096u, 1u << 20}) {
        const auto chunks = plan_chunks(bytes, elem, chunk, 256);
        require_cover(chunks, bytes);
        for (std::size_t i = 0; i + 1 < chunks.size(); ++i) {
          REQUIRE(chunks[i].bytes % 256 == 0);
          REQUIRE(chunks[i].bytes % elem == 0);
          REQUIRE(chunks[i].bytes <= std::max<std::size_t>(chunk, 256));
        }
        REQUIRE(chunks.back().bytes % elem == 0);
      }
    }
  }
}

TEST_CASE("cuda: plan_chunks: exact sizes and edge cases", "[cuda][chunk]") {
  CHECK(plan_chunks(0, 4, 1024).empty());
  auto c = plan_chunks(10 * 1024, 4, 4096, 256);
  REQUIRE(c.size() == 3);
  CHECK(c[0].bytes == 4096);
  CHECK(c[1].offset == 4096);
  CHECK(c[2].bytes == 2048);
  // A chunk size below the alignment unit still makes progress.
  c = plan_chunks(1024, 4, 10, 256);
  REQUIRE(c.size() == 4);
  CHECK(c[0].bytes == 256);
  // lcm(elem, align): 12-byte elements keep whole elements per chunk.
  c = plan_chunks(12 * 100, 12, 800, 256);
  CHECK(c[0].bytes == 768);
  CHECK_THROWS_AS(plan_chunks(10, 4, 1024), hvd::InvalidArgument);
  CHECK_THROWS_AS(plan_chunks(10, 0, 1024), hvd::InvalidArgument);
}

TEST_CASE("cuda: plan_steps numbers steps, cycles slots and names the step to wait for", "[cuda][chunk]") {
  const auto chunks = plan_chunks(10 * 256, 1, 256, 256);
  REQUIRE(chunks.size() == 10);
  auto steps = plan_steps(1, chunks, 4);
  REQUIRE(steps.size() == 10);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    CHECK(steps[i].seq == i + 1);
    CHECK(steps[i].slot == static_cast<int>(i % 4));
    CHECK(steps[i].chunk.offset == chunks[i].offset);
    CHECK(steps[i].reuse_after == (i < 4 ? 0u : i + 1 - 4));
  }
  // A later call continues the sequence, and slot reuse crosses calls.
  auto more = plan_steps(11, plan_chunks(2 * 256, 1, 256), 4);
  REQUIRE(more.size() == 2);
  CHECK(more[0].seq == 11);
  CHECK(more[0].slot == 2);
  CHECK(more[0].reuse_after == 7);
  // One slot: every step waits for the previous one.
  auto single = plan_steps(5, plan_chunks(3 * 256, 1, 256), 1);
  CHECK(single[0].reuse_after == 4);
  CHECK(single[2].reuse_after == 6);
  CHECK_THROWS_AS(plan_steps(1, chunks, 0), hvd::InvalidArgument);
  CHECK_THROWS_AS(plan_steps(0, chunks, 2), hvd::InvalidArgument);
}

TEST_CASE("cuda: element_size matches the C ABI's dtypes", "[cuda][chunk]") {
  using hvd::collective::DataType;
  CHECK(element_size(DataType::UInt8) == 1);
  CHECK(element_size(DataType::Int8) == 1);
  CHECK(element_size(DataType::Float16) == 2);
  CHECK(element_size(DataType::BFloat16) == 2);
  CHECK(element_size(DataType::Int32) == 4);
  CHECK(element_size(DataType::Float32) == 4);
  CHECK(element_size(DataType::Int64) == 8);
  CHECK(element_size(DataType::Float64) == 8);
  CHECK(element_size(DataType::Bool) == 1);
  CHECK_THROWS_AS(element_size(static_cast<DataType>(99)), hvd::InvalidArgument);
}

TEST_CASE("cuda: fusion layout aligns every tensor and keeps sizes", "[cuda][chunk]") {
  const auto l = plan_fusion_layout({4, 100, 0, 33, 16}, 16);
  REQUIRE(l.offsets.size() == 5);
  CHECK(l.offsets[0] == 0);
  CHECK(l.offsets[1] == 16);
  CHECK(l.offsets[2] == 128);  // 16 + 100 = 116 -> 128
  CHECK(l.offsets[3] == 128);  // an empty tensor takes no room
  CHECK(l.offsets[4] == 176);  // 128 + 33 = 161 -> 176
  CHECK(l.total == 192);
  for (std::size_t i = 0; i < l.offsets.size(); ++i) CHECK(l.offsets[i] % 16 == 0);
  CHECK(plan_fusion_layout({}).total == 0);
  CHECK(plan_fusion_layout({7}, 1).total == 7);
  CHECK_THROWS_AS(plan_fusion_layout({1}, 0), hvd::InvalidArgument);
}
