// to_global and to_local: every 1-D and 2-D SBP on uneven shapes round-trips
// exactly, pieces are laid out as the compiler lays them out, P sums, B
// replicas are checked, and bad pieces are errors naming the device.
#include <doctest/doctest.h>

#include <vector>

#include "graph/global_tensor.h"

namespace rill {
namespace {

InlineTensor f32(const std::string& name, Shape shape, std::vector<float> values) {
  InlineTensor t;
  t.name = name;
  t.shape = std::move(shape);
  t.f32 = std::move(values);
  return t;
}

graph::Placement parsed(const std::string& text) {
  auto p = graph::parse_placement(text);
  REQUIRE_MESSAGE(p.ok(), p.status().to_string());
  return *p;
}

bool mentions(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

TEST_CASE("every SBP round-trips exactly on 1-D and 2-D placements, with sizes that do not divide") {
  // [5, 7] over 2 x 3 devices: every split is uneven. Values are small
  // integers, so sums with the zeros of P pieces are exact.
  InlineTensor global = f32("t", {5, 7}, {});
  for (int i = 0; i < 35; ++i) global.f32.push_back(static_cast<float>(i * 3 - 17));
  const std::vector<Sbp> ones = {Sbp::split(0), Sbp::split(1), Sbp::broadcast(), Sbp::partial_sum()};
  struct Case {
    std::string placement;
    std::vector<NdSbp> sbps;
  };
  std::vector<NdSbp> flat(ones.begin(), ones.end()), pairs;
  for (const Sbp& a : ones)
    for (const Sbp& b : ones) pairs.push_back(NdSbp(a, b));
  for (const Case& c : {Case{"cpu 0-1:0-2", flat}, Case{"cpu 0:0-2", flat}, Case{"cpu 1:0", flat},
                        Case{"cpu [2,3] 0-1:0-2", pairs}, Case{"cpu [3,2] 0-2:1-2", pairs}}) {
    const graph::Placement p = parsed(c.placement);
    for (const NdSbp& sbp : c.sbps) {
      CAPTURE(c.placement);
      CAPTURE(sbp.to_string());
      std::vector<InlineTensor> locals;
      for (int r = 0; r < p.parallel(); ++r) {
        auto local = to_local(global, p, sbp, r);
        REQUIRE_MESSAGE(local.ok(), local.status().to_string());
        // Each piece is the one the compiler gives device r.
        CHECK(local->shape == piece_region(global.shape, sbp, p.num_nodes(), p.per_node(), r).extent);
        locals.push_back(*local);
      }
      auto back = to_global(locals, p, sbp);
      REQUIRE_MESSAGE(back.ok(), back.status().to_string());
      CHECK(back->shape == global.shape);
      CHECK(back->f32 == global.f32);
      CHECK(back->name == "t");
    }
  }
}

TEST_CASE("to_global concatenates splits (first parts one larger), sums P, keeps one B replica") {
  const graph::Placement two = graph::whole_cluster(DeviceType::kCpu, 2, 1);
  auto rows = to_global({f32("x", {2, 2}, {1, 2, 3, 4}), f32("x", {1, 2}, {5, 6})}, two, Sbp::split(0));
  REQUIRE(rows.ok());
  CHECK(rows->shape == Shape{3, 2});
  CHECK(rows->f32 == std::vector<float>{1, 2, 3, 4, 5, 6});
  auto cols = to_global({f32("x", {2, 1}, {1, 3}), f32("x", {2, 1}, {2, 4})}, two, Sbp::split(1));
  REQUIRE(cols.ok());
  CHECK(cols->shape == Shape{2, 2});
  CHECK(cols->f32 == std::vector<float>{1, 2, 3, 4});
  auto sum = to_global({f32("g", {2}, {1, 2}), f32("g", {2}, {10, 20})}, two, Sbp::partial_sum());
  REQUIRE(sum.ok());
  CHECK(sum->f32 == std::vector<float>{11, 22});
  auto same = to_global({f32("w", {2}, {1, 2}), f32("w", {2}, {1, 2})}, two, Sbp::broadcast());
  REQUIRE(same.ok());
  CHECK(same->f32 == std::vector<float>{1, 2});
  // 2-D: (S(0), B) on 2 nodes x 2 devices: rows by node, each node's two
  // devices hold the same rows.
  const graph::Placement grid = parsed("cpu [2,2] 0-1:0-1");
  auto hybrid = to_global({f32("h", {1, 2}, {1, 2}), f32("h", {1, 2}, {1, 2}), f32("h", {1, 2}, {3, 4}),
                           f32("h", {1, 2}, {3, 4})},
                          grid, NdSbp(Sbp::split(0), Sbp::broadcast()));
  REQUIRE(hybrid.ok());
  CHECK(hybrid->f32 == std::vector<float>{1, 2, 3, 4});
  // i32 labels, split.
  InlineTensor a, b;
  a.dtype = b.dtype = DType::kI32;
  a.shape = {2};
  a.i32 = {7, 8};
  b.shape = {1};
  b.i32 = {9};
  auto labels = to_global({a, b}, two, Sbp::split(0));
  REQUIRE(labels.ok());
  CHECK(labels->i32 == std::vector<int32_t>{7, 8, 9});
  // to_local of P: the whole value on the first device, zeros on the rest.
  auto p1 = to_local(f32("g", {2}, {5, 6}), two, Sbp::partial_sum(), 1);
  REQUIRE(p1.ok());
  CHECK(p1->f32 == std::vector<float>{0, 0});
}

TEST_CASE("bad pieces are errors naming the device and what is wrong") {
  const graph::Placement two = graph::whole_cluster(DeviceType::kCpu, 2, 1);
  auto uneven = to_global({f32("x", {1}, {1}), f32("x", {2}, {2, 3})}, two, Sbp::split(0));
  REQUIRE_FALSE(uneven.ok());
  CHECK(mentions(uneven.status(), "the piece of device 0 has shape [1], but its part of the global [3] in S(0) is [2]"));
  auto count = to_global({f32("x", {1}, {1})}, two, Sbp::split(0));
  REQUIRE_FALSE(count.ok());
  CHECK(mentions(count.status(), "1 local pieces for placement 'cpu 0-1:0', which has 2 devices"));
  auto differ = to_global({f32("w", {2}, {1, 2}), f32("w", {2}, {1, 3})}, two, Sbp::broadcast());
  REQUIRE_FALSE(differ.ok());
  CHECK(mentions(differ.status(), "devices 0 and 1 hold one replica (B), but their pieces differ"));
  InlineTensor labels;
  labels.dtype = DType::kI32;
  labels.shape = {1};
  labels.i32 = {1};
  auto dtype = to_global({f32("x", {1}, {1}), labels}, two, Sbp::split(0));
  REQUIRE_FALSE(dtype.ok());
  CHECK(mentions(dtype.status(), "the piece of device 1 ('') is i32, device 0's is f32"));
  auto values = to_global({f32("x", {2}, {1}), f32("x", {1}, {1})}, two, Sbp::split(0));
  REQUIRE_FALSE(values.ok());
  CHECK(mentions(values.status(), "has shape [2] but 1 values"));
  auto two_d = to_local(f32("x", {2}, {1, 2}), two, NdSbp(Sbp::split(0), Sbp::broadcast()), 0);
  REQUIRE_FALSE(two_d.ok());
  CHECK(mentions(two_d.status(), "is 2-D but placement 'cpu 0-1:0' is 1-D"));
  auto axis = to_local(f32("x", {2}, {1, 2}), two, Sbp::split(1), 0);
  REQUIRE_FALSE(axis.ok());
  CHECK(mentions(axis.status(), "splits axis 1 of a tensor with 1 axes"));
  auto rank = to_local(f32("x", {2}, {1, 2}), two, Sbp::split(0), 2);
  REQUIRE_FALSE(rank.ok());
  CHECK(mentions(rank.status(), "device 2 is not one of placement 'cpu 0-1:0''s 2 devices"));
}

}  // namespace
}  // namespace rill
