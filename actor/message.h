// ActorMsg: the one message actors exchange. Small and trivially copyable, so a
// thread's queue moves it by value; across nodes it is re-encoded as
// FlatBuffers (comm/), never memcpy'd with pointers inside.
#pragma once

#include <cstdint>

namespace rill {

enum class MsgType : uint8_t {
  kReady = 0,  // producer -> consumer: slot `slot` of regst `regst` holds step `step`
  kAck = 1,    // consumer -> producer: done reading slot `slot` of regst `regst`
  kEord = 2,   // producer -> consumer: regst `regst` will carry no more steps
  // The runtime -> a source or variable: its run's end moved (actor/run_end.h);
  // look again whether it can act or is done. Never crosses nodes.
  kWake = 3,
};

inline const char* msg_type_name(MsgType type) {
  switch (type) {
    case MsgType::kReady: return "ready";
    case MsgType::kAck: return "ack";
    case MsgType::kEord: return "eord";
    case MsgType::kWake: return "wake";
  }
  return "?";
}

struct ActorMsg {
  uint64_t src = 0;
  uint64_t dst = 0;
  MsgType type = MsgType::kReady;
  int32_t slot = 0;
  int64_t regst = 0;
  int64_t step = 0;
  // A ready to another node whose bytes an earlier ready of the same slot,
  // to a consumer on that node, already carries: sent without them.
  bool repeat = false;
};

// Where an actor puts the messages it sends. The runtime's bus routes them by
// destination id; tests use a recording outbox to step delivery by hand.
class Outbox {
 public:
  virtual ~Outbox() = default;
  virtual void send(const ActorMsg& msg) = 0;
};

}  // namespace rill
