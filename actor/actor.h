// Actor: the run-time life of one task. A state machine driven only by
// messages: it acts when every input has a readable slot and every output a
// free one, then sends `ready` to consumers and `ack` to producers. After its
// last step it sends `eord`, waits for every lent slot to come back, and retires.
//
// An actor is touched by the one thread that runs it (no locks). Steady-state
// handling of a message allocates nothing.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "actor/body.h"
#include "actor/device_collective_body.h"
#include "actor/message.h"
#include "actor/own_piece_body.h"
#include "actor/regst.h"
#include "actor/run_end.h"

namespace rill {

using Body = std::variant<ComputeBody, SourceBody, VariableBody, LanedVariableBody, BoxingBody, DeviceCollectiveBody,
                          OwnPieceBody, SinkBody, CopyBody>;

// Optional per-act timestamps (steady clock, ns), preallocated for `steps`
// acts. On a GPU's thread an act only enqueues its work: done_ns is when its
// thread saw that work complete (its event), 0 elsewhere.
struct ActTrace {
  std::vector<int64_t> begin_ns;
  std::vector<int64_t> end_ns;
  std::vector<int64_t> done_ns;
};

class Actor {
 public:
  // `steps`: how many steps the job runs. Sources act that many times; a
  // variable readies its model that many times; others act once per input step.
  // `first_step`: the global index of the first step (a resumed job starts
  // past 0: sources read on from there, Adam counts on); `steps` counts from it.
  // `acts_per_step`: the micro-batches of a step when the actor acts once per
  // micro-batch (ports' acts_per_slot say how its regsts keep pace), else 1.
  Actor(uint64_t id, std::string name, int64_t steps, std::vector<InputPort> inputs,
        std::vector<OutputPort> outputs, Body body, int64_t first_step = 0, int acts_per_step = 1);

  // Sources and variables begin no step at or past `end`'s end, and none
  // while it holds (actor/run_end.h); without one, every step runs. Call
  // before the first message.
  void set_end(RunEnd* end) { end_ = end; }
  bool begins_steps() const { return is_source_ || is_variable_; }

  uint64_t id() const { return id_; }
  const std::string& name() const { return name_; }
  // Takes one message addressed to this actor into its state (a readable
  // slot, a slot back, an end of data) without acting.
  Status receive(const ActorMsg& msg, Outbox& outbox);
  // Whether every input has a readable slot and every output a free one.
  bool can_act() const;
  // Acts once; call only when can_act().
  Status act_once(Outbox& outbox);
  // Sends eord once its work is done and retires once its slots are back;
  // receive() and act_once() call it, a driver once before the first message.
  void finish_if_done(Outbox& outbox);
  // For a driver of a few actors: acts for as long as it can (sources and
  // variables start without input), and receive() then that.
  Status start(Outbox& outbox);
  Status handle(const ActorMsg& msg, Outbox& outbox);
  bool retired() const { return retired_; }
  int64_t acts() const { return acts_; }
  int acts_per_step() const { return acts_per_step_; }
  // Where its next act falls in the run's sequence of micro-batches (step x
  // `micro_batches` + micro-batch): its act count when it acts once per
  // micro-batch; for others that act once a step, the step's last; for a
  // variable, whose act n is the update after step n - 1, that step's last
  // (an update runs as soon as its gradient is in: the next step waits on it).
  int64_t next_micro(int micro_batches) const {
    const int per_act = micro_batches / acts_per_step_;
    return acts_ * per_act + (is_variable_ ? -1 : per_act - 1);
  }
  // What this actor waits for, for stuck-job reports: "waits for regst 'h1'
  // (slot from actor 0:cpu0.0#3)" or "waits for ack of regst 'x' slot 1".
  std::string describe_wait() const;
  void enable_trace();
  bool tracing() const { return tracing_; }
  // Act `act`'s work on the device is complete (now).
  void trace_done(int64_t act);
  const ActTrace& trace() const { return trace_; }
  Body& body() { return body_; }
  // Whether an act may wait for other threads to come to it (a device
  // collective meeting its ranks on the host).
  bool meets_on_host() const {
    const auto* device = std::get_if<DeviceCollectiveBody>(&body_);
    return device != nullptr && device->meets_on_host();
  }
  const std::vector<OutputPort>& outputs() const { return outputs_; }

 private:
  // The ports of one act: every port (one set), or the sets its body names
  // (body.h PortSets: a laned variable's per lane). An act uses one set, the
  // first able to act after the one that acted last. A variable's sets each
  // ready their own model versions.
  struct PortSet {
    std::vector<int> inputs;
    std::vector<int> outputs;
    int64_t versions = 0;  // variables: model versions this set readied
  };
  Status act(Outbox& outbox);
  bool set_can_act(const PortSet& set) const;
  int next_set() const;  // -1: none can act
  void send_eord(Outbox& outbox);
  // Acts in all (sources) or versions in all (variables): steps_, or fewer
  // when the run's end was lowered.
  int64_t limit() const {
    return end_ ? std::min(steps_, (end_->end() - first_step_) * acts_per_step_) : steps_;
  }
  // Whether `step` may begin now (it is published to the run's end).
  bool may_begin(int64_t step) const { return !end_ || end_->may_begin(step); }
  void ready_outputs(const PortSet& set, Outbox& outbox, int64_t step);
  void ready_output(OutputPort& out, Outbox& outbox, int64_t step);

  uint64_t id_;
  std::string name_;
  int64_t steps_;  // acts in all: steps x acts_per_step
  int64_t first_step_;
  int acts_per_step_;
  RunEnd* end_ = nullptr;
  std::vector<InputPort> inputs_;
  std::vector<OutputPort> outputs_;
  Body body_;
  bool is_source_ = false;
  bool is_variable_ = false;  // its body readies model versions (body.h kVersions)
  int64_t acts_ = 0;
  std::vector<PortSet> sets_;
  int last_set_ = -1;
  mutable int ready_set_ = -1;  // what the last can_act() found (-1: none), for act()
  bool eord_sent_ = false;
  bool retired_ = false;
  bool tracing_ = false;
  ActTrace trace_;
  std::vector<const TensorView*> in_now_;
  std::vector<const TensorView*> out_now_;
};

}  // namespace rill
