// A network of machines on one host, for tests and benches: each node a
// network namespace of its own with one interface (eth0, 10.213.0.<n + 1>/24)
// joined by a veth pair to a bridge in another namespace, each link
// optionally rate-limited with tc's token bucket filter (tbf; this kernel
// has no netem, so no added latency or loss: a link is slow, never far).
// The addresses exist only inside these namespaces: nothing the bed carries
// reaches the host's network.
//
// The namespaces have no names (nothing in /run/netns): each lives while
// this object holds a descriptor of it or a process runs in it. Every
// process the bed starts gets SIGKILL when its parent dies
// (`setpriv --pdeathsig KILL` in exec_prefix), and the destructor kills
// every process found in the bed's namespaces, so nothing outlives the
// bed: not when a test fails, nor when the test process is killed.
//
// Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN), veth, bridge and sch_tbf,
// ip (iproute2), tc, nsenter and setpriv (util-linux). unavailable() says
// which is missing.
#pragma once

#include <string>
#include <vector>

namespace rill::testing {

struct NetBedRun {
  int code = -1;
  std::string output;  // stdout and stderr
};

class NetBed {
 public:
  // Why no bed can be made here ("" when one can): not root, no namespaces,
  // no veth, bridge or tbf, a tool missing.
  static std::string unavailable();

  // `nodes` namespaces; rates[i] the rate of node i's link in tc's words
  // ("100mbit", "1gbit"; "" or absent: not limited), both ways.
  explicit NetBed(int nodes, const std::vector<std::string>& rates = {});
  ~NetBed();
  NetBed(const NetBed&) = delete;
  NetBed& operator=(const NetBed&) = delete;

  int nodes() const { return static_cast<int>(nodes_.size()); }
  // Node n's address, "10.213.0.<n + 1>".
  static std::string address(int node);
  // Every node's address, with `port` when it is not 0: "a:p,b:p,...".
  std::string machines(int port = 0) const;
  // A command prefix that runs what follows in node n's namespace and kills
  // it when its parent dies: "nsenter --net=/proc/P/fd/F setpriv --pdeathsig KILL".
  std::string exec_prefix(int node) const;

  // Node n's link: its rate ("" lifts the limit), cut (down) or joined (up).
  void set_rate(int node, const std::string& rate);
  void set_link(int node, bool up);

  // Runs argv (no shell) in node n's namespace (-1: the bridge's) to its
  // end; throws std::runtime_error naming the command when it fails.
  NetBedRun run(int node, const std::vector<std::string>& argv) const;
  // Bytes node n's interface has sent and received.
  long long sent_bytes(int node) const;
  long long received_bytes(int node) const;

  // Kills every process running in the bed's namespaces (bounded: 5 s).
  // Returns how many it killed.
  int kill_all() const;

 private:
  int bridge_ = -1;         // the bridge namespace's descriptor
  std::vector<int> nodes_;  // each node's namespace descriptor
  int ns_fd(int node) const { return node < 0 ? bridge_ : nodes_.at(static_cast<size_t>(node)); }
  long long counter(int node, bool sent) const;
  void release();
};

}  // namespace rill::testing
