#include "comm/shm_lanes.h"

#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include <spdlog/spdlog.h>

namespace rill::comm {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Copies message bytes [offset, offset + n) of header ++ body into the two
// spans a record takes.
std::pair<std::span<const std::byte>, std::span<const std::byte>> slice(std::span<const std::byte> header,
                                                                        std::span<const std::byte> body,
                                                                        uint64_t offset, uint64_t n) {
  std::span<const std::byte> a, b;
  if (offset < header.size()) {
    const uint64_t take = std::min<uint64_t>(n, header.size() - offset);
    a = header.subspan(offset, take);
    n -= take;
    offset = header.size();
  }
  if (n > 0) b = body.subspan(offset - header.size(), n);
  return {a, b};
}

}  // namespace

std::string inbox_name(const std::string& prefix, const SessionId& session) {
  std::string name = prefix;
  for (size_t i = 0; i < 16; ++i) name += fmt::format("{:02x}", session[i]);
  return name;
}

ShmLanes::ShmLanes(int rank, std::vector<bool> local, std::string name, const ZmqOptions& options, Deliver deliver,
                   Broken broken, Lost lost, Handled handled, ConnectedFor connected_for, SendTcp send_tcp)
    : rank_(rank),
      local_(std::move(local)),
      name_(std::move(name)),
      options_(options),
      deliver_(std::move(deliver)),
      broken_(std::move(broken)),
      lost_(std::move(lost)),
      handled_(std::move(handled)),
      connected_for_(std::move(connected_for)),
      send_tcp_(std::move(send_tcp)) {}

StatusOr<std::unique_ptr<ShmLanes>> ShmLanes::start(int rank, std::vector<bool> local, std::string name,
                                                    const ZmqOptions& options, Deliver deliver, Broken broken,
                                                    Lost lost, Handled handled, ConnectedFor connected_for,
                                                    SendTcp send_tcp) {
  std::unique_ptr<ShmLanes> lanes(
      new ShmLanes(rank, std::move(local), std::move(name), options, std::move(deliver), std::move(broken),
                   std::move(lost), std::move(handled), std::move(connected_for), std::move(send_tcp)));
  // The machine's ranks in order; a rank's inbox has a ring for each of the
  // others, so the ring of sender s in rank r's inbox is s's place among
  // them without r: both sides compute it alike.
  std::vector<int> machine;
  for (int r = 0; r < static_cast<int>(lanes->local_.size()); ++r)
    if (r == rank || lanes->local_[r]) machine.push_back(r);
  auto slot = [&](int sender, int receiver) {
    const int at = static_cast<int>(std::find(machine.begin(), machine.end(), sender) - machine.begin());
    return at - (receiver < sender ? 1 : 0);
  };
  lanes->lanes_.resize(lanes->local_.size());
  for (int peer : machine) {
    if (peer == rank) continue;
    auto lane = std::make_unique<Lane>();
    lane->slot_in = slot(peer, rank);
    lane->slot_out = slot(rank, peer);
    lanes->lanes_[peer] = std::move(lane);
  }
  if (machine.size() < 2) return lanes;
  lanes->slots_ = static_cast<int>(machine.size()) - 1;
  // What agents of this user killed before their peers attached left
  // behind (an inbox holds its rings' memory while its name lives).
  if (const auto stale = ShmInbox::remove_stale(options.shm_name_prefix, std::chrono::minutes(10)); !stale.empty())
    spdlog::info("rank {}: removed {} shared-memory inbox(es) that agents which died left behind ({}{})", rank,
                 stale.size(), stale[0], stale.size() > 1 ? ", ..." : "");
  RILL_ASSIGN_OR_RETURN(lanes->inbox_, ShmInbox::create(lanes->name_, lanes->slots_, options.shm_ring_bytes));
  lanes->thread_ = std::thread([p = lanes.get()] { p->loop(); });
  return lanes;
}

ShmLanes::~ShmLanes() { close(); }

bool ShmLanes::on_receive_thread() const {
  const auto self = std::this_thread::get_id();
  return self == thread_.get_id() || self == zmq_receiver_.load();
}

void ShmLanes::set_peer_name(int peer, const std::string& name) {
  if (peer < 0 || peer >= static_cast<int>(lanes_.size()) || !lanes_[peer]) return;
  std::lock_guard lock(lanes_[peer]->name_mu);
  lanes_[peer]->name = name;
}

