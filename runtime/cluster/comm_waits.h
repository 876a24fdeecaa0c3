// Why a phase stood still, from the nodes' flight records
// (comm/flight_record.h): which node each collective waited for, followed
// node to node (in a ring a node waits for its neighbour, which waits for
// the node that hangs) to the node every wait leads to, and the last call
// each node completed.
#pragma once

#include <functional>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace rill {

// A node's flight record as it sent it, read with bounds: at most
// kMaxRecordBytes, nested at most kMaxRecordDepth deep (deeper values are
// dropped), an object; anything else is null.
inline constexpr size_t kMaxRecordBytes = size_t{64} << 10;
inline constexpr int kMaxRecordDepth = 6;
nlohmann::json read_record(const std::string& text);

// `records`: each plan node's flight record as JSON (nodes without one are
// lost or silent); `name`: a plan node as the user knows it. Empty when no
// collective was waiting.
std::string explain_waits(const std::map<int, std::string>& records, const std::function<std::string(int)>& name);

}  // namespace rill
