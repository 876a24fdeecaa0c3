#include "comm/rendezvous.h"

#include "comm/cluster_key.h"
#include "comm/zap_authenticator.h"
#include "comm/data_cipher.h"

#include <map>

#include <zmq.hpp>

#include <fmt/format.h>

#include "comm/rendezvous_generated.h"

namespace rill::comm {
namespace {

using Bytes = std::vector<uint8_t>;

template <typename... Args>
Status unavailable(fmt::format_string<Args...> f, Args&&... args) {
  return Status(Code::kUnavailable, fmt::format(f, std::forward<Args>(args)...));
}

Bytes hello_message(int rank, int world, int port, const SessionId& session) {
  flatbuffers::FlatBufferBuilder b;
  auto hello = fb::CreateHello(b, kRendezvousVersion, rank, world, port, b.CreateVector(session.data(), session.size()));
  b.Finish(fb::CreateRendezvousMessage(b, fb::Body::Hello, hello.Union()));
  return Bytes(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}

Bytes peers_message(const std::vector<Endpoint>& endpoints, const std::vector<SessionId>& sessions,
                    const std::string& error) {
  flatbuffers::FlatBufferBuilder b;
  std::vector<flatbuffers::Offset<fb::Endpoint>> list;
  for (size_t r = 0; r < endpoints.size(); ++r) {
    const std::vector<uint8_t> session(sessions[r].begin(), sessions[r].end());
    list.push_back(fb::CreateEndpointDirect(b, endpoints[r].address.c_str(), endpoints[r].port, &session));
  }
  auto peers = fb::CreatePeersDirect(b, &list, error.c_str());
  b.Finish(fb::CreateRendezvousMessage(b, fb::Body::Peers, peers.Union()));
  return Bytes(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}

const fb::RendezvousMessage* parse(const zmq::message_t& msg) {
  flatbuffers::Verifier verifier(static_cast<const uint8_t*>(msg.data()), msg.size());
  if (!verifier.VerifyBuffer<fb::RendezvousMessage>(nullptr)) return nullptr;
  return flatbuffers::GetRoot<fb::RendezvousMessage>(msg.data());
}

std::string url(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return fmt::format("tcp://{}{}{}:{}", v6 ? "[" : "", host, v6 ? "]" : "", port);
}

// Polls `socket` until a message comes or `deadline`; false at the deadline.
bool wait_readable(zmq::socket_t& socket, Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return false;
  zmq::pollitem_t items[] = {{socket.handle(), 0, ZMQ_POLLIN, 0}};
  zmq::poll(items, 1, left);
  return (items[0].revents & ZMQ_POLLIN) != 0;
}

StatusOr<std::vector<Endpoint>> serve(int world, const Endpoint& master, int data_port, Clock::time_point deadline,
                                      const ClusterKey* key, const SessionId& session,
                                      std::vector<SessionId>* sessions) {
  zmq::context_t context;
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 2000);  // the answers go out before close
  std::unique_ptr<ZapAuthenticator> zap;  // destroyed before the context, after the socket
  std::unique_ptr<HandshakeWatch> watch;
  if (key) {
    RILL_ASSIGN_OR_RETURN(zap, ZapAuthenticator::start(context, *key, world, false, "rendezvous"));
    curve_server(router, *key, 0);
    watch = std::make_unique<HandshakeWatch>(context, router, fmt::format("rendezvous port {}", master.port), true, true);
  }
  try {
    router.bind(url("*", master.port));
  } catch (const zmq::error_t& e) {
    return e.num() == EADDRINUSE
               ? unavailable("rendezvous: master port {} is already in use", master.port)
               : unavailable("rendezvous: cannot listen on port {}: {}", master.port, e.what());
  }
  std::vector<Endpoint> endpoints(static_cast<size_t>(world));
  endpoints[0] = {master.address, data_port};
  std::vector<SessionId> ids(static_cast<size_t>(world));
  ids[0] = session;
  std::map<int, zmq::message_t> identities;  // rank -> its ROUTER identity
  std::string error;
  while (static_cast<int>(identities.size()) < world - 1 && error.empty()) {
    if (watch) (void)watch->poll();
    if (!wait_readable(router, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)))) {
      if (Clock::now() < deadline) continue;
      std::string missing;
      for (int r = 1; r < world; ++r)
        if (identities.count(r) == 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      error = fmt::format("rank(s) {} of {} did not join by the deadline", missing, world);
      break;
    }
    zmq::message_t identity, payload;  // a ROUTER gives the sender's identity first
    if (!router.recv(identity) || !identity.more() || !router.recv(payload)) continue;
    const fb::RendezvousMessage* m = parse(payload);
    const fb::Hello* hello = m ? m->body_as_Hello() : nullptr;
    std::string problem;
    if (hello == nullptr) {
      problem = "a message that is not a rendezvous hello";
    } else if (hello->version() != kRendezvousVersion) {
      problem = fmt::format("rank {} speaks rendezvous version {}, this build {}", hello->rank(), hello->version(),
                            kRendezvousVersion);
    } else if (hello->world() != world) {
      problem = fmt::format("rank {} expects {} ranks, rank 0 {}", hello->rank(), hello->world(), world);
    } else if (hello->rank() < 1 || hello->rank() >= world) {
      problem = fmt::format("rank {} is not a rank of {} other than 0", hello->rank(), world);
    } else if (hello->session() != nullptr && hello->session()->size() != sizeof(SessionId)) {
      problem = fmt::format("rank {} sent a session id of {} bytes", hello->rank(), hello->session()->size());
    } else if (identities.count(hello->rank()) != 0) {
      problem = fmt::format("rank {} joined twice", hello->rank());
    } else if (key && authenticated_identity(payload) != node_identity(hello->rank())) {
      problem = fmt::format("a process holding the key of '{}' said it is rank {}", authenticated_identity(payload),
                            hello->rank());
    }
    if (!problem.empty()) {
      error = problem;
      const Bytes answer = peers_message({}, {}, problem);
      router.send(identity, zmq::send_flags::sndmore);
      router.send(zmq::buffer(answer), zmq::send_flags::none);
      break;
    }
    const char* host = payload.gets("Peer-Address");
    endpoints[static_cast<size_t>(hello->rank())] = {host ? host : "", hello->port()};
    if (hello->session() != nullptr)
      std::copy(hello->session()->begin(), hello->session()->end(), ids[static_cast<size_t>(hello->rank())].begin());
    identities.emplace(hello->rank(), std::move(identity));
  }
  const Bytes answer = peers_message(error.empty() ? endpoints : std::vector<Endpoint>{}, ids, error);
  for (auto& [rank, identity] : identities) {
    router.send(identity, zmq::send_flags::sndmore);
    router.send(zmq::buffer(answer), zmq::send_flags::none);
  }
  if (!error.empty()) return unavailable("rendezvous at port {}: {}", master.port, error);
  if (sessions) *sessions = std::move(ids);
  return endpoints;
}

StatusOr<std::vector<Endpoint>> join(int rank, int world, const Endpoint& master, int data_port,
                                     Clock::time_point deadline, const ClusterKey* key, const SessionId& session,
                                     std::vector<SessionId>* sessions) {
  zmq::context_t context;
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  if (key) curve_client(dealer, *key, node_identity(rank), 0);
  HandshakeWatch watch(context, dealer, fmt::format("the rendezvous at {}:{}", master.address, master.port),
                       key != nullptr);
  try {
    dealer.connect(url(master.address, master.port));
  } catch (const zmq::error_t& e) {
    return invalid_argument("rendezvous: master {}:{}: {}", master.address, master.port, e.what());
  }
  const Bytes hello = hello_message(rank, world, data_port, session);
  dealer.send(zmq::buffer(hello), zmq::send_flags::none);
  bool readable = false;
  while (!readable && Clock::now() < deadline) {
    readable = wait_readable(dealer, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
    if (const std::string failure = watch.poll(); !failure.empty())
      return Status(Code::kPermissionDenied, fmt::format("rendezvous: rank {}: {}", rank, failure));
  }
  if (!readable)
    return unavailable("rendezvous: rank {} heard nothing from the master {}:{} by the deadline", rank,
                       master.address, master.port);
  zmq::message_t payload;
  if (!dealer.recv(payload)) return unavailable("rendezvous: rank {}: no answer from the master", rank);
  const fb::RendezvousMessage* m = parse(payload);
  const fb::Peers* peers = m ? m->body_as_Peers() : nullptr;
  if (peers == nullptr) return data_loss("rendezvous: rank {}: the master's answer is not a peer list", rank);
  if (peers->error() != nullptr && peers->error()->size() > 0)
    return unavailable("rendezvous: the master refused: {}", peers->error()->str());
  if (peers->endpoints() == nullptr || static_cast<int>(peers->endpoints()->size()) != world)
    return data_loss("rendezvous: rank {}: the master listed {} ranks, expected {}", rank,
                     peers->endpoints() ? peers->endpoints()->size() : 0, world);
  std::vector<Endpoint> endpoints;
  std::vector<SessionId> ids;
  for (const fb::Endpoint* e : *peers->endpoints()) {
    endpoints.push_back({e->host() ? e->host()->str() : "", e->port()});
    SessionId id{};
    if (e->session() != nullptr && e->session()->size() == id.size())
      std::copy(e->session()->begin(), e->session()->end(), id.begin());
    ids.push_back(id);
  }
  if (sessions) *sessions = std::move(ids);
  return endpoints;
}

}  // namespace

StatusOr<std::vector<Endpoint>> rendezvous(int rank, int world, const Endpoint& master, int data_port,
                                           Clock::time_point deadline, const ClusterKey* key,
                                           const SessionId& session, std::vector<SessionId>* sessions) {
  if (world < 1 || rank < 0 || rank >= world)
    return invalid_argument("rendezvous: rank {} of a world of {}", rank, world);
  if (world == 1) return std::vector<Endpoint>{{master.address, data_port}};
  return rank == 0 ? serve(world, master, data_port, deadline, key, session, sessions)
                   : join(rank, world, master, data_port, deadline, key, session, sessions);
}

StatusOr<Communicator> connect_world(int rank, int world, const Endpoint& master, std::chrono::milliseconds timeout,
                                     std::vector<int> machines) {
  if (!machines.empty() && machines.size() != static_cast<size_t>(world))
    return invalid_argument("rendezvous: {} machines given for {} ranks", machines.size(), world);
  if (master.port < 1 || master.port + world > 65535)
    return invalid_argument("rendezvous: master port {} leaves no data ports for {} ranks", master.port, world);
  Communicator c;
  CollectiveOptions options;
  options.timeout = timeout;
  options.machines = std::move(machines);
  if (world == 1) {  // no one to meet: no sockets
    c.transport = std::move(make_inproc_transports(1)[0]);
  } else {
    RILL_ASSIGN_OR_RETURN(std::shared_ptr<const ClusterKey> key, key_from_environment());
    const SessionId session = new_session_id();
    std::vector<SessionId> sessions;
    RILL_ASSIGN_OR_RETURN(std::vector<Endpoint> endpoints,
                          rendezvous(rank, world, master, master.port + 1 + rank, Clock::now() + timeout, key.get(),
                                     session, &sessions));
    // Unless the launcher said, ranks of one address are one machine's (rank
    // 0's as the caller named it, the others' as rank 0 saw them connect).
    if (options.machines.empty()) {
      std::map<std::string, int> machine_of;
      for (const Endpoint& e : endpoints)
        options.machines.push_back(machine_of.emplace(e.address, static_cast<int>(machine_of.size())).first->second);
    }
    ZmqOptions transport_options;
    transport_options.key = key;
    transport_options.session = session;
    transport_options.peer_sessions = std::move(sessions);
    RILL_ASSIGN_OR_RETURN(c.transport, make_zmq_transport(rank, std::move(endpoints), transport_options));
  }
  c.collectives = std::make_unique<Collectives>(*c.transport, options);
  return c;
}

}  // namespace rill::comm
