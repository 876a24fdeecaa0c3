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

// The body's port sets (body.h): its own, or one of every port.
std::vector<PortSetSpec> port_sets_of(const Body& body, size_t inputs, size_t outputs) {
  return std::visit(
      [&](const auto& b) -> std::vector<PortSetSpec> {
        if constexpr (requires { b.port_sets(inputs, outputs); }) {
          return b.port_sets(inputs, outputs);
        } else {
          PortSetSpec all;
          for (size_t i = 0; i < inputs; ++i) all.inputs.push_back(static_cast<int>(i));
          for (size_t o = 0; o < outputs; ++o) all.outputs.push_back(static_cast<int>(o));
          return {all};
        }
      },
      body);
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
  is_variable_ = std::visit(
      [](const auto& b) {
        if constexpr (requires { std::decay_t<decltype(b)>::kVersions; }) return std::decay_t<decltype(b)>::kVersions;
        return false;
      },
      body_);
  for (PortSetSpec& spec : port_sets_of(body_, inputs_.size(), outputs_.size()))
    sets_.push_back(PortSet{std::move(spec.inputs), std::move(spec.outputs)});
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

bool Actor::set_can_act(const PortSet& set) const {
  if (is_variable_) {
    for (int o : set.outputs)
      if (!outputs_[static_cast<size_t>(o)].next_free()) return false;
    // The first version, or (untrained) every one, needs no input.
    if (set.inputs.empty() || set.versions == 0) return set.versions < limit() && may_begin(first_step_ + set.versions);
    // An update (its gradient, and any gate, read) that readies the next
    // version begins that step.
    for (int i : set.inputs)
      if (!inputs_[static_cast<size_t>(i)].readable()) return false;
    return set.versions >= limit() || may_begin(first_step_ + set.versions);
  }
  if (eord_sent_) return false;
  if (is_source_ && (acts_ >= limit() || !may_begin(first_step_ + acts_ / acts_per_step_))) return false;
  for (int i : set.inputs)
    if (!inputs_[static_cast<size_t>(i)].readable()) return false;
  for (int o : set.outputs) {
    const OutputPort& out = outputs_[static_cast<size_t>(o)];
    if (out.filling == 0 && !out.next_free()) return false;  // a slot being filled is ours
  }
  return true;
}

int Actor::next_set() const {
  const int n = static_cast<int>(sets_.size());
  if (n == 1) return set_can_act(sets_[0]) ? 0 : -1;  // every actor but a laned variable
  for (int k = 1; k <= n; ++k) {
    const int s = (last_set_ + k) % n;
    if (set_can_act(sets_[static_cast<size_t>(s)])) return s;
  }
  return -1;
}

bool Actor::can_act() const {
  ready_set_ = next_set();
  return ready_set_ >= 0;
}

void Actor::ready_outputs(const PortSet& set, Outbox& outbox, int64_t step) {
  for (int o : set.outputs) ready_output(outputs_[static_cast<size_t>(o)], outbox, step);
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
  // The set can_act() found: whether a step may begin can change meanwhile
  // (another thread holds the run's end), but the step it let begin is
  // counted as begun, so the act goes ahead.
  last_set_ = ready_set_;
  ready_set_ = -1;
  if (last_set_ < 0) return internal_error("actor '{}' acted without can_act()", name_);
  PortSet& set = sets_[static_cast<size_t>(last_set_)];
  size_t outs = 0;
  for (int o : set.outputs) {
    const OutputPort& out = outputs_[static_cast<size_t>(o)];
    out_now_[outs++] = &out.slots[out.next_slot()];
  }
  const std::span<const TensorView* const> outputs(out_now_.data(), outs);
  if (is_variable_ && (set.inputs.empty() || set.versions == 0)) {
    // A version that needs no update: the first (the model as init left
    // it), or, untrained, every one.
    const ActIo io{first_step_ + set.versions, {}, outputs, 0, last_set_};
    Status status = std::visit(
        [&](auto& body) -> Status {
          if constexpr (requires { body.first_version(io); }) return body.first_version(io);
          return internal_error("a body without versions acted as a variable");
        },
        body_);
    if (!status.ok()) return status.with_context(fmt::format("actor '{}'", name_));
    ready_outputs(set, outbox, first_step_ + set.versions);
    ++set.versions;
    return {};
  }
  size_t ins = 0;
  for (int i : set.inputs) {
    const InputPort& in = inputs_[static_cast<size_t>(i)];
    in_now_[ins++] = &in.slots[in.front()];
  }
  // A variable's act n is the update after step n - 1 (per set of ports).
  const int64_t step = is_variable_ ? first_step_ + set.versions - 1 : first_step_ + acts_ / acts_per_step_;
  const ActIo io{step, std::span<const TensorView* const>(in_now_.data(), ins), outputs, acts_ % acts_per_step_,
                 last_set_};
  const bool named_set = sets_.size() > 1;
  const bool traced = tracing_ && acts_ < steps_;
  if (traced) trace_.begin_ns[acts_] = now_ns();
  Status status = std::visit([&](auto& body) { return body.act(io); }, body_);
  if (traced) trace_.end_ns[acts_] = now_ns();
  if (!status.ok())
    return status.with_context(named_set ? fmt::format("actor '{}' port set {} step {}", name_, last_set_, step)
                                         : fmt::format("actor '{}' step {}", name_, step));
  ++acts_;
  if (is_variable_) {
    if (set.versions < limit()) {
      ready_outputs(set, outbox, first_step_ + set.versions);
      ++set.versions;
    }
  } else {
    ready_outputs(set, outbox, step);
  }
  for (int i : set.inputs) {
    InputPort& in = inputs_[static_cast<size_t>(i)];
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
    bool done = is_source_ ? acts_ >= limit : inputs_done;
    if (is_variable_) {
      done = true;
      for (const PortSet& set : sets_) done = done && set.versions >= limit;
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
  if (is_variable_) {
    for (const PortSet& set : sets_) {
      if (set.inputs.empty() || set.versions == 0) continue;
      const InputPort& in = inputs_[static_cast<size_t>(set.inputs[0])];
      if (!in.readable() && !in.eord)
        add(fmt::format("waits for gradient regst '{}' from {}", in.name, ActorId::to_string(in.producer)));
    }
  } else {
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
