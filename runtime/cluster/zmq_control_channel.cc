#include "runtime/cluster/zmq_control_channel.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "base/printable.h"
#include "comm/cluster_key.h"
#include "comm/zap_authenticator.h"

namespace rill {
namespace {

std::string node_name(const std::vector<Machine>& machines, int rank) {
  return fmt::format("node {} ({})", rank, format_machine(machines[rank]));
}

// What connections that may still be in their handshake may hold of the
// port: enough for every node of the list and its clients at once from one
// address (a cluster on one machine connects from one), and no more.
comm::ConnectionLimits control_port_limits(const ZmqControlOptions& options) {
  const int world = static_cast<int>(options.machines.size());
  comm::ConnectionLimits limits;
  limits.per_address = std::max(32, 2 * world);
  limits.total = std::max(256, 4 * world);
  // Longer than the handshake interval: every connection still in its
  // handshake is counted.
  limits.young = options.handshake_interval + std::chrono::seconds(1);
  return limits;
}

class ZmqControlChannel final : public ControlChannel {
 public:
  explicit ZmqControlChannel(ZmqControlOptions options)
      : options_(std::move(options)), wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

  ~ZmqControlChannel() override {
    if (wake_fd_ >= 0) ::close(wake_fd_);
    // Let the last control messages (Shutdown to the nodes, replies) leave,
    // but never wait long for a peer that is gone.
    port_.set(zmq::sockopt::linger, 2000);
    master_.set(zmq::sockopt::linger, 2000);
  }

  Status open() {
    const int world = static_cast<int>(options_.machines.size());
    const Machine& me = options_.machines[options_.rank];
    const std::string name = node_name(options_.machines, options_.rank);
    const std::string endpoint = tcp_endpoint(me.address, me.ctrl_port);
    try {
      port_.set(zmq::sockopt::linger, 0);
      port_.set(zmq::sockopt::router_mandatory, 1);
      port_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(options_.max_message_bytes));
      if (options_.send_hwm > 0) port_.set(zmq::sockopt::sndhwm, options_.send_hwm);
      // A connection that has not finished its handshake by then is dropped:
      // one that never speaks holds its descriptor this long, not ZeroMQ's 30 s.
      port_.set(zmq::sockopt::handshake_ivl, static_cast<int>(options_.handshake_interval.count()));
      if (options_.key) {
        auto zap = comm::ZapAuthenticator::start(context_, *options_.key, world, true, name + ": control port");
        if (!zap.ok()) return zap.status();
        zap_ = std::move(*zap);
        comm::curve_server(port_, *options_.key, options_.rank);
      }
      port_watch_ = std::make_unique<comm::HandshakeWatch>(
          context_, port_, fmt::format("{}: control port {}", name, format_machine(me)), options_.key != nullptr,
          true);
      port_watch_->limit_connections(me.ctrl_port, control_port_limits(options_));
      port_.bind(endpoint);
    } catch (const zmq::error_t& e) {
      if (e.num() == EADDRINUSE)
        return Status(Code::kUnavailable,
                      fmt::format("{}: control port {} is already in use (another agent?)", name, format_machine(me)));
      return Status(Code::kUnavailable, fmt::format("{}: cannot listen on {}: {}", name, endpoint, e.what()));
    }
    if (options_.rank == 0) return {};
    connect_master();
    return {};
  }

  void reconnect_master() override {
    if (options_.rank == 0) return;
    master_watch_.reset();
    master_.close();  // linger 0: what it held is dropped
    master_ = zmq::socket_t(context_, zmq::socket_type::dealer);
    connect_master();
  }

