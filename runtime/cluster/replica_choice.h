// Which survivors' memory a live job goes on from after a loss, in a layout
// that splits variables (docs/FAULTS.md "When a node fails"): every node
// copied its pieces to the next `--replica-copies` nodes of the ring its
// last phase ran on (replicator.h), and said in its Done what it holds
// (KeptSteps). The steps at which the survivors' own pieces and, for each
// lost node, some surviving buddy's copy of its pieces are all held make
// the model whole; node 0 gathers them at the newest (master_gather.cc).
// Pure: what the master knew, in; who sends what, out.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace rill::agent_internal {

// What a node kept in memory when its run ended (ctl::Done's kept_*).
struct KeptSteps {
  int64_t first = -1, last = -1;
  bool whole = false;
  int64_t incarnation = 0;  // of the node's agent that said it (Master::incarnation_)
  // Its replica store (ctl::Done's replica_*): its own pieces' steps, and
  // the steps it holds other ranks' pieces at.
  std::vector<int64_t> own_replicas;
  std::map<int, std::vector<int64_t>> replicas;
};

// What node 0 gathers from one rank: its own pieces (when `own`) and the
// replicas of the lost ranks listed.
struct GatherFrom {
  bool own = true;
  std::vector<int> replicas_of;
};

// Who holds what of the model among the survivors of a ring.
struct ReplicaHolders {
  // The steps at which every survivor that copies holds its own pieces and,
  // for each lost rank that copies, some surviving buddy its replica; empty
  // (nullopt) where no rank copies anything.
  std::optional<std::set<int64_t>> steps;
  std::map<int, GatherFrom> own;            // each survivor, `own` where it copies pieces
  std::map<int, std::vector<int>> buddies;  // each lost rank that copies: its surviving buddies, nearest first
  std::string lost;                         // the lost ranks, named, in ring order
  std::string problem;                      // why the replicas cannot make the model whole ("": they may)
};

// `ring`: the ranks of the phase that ran, in plan order; `copies`: how many
// next ranks each sent its pieces to (clamped to the ring); `kept`: what
// each survivor said it holds; `holder(r)`: r is up and holds its own
// pieces; `copies_pieces(r)`: r had pieces to copy; `name(r)`: r, named.
ReplicaHolders find_replica_holders(const std::vector<int>& ring, int copies, const std::map<int, KeptSteps>& kept,
                                    const std::function<bool(int)>& holder,
                                    const std::function<bool(int)>& copies_pieces,
                                    const std::function<std::string(int)>& name);

// What each rank sends node 0 for the model after `step` (one of
// `holders.steps`): every survivor its own pieces, each lost rank's replica
// from its nearest buddy that holds that step. Ranks that send nothing are
// left out.
std::map<int, GatherFrom> gather_at(const ReplicaHolders& holders, const std::map<int, KeptSteps>& kept, int64_t step);

}  // namespace rill::agent_internal
