#include "actor/actor.h"

#include <chrono>

#include <fmt/format.h>

#include "base/actor_id.h"

namespace rill {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Actor::Actor(uint64_t id, std::string name, int64_t steps, std::vector<InputPort> inputs,
             std::vector<OutputPort> outputs, Body body, int64_t first_step, int acts_per_step)
    : id_(id),
      name_(std::move(name)),
      steps_(steps * acts_per_step),
      first_step_(first_step),
      acts_per_step_(acts_per_step),
      inputs_(std::move(inputs)),
      outputs_(std::move(outputs)),
      body_(std::move(body)) {
  is_source_ = std::holds_alternative<SourceBody>(body_);
  is_variable_ = std::holds_alternative<VariableBody>(body_);
  if (is_variable_) lanes_ = std::get<VariableBody>(body_).lanes();
  if (lanes_ > 1) lane_readied_.assign(static_cast<size_t>(lanes_), 0);
  in_now_.resize(inputs_.size());
  out_now_.resize(outputs_.size());
  for (size_t i = 0; i < inputs_.size(); ++i)
    for (size_t j = 0; j < i && !inputs_[i].repeat; ++j) inputs_[i].repeat = inputs_[j].regst == inputs_[i].regst;
  for (OutputPort& out : outputs_) {
    out.repeats.assign(out.consumers.size(), false);
    for (size_t i = 0; i < out.consumers.size(); ++i)
      for (size_t j = 0; j < i && !out.repeats[i]; ++j)
        out.repeats[i] = ActorId::node(out.consumers[j]) == ActorId::node(out.consumers[i]);
  }
}

void Actor::enable_trace() {
  tracing_ = true;
  trace_.begin_ns.assign(static_cast<size_t>(steps_), 0);
  trace_.end_ns.assign(static_cast<size_t>(steps_), 0);
  trace_.done_ns.assign(static_cast<size_t>(steps_), 0);
}

void Actor::trace_done(int64_t act) {
  if (tracing_ && act >= 0 && act < steps_) trace_.done_ns[static_cast<size_t>(act)] = now_ns();
}

bool Actor::lane_can_act(int lane) const {
  const int64_t readied = lane_readied_[static_cast<size_t>(lane)];
  if (!outputs_[static_cast<size_t>(lane)].next_free()) return false;
  if (readied == 0) return readied < limit() && may_begin(first_step_);
  // An update that readies the next version begins that step.
  return inputs_[static_cast<size_t>(lane)].readable() && (readied >= limit() || may_begin(first_step_ + readied));
}

int Actor::next_ready_lane() const {
  for (int k = 1; k <= lanes_; ++k) {
    const int lane = (last_lane_ + k) % lanes_;
    if (lane_can_act(lane)) return lane;
  }
  return -1;
}

Status Actor::act_lane(int lane, Outbox& outbox) {
  last_lane_ = lane;
  auto& body = std::get<VariableBody>(body_);
  OutputPort& out = outputs_[static_cast<size_t>(lane)];
  int64_t& readied = lane_readied_[static_cast<size_t>(lane)];
  if (readied == 0) {  // the lane's first version: the values as they are
    body.start_lane(out.slots[static_cast<size_t>(out.next_slot())]);
    ready_output(out, outbox, first_step_);
    ++readied;
    return {};
  }
  InputPort& in = inputs_[static_cast<size_t>(lane)];
  in_now_[0] = &in.slots[in.front()];
  out_now_[0] = &out.slots[out.next_slot()];
  const int64_t step = first_step_ + readied - 1;  // the step whose gradient this is
  ActIo io{step, std::span<const TensorView* const>(in_now_.data(), 1),
           std::span<const TensorView* const>(out_now_.data(), 1), 0, lane};
  const bool traced = tracing_ && acts_ < steps_;  // the first `steps` updates, whichever lanes
  if (traced) trace_.begin_ns[acts_] = now_ns();
  Status status = body.act_lane(io);
  if (traced) trace_.end_ns[acts_] = now_ns();
  if (!status.ok()) return status.with_context(fmt::format("actor '{}' lane {} step {}", name_, lane, step));
  ++acts_;
  if (readied < limit()) {
    ready_output(out, outbox, first_step_ + readied);
    ++readied;
  }
  outbox.send(ActorMsg{id_, in.producer, MsgType::kAck, in.front(), in.regst, step});
  in.pop();
  return {};
}

bool Actor::can_act() const {
  if (lanes_ > 1) return next_ready_lane() >= 0;
  if (is_variable_) {
    if (!outputs_[0].next_free()) return false;
    if (inputs_.empty() || readied_ == 0) return readied_ < limit() && may_begin(first_step_ + readied_);
    // An update that readies the next version begins that step.
    return inputs_[0].readable() && (readied_ >= limit() || may_begin(first_step_ + readied_));
  }
  if (eord_sent_) return false;
  if (is_source_ && (acts_ >= limit() || !may_begin(first_step_ + acts_ / acts_per_step_))) return false;
  for (const InputPort& in : inputs_)
    if (!in.readable()) return false;
  for (const OutputPort& out : outputs_)
    if (out.filling == 0 && !out.next_free()) return false;  // a slot being filled is ours
  return true;
}

void Actor::ready_outputs(Outbox& outbox, int64_t step) {
  for (OutputPort& out : outputs_) ready_output(out, outbox, step);
}

void Actor::ready_output(OutputPort& out, Outbox& outbox, int64_t step) {
  if (++out.filling < out.acts_per_slot) return;
  out.filling = 0;
  int slot = out.next_slot();
  out.pending[slot] = static_cast<int>(out.consumers.size());
  ++out.written;
  for (size_t c = 0; c < out.consumers.size(); ++c)
    outbox.send(ActorMsg{id_, out.consumers[c], MsgType::kReady, slot, out.regst, step, out.repeats[c]});
}

Status Actor::act(Outbox& outbox) {
  if (lanes_ > 1) return act_lane(next_ready_lane(), outbox);
  // A variable's first version (and, untrained, every version) needs no work:
  // the model slot already holds the values.
  if (is_variable_ && (inputs_.empty() || readied_ == 0)) {
    ready_outputs(outbox, first_step_ + readied_);
    ++readied_;
    return {};
  }
  for (size_t i = 0; i < inputs_.size(); ++i) in_now_[i] = &inputs_[i].slots[inputs_[i].front()];
  for (size_t o = 0; o < outputs_.size(); ++o) out_now_[o] = &outputs_[o].slots[outputs_[o].next_slot()];
  int64_t step = first_step_ + acts_ / acts_per_step_;
  bool traced = tracing_ && acts_ < steps_;
  if (traced) trace_.begin_ns[acts_] = now_ns();
  ActIo io{step, in_now_, out_now_, acts_ % acts_per_step_};
  Status status = std::visit([&](auto& body) { return body.act(io); }, body_);
  if (traced) trace_.end_ns[acts_] = now_ns();
  if (!status.ok()) return status.with_context(fmt::format("actor '{}' step {}", name_, step));
  ++acts_;
  if (is_variable_) {
    if (readied_ < limit()) {
      ready_outputs(outbox, first_step_ + readied_);
      ++readied_;
    }
  } else {
    ready_outputs(outbox, step);
  }
  for (InputPort& in : inputs_) {
    if (++in.used < in.acts_per_slot) continue;
    in.used = 0;
    if (!in.repeat) outbox.send(ActorMsg{id_, in.producer, MsgType::kAck, in.front(), in.regst, step});
    in.pop();
  }
  return {};
}

void Actor::send_eord(Outbox& outbox) {
  eord_sent_ = true;
  for (const OutputPort& out : outputs_)
    for (uint64_t consumer : out.consumers) outbox.send(ActorMsg{id_, consumer, MsgType::kEord, 0, out.regst, 0});
}

void Actor::finish_if_done(Outbox& outbox) {
  bool inputs_done = true;
  for (const InputPort& in : inputs_)
    if (!in.eord || in.readable()) inputs_done = false;
  if (!eord_sent_) {
    const int64_t limit = this->limit();
    bool done = is_source_ ? acts_ >= limit : is_variable_ ? readied_ >= limit : inputs_done;
    if (lanes_ > 1) {
      done = true;
      for (int64_t r : lane_readied_) done = done && r >= limit;
    }
    if (done) send_eord(outbox);
  }
  if (eord_sent_ && inputs_done) {
    bool slots_back = true;
    for (const OutputPort& out : outputs_)
      if (!out.all_free()) slots_back = false;
    retired_ = slots_back;
  }
}

Status Actor::act_once(Outbox& outbox) {
  RILL_RETURN_IF_ERROR(act(outbox));
  finish_if_done(outbox);
  return {};
}

Status Actor::start(Outbox& outbox) {
  while (can_act()) RILL_RETURN_IF_ERROR(act(outbox));
  finish_if_done(outbox);
  return {};
}

Status Actor::handle(const ActorMsg& msg, Outbox& outbox) {
  RILL_RETURN_IF_ERROR(receive(msg, outbox));
  return start(outbox);
}

Status Actor::receive(const ActorMsg& msg, Outbox& outbox) {
  if (msg.type == MsgType::kWake) {  // the run's end moved: perhaps done now
    finish_if_done(outbox);
    return {};
  }
  if (msg.type == MsgType::kAck) {
    for (OutputPort& out : outputs_) {
      if (out.regst != msg.regst) continue;
      if (msg.slot < 0 || msg.slot >= static_cast<int>(out.pending.size()) || out.pending[msg.slot] <= 0)
        return internal_error("actor '{}': unexpected ack of regst '{}' slot {} from {}", name_, out.name,
                              msg.slot, ActorId::to_string(msg.src));
      if (--out.pending[msg.slot] == 0)
        if (auto* copy = std::get_if<CopyBody>(&body_))  // a GPU copy's next write waits for the readers' work
          RILL_RETURN_IF_ERROR(copy->slot_back(out.slots[static_cast<size_t>(msg.slot)].data));
      finish_if_done(outbox);
      return {};
    }
  } else {
    bool read = false;  // every port reading the regst takes the message
    for (InputPort& in : inputs_) {
      if (in.regst != msg.regst) continue;
      read = true;
      if (msg.type == MsgType::kEord) {
        in.eord = true;
      } else if (msg.slot < 0 || msg.slot >= static_cast<int>(in.slots.size()) || !in.push(msg.slot)) {
        return internal_error("actor '{}': regst '{}' readied slot {} beyond its {} slots", name_, in.name,
                              msg.slot, in.slots.size());
      }
    }
    if (read) {
      finish_if_done(outbox);
      return {};
    }
  }
  return internal_error("actor '{}' got {} for regst {} it does not {}", name_, msg_type_name(msg.type), msg.regst,
                        msg.type == MsgType::kAck ? "write" : "read");
}

std::string Actor::describe_wait() const {
  if (retired_) return "retired";
  std::string what;
  auto add = [&](const std::string& s) { what += what.empty() ? s : "; " + s; };
  if (lanes_ > 1) {
    for (int lane = 0; lane < lanes_; ++lane) {
      const InputPort& in = inputs_[static_cast<size_t>(lane)];
      if (lane_readied_[static_cast<size_t>(lane)] > 0 && !in.readable() && !in.eord)
        add(fmt::format("waits for lane {}'s gradient regst '{}' from {}", lane, in.name,
                        ActorId::to_string(in.producer)));
    }
  } else if (is_variable_ && !inputs_.empty() && readied_ > 0 && !inputs_[0].readable() && !inputs_[0].eord) {
    add(fmt::format("waits for gradient regst '{}' from {}", inputs_[0].name, ActorId::to_string(inputs_[0].producer)));
  }
  if (!is_variable_) {
    for (const InputPort& in : inputs_)
      if (!in.readable() && !in.eord)
        add(fmt::format("waits for regst '{}' from {}", in.name, ActorId::to_string(in.producer)));
  }
  for (const OutputPort& out : outputs_) {
    int slot = out.next_slot();
    if (out.pending[slot] > 0)
      add(fmt::format("waits for {} ack(s) of regst '{}' slot {}", out.pending[slot], out.name, slot));
  }
  if (what.empty()) what = eord_sent_ ? "draining" : "idle";
  return fmt::format("{} [{}] after {} act(s): {}", name_, ActorId::to_string(id_), acts_, what);
}

}  // namespace rill
