#include "comm/flight_record.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace rill::comm {
namespace {

double ms_between(FlightRecord::Clock::time_point from, FlightRecord::Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

}  // namespace

FlightRecord::FlightRecord(int nodes) {
  MutexLock lock(mu_);
  links_.resize(static_cast<size_t>(std::max(nodes, 0)));
  ring_.resize(kEvents);
}

int FlightRecord::add_caller(std::string name, std::vector<int> group) {
  MutexLock lock(mu_);
  callers_.push_back(Caller{std::move(name), std::move(group)});
  return static_cast<int>(callers_.size()) - 1;
}

void FlightRecord::add_locked(const Event& e) {
  ring_[next_] = e;
  next_ = (next_ + 1) % kEvents;
  if (count_ < kEvents) ++count_;
}

int64_t FlightRecord::begin(int caller, const char* op, int64_t bytes) {
  MutexLock lock(mu_);
  if (caller < 0 || caller >= static_cast<int>(callers_.size())) return -1;  // not a caller of this record
  Caller& c = callers_[static_cast<size_t>(caller)];
  const int64_t seq = c.calls++;
  c.op = op;
  c.bytes = bytes;
  c.in_call = true;
  c.failed = false;
  c.waiting_for = -1;
  c.since = Clock::now();
  add_locked({c.since, Kind::kBegin, caller, seq, bytes});
  return seq;
}

void FlightRecord::wait_for(int caller, int rank) {
  MutexLock lock(mu_);
  if (caller < 0 || caller >= static_cast<int>(callers_.size())) return;
  Caller& c = callers_[static_cast<size_t>(caller)];
  const int node = rank >= 0 && rank < static_cast<int>(c.group.size()) ? c.group[static_cast<size_t>(rank)] : -1;
  if (node == c.waiting_for) return;
  c.waiting_for = node;
  if (node >= 0) c.since = Clock::now();
}

void FlightRecord::end(int caller, bool ok) {
  MutexLock lock(mu_);
  if (caller < 0 || caller >= static_cast<int>(callers_.size())) return;
  Caller& c = callers_[static_cast<size_t>(caller)];
  c.in_call = false;
  c.failed = !ok;
  if (ok) {
    c.waiting_for = -1;  // a failed call keeps what it waited for
    c.last_completed = c.calls - 1;
    c.last_op = c.op;
  }
  add_locked({Clock::now(), ok ? Kind::kEnd : Kind::kFailed, caller, c.calls - 1, c.bytes});
}

void FlightRecord::message(bool sent, int node, int64_t bytes) {
  MutexLock lock(mu_);
  if (node < 0 || node >= static_cast<int>(links_.size())) return;
  Link& link = links_[static_cast<size_t>(node)];
  const auto now = Clock::now();
  if (sent) ++link.sent, link.sent_bytes += bytes, link.last_sent = now;
  else ++link.received, link.received_bytes += bytes, link.last_received = now;
  add_locked({now, sent ? Kind::kSent : Kind::kReceived, node, sent ? link.sent : link.received, bytes});
}

std::vector<FlightRecord::Wait> FlightRecord::waits() const {
  MutexLock lock(mu_);
  const auto now = Clock::now();
  std::vector<Wait> out;
  for (const Caller& c : callers_) {
    if (!(c.in_call || c.failed) || c.waiting_for < 0) continue;
    out.push_back(Wait{fmt::format("{}: {} #{} among nodes [{}] {} node {} ({:.1f} s)", c.name, c.op, c.calls - 1,
                                   fmt::join(c.group, ", "), c.in_call ? "waits for" : "failed waiting for",
                                   c.waiting_for, ms_between(c.since, now) / 1e3),
                       c.waiting_for, c.name, c.op, c.calls - 1});
  }
  return out;
}

nlohmann::json FlightRecord::json(size_t events) const {
  MutexLock lock(mu_);
  const auto now = Clock::now();
  nlohmann::json callers = nlohmann::json::array();
  for (const Caller& c : callers_) {
    nlohmann::json j = {{"name", c.name},
                        {"group", c.group},
                        {"calls", c.calls},
                        {"state", c.in_call ? "in call" : c.failed ? "failed" : "idle"}};
    if (c.in_call || c.failed) {
      j["op"] = c.op;
      j["seq"] = c.calls - 1;
      j["bytes"] = c.bytes;
      j["ms"] = ms_between(c.since, now);
      if (c.waiting_for >= 0) j["waiting_for"] = c.waiting_for;
    }
    if (c.last_completed >= 0) j["last_completed"] = {{"op", c.last_op}, {"seq", c.last_completed}};
    callers.push_back(std::move(j));
  }
  nlohmann::json links = nlohmann::json::array();
  for (size_t n = 0; n < links_.size(); ++n) {
    const Link& l = links_[n];
    if (l.sent == 0 && l.received == 0) continue;
    nlohmann::json j = {{"node", n}, {"sent", l.sent}, {"received", l.received}, {"sent_bytes", l.sent_bytes},
                        {"received_bytes", l.received_bytes}};
    if (l.received > 0) j["last_received_ms_ago"] = ms_between(l.last_received, now);
    if (l.sent > 0) j["last_sent_ms_ago"] = ms_between(l.last_sent, now);
    links.push_back(std::move(j));
  }
  nlohmann::json ring = nlohmann::json::array();
  const size_t n = std::min(events, count_);
  for (size_t i = 0; i < n; ++i) {
    const Event& e = ring_[(next_ + kEvents - n + i) % kEvents];
    const char* kinds[] = {"begin", "end", "failed", "sent", "received"};
    nlohmann::json j = {{"ms_ago", ms_between(e.at, now)}, {"event", kinds[static_cast<int>(e.kind)]}};
    if (e.kind == Kind::kSent || e.kind == Kind::kReceived) {
      j["node"] = e.who;
      j["message"] = e.seq;
    } else {
      j["caller"] = callers_[static_cast<size_t>(e.who)].name;
      j["seq"] = e.seq;
    }
    j["bytes"] = e.bytes;
    ring.push_back(std::move(j));
  }
  return {{"callers", callers}, {"links", links}, {"events", ring}};
}

}  // namespace rill::comm
