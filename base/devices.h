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

// "TYPE:N", e.g. "cpu:2" or "cuda:1". CUDA devices are refused with the
// reason by a build without CUDA; a build with it checks at run time that the
// node has that many GPUs.
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
  if (type == "cuda") {
#ifdef RILL_WITH_CUDA
    list.type = DeviceType::kCuda;
    return list;
#else
    return invalid_argument("devices '{}': this build of Rill has no CUDA support (nvcc was not found when it was "
                            "built); use cpu:{}", text, list.count);
#endif
  }
  return invalid_argument("devices '{}': unknown device type '{}' (expected cpu:N or cuda:N)", text, type);
}

}  // namespace rill