ShmLanes::Outbox ShmLanes::open_outbox(int to, Lane& lane, std::string* why) {
  if (lane.outbox) return Outbox::kOpen;
  std::string name;
  {
    std::lock_guard lock(lane.name_mu);
    name = lane.name;
  }
  if (name.empty()) {
    *why = "inbox name is not known here (its session id was not given)";
    return Outbox::kAbsent;
  }
  auto opened = ShmInbox::open(name, slots_);
  if (!opened.ok()) {
    *why = opened.status().message();
    return opened.status().code() == Code::kNotFound ? Outbox::kAbsent : Outbox::kRefused;
  }
  lane.outbox = std::move(*opened);
  lane.outbox->prefault(lane.slot_out);
  return Outbox::kOpen;
}

ShmRing::Write ShmLanes::write_some(Lane& lane, uint64_t tag, std::span<const std::byte> header,
                                    std::span<const std::byte> body, uint64_t* written) {
  ShmRing ring = lane.outbox->ring(lane.slot_out);
  const uint64_t total = header.size() + body.size();
  const uint64_t max = ring.max_record_bytes();
  bool wrote = false;
  ShmRing::Write result = ShmRing::Write::kFull;
  // Each pass writes a record of the message or stops: at most
  // total / max + 1 passes.
  while (true) {
    const uint64_t n = std::min(max, total - *written);
    RecordHeader record;
    record.tag = tag;
    record.total = total;
    record.offset = *written;
    record.flags = (*written == 0 ? RecordHeader::kFirst : 0) | (*written + n == total ? RecordHeader::kLast : 0);
    auto [a, b] = slice(header, body, *written, n);
    result = ring.try_write(record, a, b);
    if (result != ShmRing::Write::kWritten) break;
    *written += n;
    wrote = true;
    if ((record.flags & RecordHeader::kLast) != 0) break;  // an empty message is one record too
  }
  if (wrote) lane.outbox->ring_bell(ring);
  return result;
}

