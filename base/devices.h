// The one parser of a device list such as "cpu:2" (devices per node), used by
// the job checker, the compiler, the agent and the command line alike.
#pragma once

#include <charconv>
#include <string_view>

#include "base/actor_id.h"
#include "base/status.h"

namespace rill {

struct DeviceList {
  DeviceType type = DeviceType::kCpu;
  int count = 1;
};

inline constexpr int kMaxDevicesPerNode = (1 << ActorId::kDeviceBits) - 1;

// "TYPE:N", e.g. "cpu:2". CUDA devices are refused with the reason
// until the engine runs kernels on GPUs: accepting them would run on CPU
// without a word.
inline StatusOr<DeviceList> parse_device_list(std::string_view text) {
  DeviceList list;
  size_t colon = text.find(':');
  if (colon == std::string_view::npos)
    return invalid_argument("devices '{}': expected TYPE:N, e.g. cpu:2 (N devices per node)", text);
  std::string_view type = text.substr(0, colon), count = text.substr(colon + 1);
  int n = 0;
  auto [end, error] = std::from_chars(count.data(), count.data() + count.size(), n);
  if (count.empty() || error != std::errc() || end != count.data() + count.size() || n < 1 ||
      n > kMaxDevicesPerNode)
    return invalid_argument("devices '{}': '{}' is not a device count from 1 to {}", text, count,
                            kMaxDevicesPerNode);
  list.count = n;
  if (type == "cpu") return list;
  if (type == "cuda")
    return invalid_argument("devices '{}': CUDA devices are not supported yet; this build runs jobs on cpu devices "
                         "only (use cpu:{}; see docs/ROADMAP.md)", text, list.count);
  return invalid_argument("devices '{}': unknown device type '{}' (expected cpu:N)", text, type);
}

}  // namespace rill
