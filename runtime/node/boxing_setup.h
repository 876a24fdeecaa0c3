// BoxingSetup: builds the body of each boxing task of a node's plan, its
// work as compiler/boxing_task.h makes it from the conf (checked against the
// task's regsts): conversions between SBPs (one task per node, per device,
// or a bucket) and moves between placements (region copies). A boxing that crosses nodes gets its
// own Collectives among the nodes of its peers (its placement's), over a
// GroupTransport when those are not the whole cluster. It owns those, so it
// must outlive the actors built with its bodies. One per NodeRun; the
// build thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "actor/actor.h"
#include "base/status.h"
#include "comm/collectives.h"
#include "comm/group_transport.h"
#include "compiler/plan_generated.h"

namespace rill {

class BoxingSetup {
 public:
  // `transport`: the data plane (null on one node); collectives time out
  // after `stall_timeout_s` and use tags from `tag_base` + 1.
  BoxingSetup(comm::Transport* transport, double stall_timeout_s, uint64_t tag_base)
      : transport_(transport), stall_timeout_s_(stall_timeout_s), tag_base_(tag_base) {}

  // The body of boxing task `task` of `plan`, its scratch at `scratch` (the
  // node's memory plan; null: its own), or an error naming it.
  StatusOr<Body> body(const plan::Plan& plan, const plan::Task& task, std::byte* scratch);
  // What its collectives' transports still read of the run's buffers, and
  // waiting (until `deadline`) for that to end.
  int64_t sends_in_flight() const {
    int64_t n = 0;
    for (const auto& c : collectives_) n += c->sends_in_flight();
    return n;
  }
  bool wait_sends(comm::Clock::time_point deadline) const {
    for (const auto& c : collectives_)
      if (!c->wait_sends(deadline).ok()) return false;
    return true;
  }

 private:
  // The collectives among the task's peers' nodes.
  StatusOr<comm::Collectives*> collectives_for(const std::string& name, const plan::BoxingConf& conf);

  comm::Transport* transport_;
  double stall_timeout_s_;
  uint64_t tag_base_;
  std::vector<std::unique_ptr<comm::GroupTransport>> groups_;    // boxings on some of the nodes
  std::vector<std::unique_ptr<comm::Collectives>> collectives_;  // one per cross-node boxing task
};

}  // namespace rill
