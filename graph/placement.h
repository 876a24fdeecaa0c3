// Placement: the devices a part of a job runs on, as a job states it:
//
//   cpu 0:0-1, 1:0-1          4 devices, 1-D (one SBP over all of them)
//   cpu [2,2] 0:0-1, 1:0-1    the same devices as a [nodes, devices] hierarchy
//                             (2-D SBP such as (S(0), B))
//   cpu 1:0                   one device: device 0 of node 1
//   cuda 0-3:0-7              nodes 0 to 3, devices 0 to 7 of each
//   1:0-1                     devices 0 and 1 of node 1, of whatever type
//                             the job runs on (its --devices)
//   1:*                       every device of node 1, as many as the job's
//                             --devices gives each node
//
// Every node listed has the same devices (a placement is a rectangle of
// nodes x devices); a 2-D hierarchy is [nodes, devices per node]. Ranks in a
// placement go node by node, then device: rank r is device devices[r % D] of
// node nodes[r / D], D = devices.size(), as for the whole cluster.
// A plain value; any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/actor_id.h"
#include "base/status.h"

namespace rill::graph {

struct Placement {
  DeviceType type = DeviceType::kCpu;
  std::vector<int> nodes;    // ascending, distinct
  std::vector<int> devices;  // on each node: ascending, distinct
  bool two_d = false;        // written with a [nodes, devices] hierarchy
  // Written without a device type: the job's devices' type (the compiler
  // sets `type` from the cluster), so one job file runs on cpu and cuda.
  bool any_type = false;
  // Written with `*` for the devices: every device of each node (the
  // compiler fills `devices` from the cluster; empty until then).
  bool all_devices = false;
  int num_nodes() const { return static_cast<int>(nodes.size()); }
  int per_node() const { return static_cast<int>(devices.size()); }
  int parallel() const { return num_nodes() * per_node(); }
  int node_of(int rank) const { return nodes[static_cast<size_t>(rank / per_node())]; }
  int device_of(int rank) const { return devices[static_cast<size_t>(rank % per_node())]; }
  // Canonical text: "cpu 0:0-1, 1:0-1", "cpu [2,2] 0-1:0-1" (node runs
  // with the same devices are one entry); parse_placement reads it back.
  std::string to_string() const;
  // Same devices (the hierarchy aside).
  bool same_devices(const Placement& other) const {
    return type == other.type && nodes == other.nodes && devices == other.devices;
  }
  bool operator==(const Placement&) const = default;
};

// Parses "[TYPE] [HIERARCHY] NODES:DEVICES, ..." where TYPE is cpu or cuda
// (absent: the job's), NODES and DEVICES are a number or a range a-b (DEVICES
// also `*`: every device of the node, in every entry then), and
// HIERARCHY is [n] (n = every device) or [a,b] (a = nodes, b = devices per
// node). Errors name the text and what is wrong.
StatusOr<Placement> parse_placement(std::string_view text);

// The whole cluster: nodes 0..num_nodes-1, devices 0..per_node-1 on each.
Placement whole_cluster(DeviceType type, int num_nodes, int per_node);

}  // namespace rill::graph
