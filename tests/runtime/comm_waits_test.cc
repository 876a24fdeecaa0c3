// From several nodes' flight records, the node every wait leads to
// (runtime/cluster/comm_waits.h).
#include <doctest/doctest.h>

#include <string>

#include "comm/flight_record.h"
#include "runtime/cluster/comm_waits.h"

namespace rill {
namespace {

using comm::FlightRecord;

// A ring: node 0 waits for node 2 (which hangs and left no record), node 1
// for node 0. Both waits lead to node 2.
TEST_CASE("the node every wait leads to is named, through the ring's neighbours") {
  auto record_of = [](int waits_for, int seq, int completed) {
    FlightRecord r(3);
    const int c = r.add_caller("bucket1", {0, 1, 2});
    for (int i = 0; i < seq; ++i) {
      r.begin(c, "all_reduce", 8);
      r.end(c, i < completed);
    }
    r.begin(c, "all_reduce", 8);
    r.wait_for(c, waits_for);
    return r.json().dump();
  };
  const std::string text = explain_waits({{0, record_of(2, 5, 5)}, {1, record_of(0, 5, 5)}},
                                         [](int node) { return "node " + std::to_string(node); });
  CHECK(text ==
        "every other node waited for node 2, which left no record (node 0 in bucket1 all_reduce #5 for it; node 1 in "
        "bucket1 all_reduce #5 for node 0); the last bucket1 all_reduce completed: #4 on node 0, #4 on node 1");
  CHECK(explain_waits({{0, FlightRecord(1).json().dump()}}, [](int) { return std::string(); }).empty());
}

// A node's record is its word: too large, or nested past the bound (which
// a recursive copy or dump could not survive), it is read as nothing.
TEST_CASE("a flight record too large or nested too deep is read as nothing, never trusted") {
  CHECK(read_record(FlightRecord(2).json().dump()).is_object());
  CHECK(read_record(std::string(kMaxRecordBytes + 1, ' ')).is_null());
  CHECK(read_record("[1, 2]").is_null());
  const std::string deep = "{\"callers\": " + std::string(20000, '[') + std::string(20000, ']') + "}";
  const nlohmann::json shallow = read_record(deep.substr(0, kMaxRecordBytes));
  CHECK(shallow.dump().size() < 100);
  CHECK(explain_waits({{0, deep}}, [](int) { return std::string(); }).empty());
}

}  // namespace
}  // namespace rill
