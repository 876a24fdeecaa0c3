// Describing a cluster as plain values: machine lists (`address[:ctrl_port]`,
// node 0 first, the master), Slurm's compressed node lists, and the per-node log
// file names. Pure functions of their arguments (a machine file is read when
// named); safe to call from any thread. The launcher's settings, resolved from
// flags and the environment, are in runtime/env.h.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "graph/job.h"

namespace rill {

// Every node's control port; its data port is ctrl_port + 1.
inline constexpr int kDefaultCtrlPort = 9988;
inline constexpr int kMaxCtrlPort = 65534;  // leaves room for the data port

struct Machine {
  std::string address;  // host name or IP; IPv6 without brackets ("::1")
  int ctrl_port = kDefaultCtrlPort;
  bool operator==(const Machine&) const = default;
};

// Parses `list_or_file`: either a comma-separated list of `address[:ctrl_port]`
// entries (IPv6 in brackets: `[::1]:9988`), or the path of a file with one entry
// per line, where `#` starts a comment and blank lines are ignored. A string
// without a comma that names an existing file is read as a file. Node 0 is the
// first entry. Errors name the entry (or file:line) and what is wrong: empty
// address, bad port, a duplicate address:port, or a control port that is another
// entry's data port on the same address.
StatusOr<std::vector<Machine>> parse_machine_list(const std::string& list_or_file,
                                                  int default_ctrl_port = kDefaultCtrlPort);

// One `address[:ctrl_port]` entry; `where` names it in errors ("machine
// list entry 2 ('b:x')", "--master 'b:x'").
StatusOr<Machine> parse_machine(std::string_view entry, int default_port, const std::string& where);

// "host:9988", "[::1]:9988".
std::string format_machine(const Machine& machine);
// Every node's address in order, "a:port,b:port": one string two lists agree on when they are alike.
std::string machine_list(const std::vector<Machine>& machines);
// True when every address `address` resolves to is a loopback address
// (127.0.0.0/8, ::1; "localhost"); false for others and for names that do
// not resolve.
bool is_loopback_address(const std::string& address);
// `address` as an address one node may reach another at, in its one
// spelling ("10.0.0.9", "fd00::9"): an IPv4 or IPv6 literal, never a name
// (no resolver is asked), nor an address no single machine holds
// (0.0.0.0, ::, multicast, 255.255.255.255). Errors name `where`.
StatusOr<std::string> reachable_address(const std::string& address, const std::string& where);
// A ZeroMQ endpoint, "tcp://host:9988" or "tcp://[::1]:9988".
std::string tcp_endpoint(const std::string& address, int port);

// A pserver-mode job (graph::Job::distributed) as the master sends it to
// the nodes: each `pservers` entry that names a machine of the list
// (`address:ctrl_port`, or an address that only one machine has) becomes
// that machine's node number, and FLAGS_rpc_deadline and
// FLAGS_rpc_{send,get,prefetch}_thread_num from the environment, where set,
// replace the job's fields (as Fluid reads its flags). Errors name an entry
// that is neither a node number nor a machine of the list, and a flag out of
// range. Jobs in other modes are left as they are.
Status resolve_distributed(graph::Job* job, const std::vector<Machine>& machines);

// The stall timeout a job's runs use: in pserver mode its rpc_deadline (the
// longest a pserver exchange may wait), else `agent_default` seconds.
double job_stall_timeout_s(const graph::Job& job, double agent_default);

// Expands Slurm's compressed host list: "node[01-04,07]" -> node01 node02 node03
// node04 node07; "a[1-2],b3" -> a1 a2 b3; "rack[1-2]-n[01-02]" -> the cartesian
// product, leftmost bracket varying slowest. A range keeps the width of its
// lower bound ("[08-10]" -> 08 09 10). Malformed input is an error naming the
// position; lists that would expand past 65536 hosts are refused.
StatusOr<std::vector<std::string>> expand_slurm_nodelist(const std::string& nodelist);

// A strict decimal integer (surrounding blanks allowed); `what` names the value
// in the error, e.g. "env RILL_RANK".
StatusOr<int> parse_int(std::string_view text, std::string_view what);

// The log file of process `local_rank` on node `node_rank` under `logdir`:
// "log/node1.proc0.log". A negative local_rank names the node's own log
// (the launcher's or agent's): "log/node1.log". Names are unique across nodes,
// so every node may write into one shared folder.
std::string node_log_path(const std::string& logdir, int node_rank, int local_rank);

}  // namespace rill