Status ShmLanes::send(int to, uint64_t tag, std::span<const std::byte> header, std::span<const std::byte> body,
                      bool* use_tcp) {
  Lane& lane = *lanes_[to];
  *use_tcp = false;
  if (lane.tcp.load(std::memory_order_acquire)) {
    *use_tcp = true;
    return Status::ok_status();
  }
  auto fail = [&](const char* why) {
    return Status(Code::kUnavailable,
                  fmt::format("rank {}: send to rank {} {}: {}", rank_, to, describe_tag(tag), why));
  };
  if (closed_.load(std::memory_order_acquire)) return fail("transport closed");
  if (lost_(to)) return fail("connection lost");
  // A receive thread never waits for the lane (its holder may be waiting
  // for a receive thread to drain): it queues.
  std::unique_lock lock(lane.send_mu, std::defer_lock);
  bool queue = on_receive_thread();
  if (!queue) {
    lock.lock();
    if (lane.tcp.load(std::memory_order_acquire)) {  // fell back while this thread waited for the lane
      *use_tcp = true;
      return Status::ok_status();
    }
    Outbox outbox = Outbox::kAbsent;
    std::string why;
    {
      std::lock_guard queue_lock(lane.queue_mu);
      queue = !lane.queued.empty();
      if (!queue) outbox = open_outbox(to, lane, &why);
      queue = queue || outbox != Outbox::kOpen;
    }
    if (outbox == Outbox::kRefused) {
      fall_back(to, lane, why, true);
      *use_tcp = true;
      return Status::ok_status();
    }
  }
  uint64_t written = 0;
  if (!queue) {
    // Waits for room: the peer's lane thread never blocks, so it drains.
    for (int spins = 0;; ++spins) {
      const ShmRing::Write wrote = write_some(lane, tag, header, body, &written);
      if (wrote == ShmRing::Write::kWritten) return Status::ok_status();
      if (wrote == ShmRing::Write::kCorrupt) {
        broken_(to, fmt::format("the shared-memory ring to rank {} holds positions no ring has", to));
        return fail("its shared-memory ring is corrupt");
      }
      if (closed_.load(std::memory_order_acquire)) return fail("transport closed");
      if (lost_(to)) return fail("connection lost");
      // The lane thread does not look at a lane while its sender holds it:
      // the sender looks itself.
      if (spins % 1024 == 1023 && !gone(*lane.outbox).empty()) return fail("its process is gone");
      // The lock stays held: another record between this message's would
      // split it.
      if (spins < 1000) {
        cpu_relax();
      } else if (spins < 1100) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
  }
  Outgoing out;
  out.tag = tag;
  out.bytes.resize(header.size() + body.size());
  if (!header.empty()) std::memcpy(out.bytes.data(), header.data(), header.size());
  if (!body.empty()) std::memcpy(out.bytes.data() + header.size(), body.data(), body.size());
  {
    std::lock_guard queue_lock(lane.queue_mu);
    if (lane.tcp.load(std::memory_order_acquire)) {  // fell back meanwhile, the queue already sent
      *use_tcp = true;
      return Status::ok_status();
    }
    lane.queued.push_back(std::move(out));
    lane.has_queued.store(true, std::memory_order_release);
  }
  if (inbox_) inbox_->wake();  // the lane thread writes it out
  return Status::ok_status();
}

void ShmLanes::fall_back(int to, Lane& lane, const std::string& why, bool refused) {
  std::lock_guard queue_lock(lane.queue_mu);
  if (lane.tcp.load(std::memory_order_acquire)) return;
  spdlog::log(refused ? spdlog::level::warn : spdlog::level::info, "rank {}: rank {}'s {}; sending to it over TCP",
              rank_, to, why);
  for (const Outgoing& out : lane.queued) {
    Status sent = send_tcp_(to, out.tag, out.bytes, {});
    if (!sent.ok()) {
      spdlog::warn("rank {}: {}", rank_, sent.to_string());
      break;  // the connection is gone: the loss is reported by the transport
    }
  }
  lane.queued.clear();
  lane.has_queued.store(false, std::memory_order_release);
  lane.tcp.store(true, std::memory_order_release);
}

bool ShmLanes::flush_queued(int to, Lane& lane) {
  // Never waits for a sender (it may be waiting for this thread to drain).
  std::unique_lock lock(lane.send_mu, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  // Each pass writes out a queued message or returns.
  while (true) {
    Outgoing* out = nullptr;
    {
      std::lock_guard queue_lock(lane.queue_mu);
      if (lane.queued.empty()) {
        lane.has_queued.store(false, std::memory_order_release);
        return true;
      }
      out = &lane.queued.front();  // stays put while others push_back
    }
    std::string why;
    switch (open_outbox(to, lane, &why)) {
      case Outbox::kOpen:
        break;
      case Outbox::kRefused:
        fall_back(to, lane, why, true);
        return true;
      case Outbox::kAbsent:
        // Connected over TCP long enough for its inbox to exist: it does,
        // but not in this /dev/shm (or its name never came).
        if (out->written > 0 || connected_for_(to) < options_.shm_fallback_after) return false;
        fall_back(to, lane,
                  fmt::format("{}, {} ms after its TCP connection came up (another /dev/shm, or a restarted "
                              "rank: the name goes once every rank has attached)",
                              why, options_.shm_fallback_after.count()),
                  false);
        return true;
    }
    const ShmRing::Write wrote = write_some(lane, out->tag, out->bytes, {}, &out->written);
    if (wrote == ShmRing::Write::kFull) return false;
    std::lock_guard queue_lock(lane.queue_mu);
    if (wrote == ShmRing::Write::kCorrupt) {
      lane.queued.clear();
      lane.has_queued.store(false, std::memory_order_release);
      broken_(to, fmt::format("the shared-memory ring to rank {} holds positions no ring has", to));
      return true;
    }
    lane.queued.pop_front();
  }
}

bool ShmLanes::drain_locked(int from, Lane& lane, bool waiter) {
  if (lane.broken || !inbox_) return false;
  ShmRing ring = inbox_->ring(lane.slot_in);
  bool any = false;
  RecordHeader record;
  std::span<const std::byte> bytes;
  while (true) {
    const ShmRing::Peek peek = ring.peek(&record, &bytes);
    if (peek == ShmRing::Peek::kEmpty) return any;
    const bool first = (record.flags & RecordHeader::kFirst) != 0;
    if (peek == ShmRing::Peek::kRecord) {
      const bool handled = first ? handled_(record.tag) : lane.partial_handled;
      if (waiter && handled) {
        inbox_->wake();  // the lane thread runs the handler
        return any;
      }
      if (first) lane.partial_handled = handled;
    }
    any = true;
    const bool last = (record.flags & RecordHeader::kLast) != 0;
    const bool whole = first && last && record.offset == 0 && record.total == bytes.size();
    const bool fits = !first && lane.partial && record.offset <= lane.partial->bytes.size() &&
                      bytes.size() <= lane.partial->bytes.size() - record.offset;
    const bool starts = first && !last && record.offset == 0 && bytes.size() <= record.total;
    if (peek == ShmRing::Peek::kCorrupt || (first && !last && !starts) || (!first && !fits) ||
        (first && last && !whole) || (first && record.total > (uint64_t{1} << 40))) {
      lane.broken = true;
      lane.partial.reset();
      broken_(from, fmt::format("the shared-memory ring from rank {} holds a malformed record", from));
      return any;
    }
    if (whole) {
      deliver_(from, record.tag, bytes, nullptr);  // in place, copied only if the mailbox keeps it
    } else {
      if (first) {
        lane.partial = std::make_unique<BytesHolder>();
        lane.partial->bytes.resize(record.total);
      }
      std::memcpy(lane.partial->bytes.data() + record.offset, bytes.data(), bytes.size());
      if (last) {
        std::unique_ptr<BytesHolder> done = std::move(lane.partial);
        const std::span<const std::byte> message(done->bytes);  // before `done` moves into the call
        deliver_(from, record.tag, message, std::move(done));
      }
    }
    ring.pop();
  }
}

void ShmLanes::poll(int from, const std::function<bool()>& arrived) {
  Lane* lane = lanes_[from].get();
  if (lane == nullptr || !inbox_) return;
  ShmRing ring = inbox_->ring(lane->slot_in);
  const auto until = Clock::now() + options_.shm_spin;
  for (int i = 0; !arrived(); ++i) {
    if (!ring.empty() && lane->consume_mu.try_lock()) {
      const bool took = drain_locked(from, *lane, true);  // false: a handler's message is first
      lane->consume_mu.unlock();
      if (took) continue;
    }
    if ((i & 15) == 0 && Clock::now() >= until) break;
    // A short pure spin, then yielding: a peer waiting for this core (more
    // ranks than cores) runs instead of this poll.
    if (i < 64) {
      cpu_relax();
    } else {
      sched_yield();
    }
  }
}

void ShmLanes::begin_block(int from) {
  Lane* lane = lanes_[from].get();
  if (lane == nullptr || !inbox_) return;
  ShmRing ring = inbox_->ring(lane->slot_in);
  ring.sleepers().fetch_add(1, std::memory_order_seq_cst);
  // A sender that wrote before it saw this sleeper rang no bell: what it
  // wrote is delivered here (or, a handler's, by the lane thread).
  if (!ring.empty()) {
    std::lock_guard lock(lane->consume_mu);
    drain_locked(from, *lane, true);
  }
}

void ShmLanes::end_block(int from) {
  Lane* lane = lanes_[from].get();
  if (lane == nullptr || !inbox_) return;
  inbox_->ring(lane->slot_in).sleepers().fetch_sub(1, std::memory_order_seq_cst);
}

void ShmLanes::set_eager(bool eager) {
  if (inbox_) inbox_->set_eager(eager);
}

void ShmLanes::drain(int from) {
  Lane* lane = lanes_[from].get();
  if (lane == nullptr) return;
  std::lock_guard lock(lane->consume_mu);
  drain_locked(from, *lane, false);
}

std::string ShmLanes::gone(const ShmInbox& outbox) {
  const int pid = outbox.owner_pid();
  if (outbox.owner_closed()) return fmt::format("(pid {}) closed its transport", pid);
  if (kill(pid, 0) != 0 && errno == ESRCH) return fmt::format("(pid {}) exited", pid);
  return {};
}

void ShmLanes::check_peers() {
  for (int peer = 0; peer < static_cast<int>(lanes_.size()); ++peer) {
    Lane* lane = lanes_[peer].get();
    if (lane == nullptr || lane->gone || lane->tcp.load(std::memory_order_acquire) ||
        lane->away.load(std::memory_order_acquire))
      continue;
    std::unique_lock report(lane->report_mu, std::try_to_lock);
    if (!report.owns_lock()) continue;  // a revive is under way
    std::string why;
    {
      // A sender holding the lane may be waiting for this thread to drain:
      // never wait for it (it checks the peer itself meanwhile).
      std::unique_lock lock(lane->send_mu, std::try_to_lock);
      if (!lock.owns_lock()) continue;
      const Outbox outbox = open_outbox(peer, *lane, &why);
      if (outbox == Outbox::kRefused) fall_back(peer, *lane, why, true);
      if (outbox != Outbox::kOpen) continue;  // not known or not started yet, or refused
      why = gone(*lane->outbox);
      if (!why.empty()) why = fmt::format("rank {} {}", peer, why);
    }
    if (why.empty()) continue;
    lane->gone = true;
    drain(peer);  // what it wrote before it went comes first
    broken_(peer, why);
  }
}

void ShmLanes::loop() {
  const int world = static_cast<int>(lanes_.size());
  auto checked = Clock::now();
  while (!closed_.load(std::memory_order_acquire)) {
    if (Clock::now() - checked >= std::chrono::milliseconds(50)) {
      check_peers();
      if (inbox_->all_attached()) inbox_->remove_name();
      checked = Clock::now();
    }
    bool any = false, queued = false;
    for (int peer = 0; peer < world; ++peer) {
      Lane* lane = lanes_[peer].get();
      if (lane == nullptr) continue;
      if (lane->consume_mu.try_lock()) {  // else a waiting thread is draining it
        any = drain_locked(peer, *lane, false) || any;
        lane->consume_mu.unlock();
      }
      if (lane->has_queued.load(std::memory_order_acquire) && !flush_queued(peer, *lane)) queued = true;
    }
    if (any) continue;
    // Sleep until a sender rings; briefly when messages wait for room or
    // for a peer's inbox to appear. A record written before `sleeping` was
    // set rang no bell: one someone needs now is drained first. (A ring a
    // waiting thread is draining is left to it; one holding only messages
    // nobody waits for yet is left to their receiver's poll.)
    const uint32_t seen = inbox_->prepare_sleep();
    bool again = false;
    for (int peer = 0; peer < world; ++peer) {
      Lane* lane = lanes_[peer].get();
      if (lane == nullptr) continue;
      ShmRing ring = inbox_->ring(lane->slot_in);
      if (ring.empty() || !(inbox_->eager() || ring.sleepers().load() > 0 || ring.over_half())) continue;
      if (!lane->consume_mu.try_lock()) continue;
      again = drain_locked(peer, *lane, false) || again;
      lane->consume_mu.unlock();
    }
    inbox_->wait(seen, again ? std::chrono::microseconds(0)
                             : queued ? std::chrono::microseconds(200) : std::chrono::microseconds(50000));
  }
}

void ShmLanes::flush(Clock::time_point deadline) {
  if (!thread_.joinable() || thread_.get_id() == std::this_thread::get_id()) return;
  for (const auto& lane : lanes_) {
    while (lane && lane->has_queued.load(std::memory_order_acquire) && Clock::now() < deadline &&
           !closed_.load(std::memory_order_acquire))
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void ShmLanes::set_away(int peer, bool away) {
  Lane* lane = peer >= 0 && peer < static_cast<int>(lanes_.size()) ? lanes_[peer].get() : nullptr;
  if (lane == nullptr) return;
  std::lock_guard report(lane->report_mu);  // a report on its old process under way ends first
  if (lane->away.load(std::memory_order_acquire) == away) return;
  // Nothing of its old process stays: not while away (revive() passes a
  // lane that is not local by), nor once back.
  reset_locked(*lane);
  lane->away.store(away, std::memory_order_release);
}

void ShmLanes::revive(int peer) {
  Lane* lane = lanes_[peer].get();
  if (lane == nullptr) return;
  std::lock_guard report(lane->report_mu);
  reset_locked(*lane);
}

void ShmLanes::reset_locked(Lane& lane) {
  {
    std::scoped_lock lock(lane.send_mu, lane.queue_mu);
    lane.outbox.reset();
    lane.queued.clear();
    lane.has_queued.store(false, std::memory_order_release);
    lane.tcp.store(false, std::memory_order_release);
  }
  {
    std::lock_guard lock(lane.consume_mu);
    lane.partial.reset();
    lane.partial_handled = false;
    lane.broken = false;
  }
  lane.gone.store(false, std::memory_order_release);
}

void ShmLanes::close() {
  const bool first = !closed_.exchange(true);
  if (inbox_) {
    inbox_->mark_closed();  // the peers report this rank gone
    inbox_->wake();
  }
  // From a handler on the lane thread the join (and what follows it) waits
  // for the destructor.
  const bool on_lane_thread = thread_.joinable() && thread_.get_id() == std::this_thread::get_id();
  if (on_lane_thread) return;
  if (thread_.joinable()) thread_.join();
  // While the transport still holds its port: a later run on that port
  // creates the name anew, and must not lose it to this one.
  if (inbox_) inbox_->remove_name();
  if (!first) return;
  for (auto& lane : lanes_) {
    if (!lane) continue;
    std::scoped_lock lock(lane->send_mu, lane->queue_mu);
    lane->outbox.reset();
    lane->queued.clear();
  }
  // The inbox stays mapped until destruction: a thread still polling it
  // (woken by the mailbox's close) reads mapped memory.
}

}  // namespace rill::comm