  bool receive(std::chrono::milliseconds timeout, Incoming* out) override {
    const bool master = options_.rank != 0;
    // The port's connection events (refusals to log, the connection guard)
    // wake the wait too.
    zmq::pollitem_t items[] = {{port_.handle(), 0, ZMQ_POLLIN, 0},
                               {nullptr, wake_fd_, ZMQ_POLLIN, 0},
                               {port_watch_ ? port_watch_->handle() : nullptr, port_watch_ ? 0 : -1, ZMQ_POLLIN, 0},
                               {master_.handle(), 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, master ? 4 : 3, timeout);
    if (port_watch_) (void)port_watch_->poll();
    if (items[1].revents & ZMQ_POLLIN) {
      uint64_t count;
      (void)!::read(wake_fd_, &count, sizeof count);  // reset; a wake while it runs wakes the next wait
    }
    const bool port_ready = (items[0].revents & ZMQ_POLLIN) != 0;
    const bool master_ready = master && (items[3].revents & ZMQ_POLLIN) != 0;
    // Turns when both have messages: a stream on the port (clients) cannot
    // keep the master's messages, heartbeats among them, waiting.
    master_first_ = !master_first_;
    if (port_ready && !(master_ready && master_first_)) return receive_port(out);
    if (master_ready) {
      zmq::message_t message;
      (void)master_.recv(message);
      out->from_master = true;
      out->identity.clear();
      out->bytes = message.to_string();
      return true;
    }
    return false;
  }

  Sent send_to_master(const std::string& bytes) override {
    return master_.send(zmq::buffer(bytes), zmq::send_flags::dontwait).has_value() ? Sent::kSent : Sent::kFull;
  }

  Sent send_to(const std::string& identity, const std::string& bytes) override {
    try {
      // ZeroMQ takes a message's later frames once it took the first.
      if (!port_.send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return Sent::kFull;
      (void)port_.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
      return Sent::kSent;
    } catch (const zmq::error_t&) {
      return Sent::kUnreachable;  // router_mandatory: no such peer
    }
  }

  std::string master_failure() override { return master_watch_ ? master_watch_->poll() : std::string(); }

  bool master_closed(std::chrono::milliseconds grace) override {
    if (!master_watch_) return false;
    (void)master_watch_->poll();
    const auto down = master_watch_->down_since();
    return down != std::chrono::steady_clock::time_point{} && std::chrono::steady_clock::now() - down >= grace;
  }

  void wake() override {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
  }

 private:
  // The link up to the master, under a routing identity of its own
  // (comm::node_routing_id: the rank and random bytes).
  void connect_master() {
    const Machine& m = options_.machines[0];
    master_.set(zmq::sockopt::linger, 0);
    master_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(options_.max_message_bytes));
    if (options_.send_hwm > 0) master_.set(zmq::sockopt::sndhwm, options_.send_hwm);
    master_.set(zmq::sockopt::routing_id, comm::node_routing_id(options_.rank));
    if (options_.key) comm::curve_client(master_, *options_.key, comm::node_identity(options_.rank), 0);
    master_watch_ = std::make_unique<comm::HandshakeWatch>(
        context_, master_, fmt::format("the master {}", format_machine(m)), options_.key != nullptr);
    master_.connect(tcp_endpoint(m.address, m.ctrl_port));
  }

  bool receive_port(Incoming* out) {
    std::vector<zmq::message_t> frames;
    (void)zmq::recv_multipart(port_, std::back_inserter(frames));
    if (frames.size() != 2) return false;
    out->from_master = false;
    out->identity = frames[0].to_string();
    if (options_.key) {
      // The routing id a peer chose must be what its key says it is: node-R's
      // (comm::node_routing_id) for the agent of rank R, one that does not
      // begin "node-" for clients.
      const std::string_view user = comm::authenticated_identity(frames[1]);
      const bool claims_node = out->identity.rfind("node-", 0) == 0;
      const int rank = comm::routing_id_rank(out->identity);
      if (claims_node ? rank < 0 || comm::node_identity(rank) != user : user != comm::kClientIdentity) {
        spdlog::warn("{}: refused a control message from '{}' authenticated as '{}'",
                     node_name(options_.machines, options_.rank), printable_name(out->identity), user);
        return false;
      }
    }
    out->bytes = frames[1].to_string();
    return true;
  }

  ZmqControlOptions options_;
  zmq::context_t context_{1};
  zmq::socket_t port_{context_, zmq::socket_type::router};
  zmq::socket_t master_{context_, zmq::socket_type::dealer};
  // With a key (after the sockets: closed before them, the context last).
  std::unique_ptr<comm::ZapAuthenticator> zap_;
  std::unique_ptr<comm::HandshakeWatch> port_watch_, master_watch_;
  bool master_first_ = false;  // which link receive() reads first when both have messages
  const int wake_fd_;          // an eventfd: wake() ends a waiting receive() (-1: none, receive() times out)
};

}  // namespace

StatusOr<std::unique_ptr<ControlChannel>> make_zmq_control_channel(const ZmqControlOptions& options) {
  auto channel = std::make_unique<ZmqControlChannel>(options);
  RILL_RETURN_IF_ERROR(channel->open());
  return std::unique_ptr<ControlChannel>(std::move(channel));
}

}  // namespace rill
