// ActorId: a 64-bit id naming one actor anywhere in the cluster. It packs
//   node (16 bits) | device type (4) | device index (8) | stream (4) | task index (32)
// so that routing a message is bit extraction: the high 32 bits name the
// thread that runs the actor (its "thread key"), the low 32 the actor on it.
// A plain value; ids cross processes, pointers never do.
#pragma once

#include <cstdint>
#include <string>

#include <fmt/format.h>

namespace rill {

enum class DeviceType : uint8_t { kCpu = 0, kCuda = 1, kIo = 2, kComm = 3 };

inline const char* device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::kCpu: return "cpu";
    case DeviceType::kCuda: return "cuda";
    case DeviceType::kIo: return "io";
    case DeviceType::kComm: return "comm";
  }
  return "?";
}

struct ActorId {
  static constexpr int kNodeBits = 16, kTypeBits = 4, kDeviceBits = 8, kStreamBits = 4, kIndexBits = 32;
  static constexpr int kIndexShift = 0;
  static constexpr int kStreamShift = kIndexShift + kIndexBits;
  static constexpr int kDeviceShift = kStreamShift + kStreamBits;
  static constexpr int kTypeShift = kDeviceShift + kDeviceBits;
  static constexpr int kNodeShift = kTypeShift + kTypeBits;
  static_assert(kNodeShift + kNodeBits == 64);

  static constexpr uint64_t make(uint32_t node, DeviceType type, uint32_t device, uint32_t stream,
                                 uint32_t index) {
    return (uint64_t{node} << kNodeShift) | (uint64_t{static_cast<uint8_t>(type)} << kTypeShift) |
           (uint64_t{device} << kDeviceShift) | (uint64_t{stream} << kStreamShift) | index;
  }
  static constexpr uint32_t node(uint64_t id) { return (id >> kNodeShift) & ((1u << kNodeBits) - 1); }
  static constexpr DeviceType device_type(uint64_t id) {
    return static_cast<DeviceType>((id >> kTypeShift) & ((1u << kTypeBits) - 1));
  }
  static constexpr uint32_t device(uint64_t id) { return (id >> kDeviceShift) & ((1u << kDeviceBits) - 1); }
  static constexpr uint32_t stream(uint64_t id) { return (id >> kStreamShift) & ((1u << kStreamBits) - 1); }
  static constexpr uint32_t index(uint64_t id) { return static_cast<uint32_t>(id); }
  // The thread that runs the actor: everything but the task index.
  static constexpr uint64_t thread_key(uint64_t id) { return id >> kStreamShift; }

  static std::string to_string(uint64_t id) {
    return fmt::format("{}:{}{}.{}#{}", node(id), device_type_name(device_type(id)), device(id), stream(id),
                       index(id));
  }
};

}  // namespace rill
