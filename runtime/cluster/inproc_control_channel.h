// Control channels between agents of one process (runtime/cluster/
// control_channel.h), for tests that check the control plane's message
// handling without processes, ports or keys. A hub holds, per agent, the
// inbox of its port and, per routing identity, the inbox of what a port
// sends to it: node R's link up to the master is identity "node-R"; a test
// speaks as a client through client().
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "base/mutex.h"
#include "runtime/cluster/control_channel.h"

namespace rill {

class InprocControlHub : public std::enable_shared_from_this<InprocControlHub> {
 public:
  // `capacity`: messages an inbox holds before a send to it is refused as
  // full (0: no bound), as a ZeroMQ high-water mark does.
  explicit InprocControlHub(size_t capacity = 0) : capacity_(capacity) {}

  // The channel of agent `rank` (rank 0 the master); a second call for a
  // rank is an agent started again, whose inboxes start empty.
  std::unique_ptr<ControlChannel> channel(int rank);

  // A client of agent `port`'s control port, named `identity`.
  class Client {
   public:
    ControlChannel::Sent send(const std::string& bytes);
    // The next message sent to it within `timeout`, or none.
    bool receive(std::chrono::milliseconds timeout, std::string* bytes);

   private:
    friend class InprocControlHub;
    Client(std::shared_ptr<InprocControlHub> hub, int port, std::string identity)
        : hub_(std::move(hub)), port_(port), identity_(std::move(identity)) {}
    std::shared_ptr<InprocControlHub> hub_;
    int port_;
    std::string identity_;
  };
  Client client(int port, const std::string& identity);

 private:
  friend class InprocControlChannel;
  struct Message {
    std::string identity;  // the sender (port inboxes)
    std::string bytes;
  };
  using Inbox = std::deque<Message>;
  // Appends to an inbox, unless it is full.
  ControlChannel::Sent push(Inbox& inbox, Message message) REQUIRES(mu_);
  // Takes the next message of the port of `rank`, or (identity non-empty)
  // of what is sent to `identity` through port `port`, waiting up to `timeout`.
  bool pop(int rank, const std::string& identity, int port, std::chrono::milliseconds timeout, Message* out,
           bool* from_identity);
  // Ends the pop of `rank`'s channel waiting now, or its next one (it
  // returns false when no message is there).
  void wake(int rank);

  const size_t capacity_;
  mutable Mutex mu_;
  CondVar arrived_;
  std::map<int, Inbox> ports_ GUARDED_BY(mu_);
  std::map<std::pair<int, std::string>, Inbox> links_ GUARDED_BY(mu_);  // (port, identity) -> what the port sent it
  std::set<int> opened_ GUARDED_BY(mu_);  // ranks that have had a channel
  uint64_t pops_ GUARDED_BY(mu_) = 0;
  std::set<int> woken_ GUARDED_BY(mu_);  // ranks whose channel was woken
};

}  // namespace rill
