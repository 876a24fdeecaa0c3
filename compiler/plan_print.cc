// plan_json and plan_dot: human-readable views of a verified plan.
#include <algorithm>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "compiler/boxing.h"
#include "compiler/compiler.h"
#include "compiler/memory_plan.h"
#include "kernels/powersgd_layout.h"

namespace rill::compiler {
namespace {

std::string sbp_string(const plan::NdSbp* sbp) { return sbp == nullptr ? "?" : read_sbp(sbp).to_string(); }

std::string str(const flatbuffers::String* s) { return s == nullptr ? std::string() : s->str(); }

template <typename T>
std::vector<T> vec(const flatbuffers::Vector<T>* v) {
  return v == nullptr ? std::vector<T>() : std::vector<T>(v->begin(), v->end());
}

// Escapes a string for a double-quoted DOT label.
std::string dot_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string plan_json(const plan::Plan& p) {
  using Json = nlohmann::ordered_json;
  Json root;
  root["job"] = str(p.job_name());
  root["version"] = p.version();
  root["steps"] = p.steps();
  root["global_batch"] = p.global_batch();
  root["micro_batches"] = p.micro_batches();
  root["schedule"] = str(p.schedule());
  root["stages"] = p.stages();
  root["allow_tf32"] = p.allow_tf32();
  root["reuse_memory"] = p.reuse_memory();
  root["cuda_graphs"] = p.cuda_graphs();
  root["num_nodes"] = p.num_nodes();
  root["devices_per_node"] = p.devices_per_node();
  root["node"] = p.node();
  root["num_tasks"] = p.num_tasks();
  std::vector<std::string> placements;
  if (p.placements() != nullptr)
    for (const flatbuffers::String* text : *p.placements()) placements.push_back(text->str());
  root["placements"] = placements;
  Json tasks = Json::array();
  if (p.tasks() != nullptr) {
    for (const plan::Task* t : *p.tasks()) {
      Json task = {{"id", t->id()},
                   {"actor", ActorId::to_string(t->id())},
                   {"kind", plan::EnumNameTaskKind(t->kind())},
                   {"name", str(t->name())},
                   {"op", str(t->op_type())},
                   {"node", t->node()},
                   {"device", t->device()},
                   {"thread", t->thread()},
                   {"inputs", vec(t->inputs())},
                   {"outputs", vec(t->outputs())}};
      task["acts_per_step"] = t->acts_per_step();
      const int placement = t->placement();
      task["placement"] = placement >= 0 && placement < static_cast<int>(placements.size())
                              ? Json(placements[static_cast<size_t>(placement)])
                              : Json(nullptr);
      if (const plan::BoxingConf* b = t->boxing(); b != nullptr && b->origins() != nullptr) {
        // A move between placements: a slice or an assembly of pieces.
        const plan::RegstDesc* r =
            t->outputs() != nullptr && t->outputs()->size() > 0 ? find_regst(p, t->outputs()->Get(0)) : nullptr;
        task["boxing"] = {{"in", sbp_string(b->in_sbp())},
                          {"out", sbp_string(b->out_sbp())},
                          {"collective", "move"},
                          {"pieces_read", t->inputs() != nullptr ? t->inputs()->size() : 0},
                          {"piece_bytes", r != nullptr ? r->bytes() : 0}};
      } else if (const plan::BoxingConf* b = t->boxing()) {
        const NdSbp in = read_sbp(b->in_sbp()), out = read_sbp(b->out_sbp());
        // Of every tensor it boxes (a bucket's first piece of each).
        int64_t logical_bytes = 0;
        std::vector<Shape> shapes;
        for (int k = 0; k < b->tensors() && t->inputs() != nullptr; ++k) {
          const auto at = static_cast<flatbuffers::uoffset_t>(k * b->local_pieces());
          const plan::RegstDesc* r = at < t->inputs()->size() ? find_regst(p, t->inputs()->Get(at)) : nullptr;
          if (r == nullptr) continue;
          int64_t bytes = static_cast<int64_t>(dtype_size(read_dtype(r->dtype())));
          for (int64_t d : vec(r->logical_shape())) bytes *= d;
          logical_bytes += bytes;
          shapes.push_back(vec(r->logical_shape()));
        }
        // What crosses once compressed (from compress_start on): bf16, half;
        // PowerSGD, its two buffers of f32 factors.
        int64_t wire_bytes = b->compress() == 1 ? logical_bytes / 2 : logical_bytes;
        if (b->compress() == 2) {
          const PowerSgdLayout layout = powersgd_layout(shapes, b->compress_rank());
          wire_bytes = static_cast<int64_t>((layout.first + layout.second) * sizeof(float));
        }
        task["boxing"] = {{"in", sbp_string(b->in_sbp())},
                          {"out", sbp_string(b->out_sbp())},
                          {"parallel", b->parallel()},
                          {"num_nodes", b->num_nodes()},
                          {"local_pieces", b->local_pieces()},
                          {"first_rank", b->first_rank()},
                          {"tensors", b->tensors()},
                          {"collective_tag", b->collective_tag()},
                          {"peers", vec(b->peers())},
                          {"collective", boxing_collective(in, out, b->num_nodes())},
                          {"logical_bytes", logical_bytes},
                          {"bytes_sent_per_step",
                           boxing_bytes_sent(in, out, wire_bytes, b->num_nodes(), b->local_pieces())}};
        if (b->own()) task["boxing"]["own"] = true;  // each device from its own piece, on its thread
        if (b->compress() == 1) task["boxing"]["compress"] = "bf16";  // gradients sent in bf16 (train.compression)
        if (b->compress() == 2) task["boxing"]["compress"] = fmt::format("powersgd rank {}", b->compress_rank());
        if (b->compress() != 0 && b->compress_start() > 0)
          task["boxing"]["compress"] = fmt::format("{} from step {}", task["boxing"]["compress"].get<std::string>(),
                                                   b->compress_start());
        if (b->comm_group() >= 0) {
          task["boxing"]["comm_group"] = b->comm_group();
          task["boxing"]["transport"] = ActorId::device_type(t->id()) == DeviceType::kCuda ? "nccl" : "host";
          // A device collective: its call on its axis, over the part its
          // communicator works on (the call's bytes), as a ring sends them
          // among its ranks.
          const auto collective = axis_collective(in, out);
          const plan::CommCall* call = nullptr;
          if (p.comm_groups() != nullptr && static_cast<uint32_t>(b->comm_group()) < p.comm_groups()->size())
            for (const plan::CommCall* c : *p.comm_groups()->Get(static_cast<uint32_t>(b->comm_group()))->calls())
              if (c->tag() == b->collective_tag()) call = c;
          if (collective && call != nullptr) {
            const int n = b->num_nodes();
            // An all-to-all's rank holds 1/n of the call's tensor and keeps 1/n of that.
            const double share = collective->call == CollectiveCall::kAllReduce   ? 2.0 * (n - 1) / n
                                 : collective->call == CollectiveCall::kAllToAll ? static_cast<double>(n - 1) / (n * n)
                                                                                 : static_cast<double>(n - 1) / n;
            task["boxing"]["collective"] = collective_call_name(collective->call);
            task["boxing"]["logical_bytes"] = call->bytes();
            task["boxing"]["bytes_sent_per_step"] =
                static_cast<int64_t>(share * static_cast<double>(call->bytes()));
          }
        } else if (ActorId::device_type(t->id()) == DeviceType::kComm && b->num_nodes() > 1) {
          task["boxing"]["transport"] = "host";
        }
      }
      tasks.push_back(std::move(task));
    }
  }
  root["tasks"] = std::move(tasks);
  // The device collectives' communicators, each with its calls in the
  // order every rank makes them.
  Json groups = Json::array();
  if (p.comm_groups() != nullptr) {
    for (const plan::CommGroup* g : *p.comm_groups()) {
      Json ranks = Json::array(), calls = Json::array();
      const std::vector<int32_t> nodes = vec(g->nodes()), devices = vec(g->devices());
      for (size_t r = 0; r < nodes.size() && r < devices.size(); ++r)
        ranks.push_back({{"node", nodes[r]}, {"device", devices[r]}});
      if (g->calls() != nullptr)
        for (const plan::CommCall* c : *g->calls())
          calls.push_back({{"name", str(c->name())},
                           {"op", str(c->op())},
                           {"tag", c->tag()},
                           {"tensors", c->tensors()},
                           {"bytes", c->bytes()}});
      // GPUs: NCCL's, or (found when the run starts) where ranks share a GPU
      // in its memory when all are on it, else staged through host memory;
      // cpu devices: the host's.
      groups.push_back({{"backend", g->cuda() ? "nccl" : "host"}, {"ranks", std::move(ranks)}, {"calls", std::move(calls)}});
    }
  }
  root["comm_groups"] = std::move(groups);
  Json regsts = Json::array();
  if (p.regsts() != nullptr) {
    for (const plan::RegstDesc* r : *p.regsts()) {
      regsts.push_back({{"id", r->id()},
                        {"name", str(r->name())},
                        {"producer", r->producer()},
                        {"consumers", vec(r->consumers())},
                        {"register_num", r->register_num()},
                        {"readies_per_step", r->readies_per_step()},
                        {"bytes", r->bytes()},
                        {"shape", vec(r->shape())},
                        {"sbp", sbp_string(r->sbp())},
                        {"is_model", r->is_model()},
                        {"device", r->device()}});
    }
  }
  root["regsts"] = std::move(regsts);
  // Per node and memory zone (compiler/memory_plan.h): the bytes its slots
  // take in the block (less than the sum of the slots where regsts share
  // bytes), the sum of the slots, the optimizer state, the boxings' scratch
  // (their collectives' with it) and compute scratch after them in the
  // block, what bodies hold themselves, and the peak (all of it: the block
  // and the rest are allocated once and kept for the run).
  Json memory = Json::array();
  for (int node = p.node() >= 0 ? p.node() : 0; node < (p.node() >= 0 ? p.node() + 1 : p.num_nodes()); ++node) {
    auto planned = plan_memory(p, node);
    if (!planned.ok()) {
      memory.push_back({{"node", node}, {"error", planned.status().message()}});
      continue;
    }
    for (size_t i = 0; i < planned->blocks.size(); ++i) {
      const MemoryBlock& b = planned->blocks[i];
      memory.push_back({{"node", node},
                        {"zone", b.zone.to_string()},
                        {"planned_bytes", b.slot_bytes},
                        {"slots_bytes", planned->slots_sum(static_cast<int>(i))},
                        {"optimizer_state_bytes", b.state_bytes},
                        {"boxing_bytes", b.boxing_bytes},
                        {"scratch_bytes", b.scratch_bytes},
                        {"block_bytes", b.block_bytes()},
                        {"held_bytes", b.held_bytes},
                        {"peak_bytes", b.total()}});
    }
  }
  root["memory"] = std::move(memory);
  return root.dump(2);
}

// Fill colours of tasks by placement (Plan.placements order), cycling.
constexpr const char* kPlacementColours[] = {"#dbe9f6", "#fde0c5", "#d9f0d3", "#f2d7ee",
                                             "#fff3b0", "#d6d6f5", "#f7d6d0", "#cfeee9"};

std::string plan_dot(const plan::Plan& p) {
  std::string out = fmt::format("digraph \"{}\" {{\n  rankdir=LR;\n  node [shape=box, fontsize=10];\n",
                                dot_escape(str(p.job_name())));
  const size_t num_colours = std::size(kPlacementColours);
  auto colour = [&](int placement) { return kPlacementColours[static_cast<size_t>(placement) % num_colours]; };
  // A legend: one box per placement in its colour.
  if (p.placements() != nullptr && p.placements()->size() > 1) {
    out += "  subgraph cluster_placements {\n    label=\"placements\";\n";
    for (uint32_t i = 0; i < p.placements()->size(); ++i)
      out += fmt::format("    placement{} [label=\"{}\", style=filled, fillcolor=\"{}\"];\n", i,
                         dot_escape(p.placements()->Get(i)->str()), colour(static_cast<int>(i)));
    out += "  }\n";
  }
  // Group task positions by node, then by thread; std::map keeps the order fixed.
  // Graph nodes are named by actor id index, which edges can name too (in a
  // node plan, tasks of other nodes appear as bare graph nodes).
  std::map<int, std::map<uint64_t, std::vector<uint32_t>>> groups;
  if (p.tasks() != nullptr)
    for (uint32_t i = 0; i < p.tasks()->size(); ++i) {
      const plan::Task* t = p.tasks()->Get(i);
      groups[t->node()][t->thread()].push_back(i);
    }
  for (const auto& [node, threads] : groups) {
    out += fmt::format("  subgraph cluster_node{} {{\n    label=\"node {}\";\n", node, node);
    for (const auto& [thread, indices] : threads) {
      uint64_t first = p.tasks()->Get(indices[0])->id();
      out += fmt::format("    subgraph cluster_thread{} {{\n      label=\"{}{}.{}\";\n", thread,
                         device_type_name(ActorId::device_type(first)), ActorId::device(first),
                         ActorId::stream(first));
      for (uint32_t i : indices) {
        const plan::Task* t = p.tasks()->Get(i);
        std::string label = dot_escape(str(t->name()));
        if (t->op_type() != nullptr && t->op_type()->size() > 0) label += "\\n" + dot_escape(str(t->op_type()));
        const std::string fill =
            t->placement() >= 0 ? fmt::format(", style=filled, fillcolor=\"{}\"", colour(t->placement())) : "";
        out += fmt::format("      t{} [label=\"{}\\n{}\"{}];\n", ActorId::index(t->id()), label,
                           plan::EnumNameTaskKind(t->kind()), fill);
      }
      out += "    }\n";
    }
    out += "  }\n";
  }
  if (p.regsts() != nullptr)
    for (const plan::RegstDesc* r : *p.regsts()) {
      if (r->consumers() == nullptr) continue;
      for (uint64_t c : *r->consumers())
        out += fmt::format("  t{} -> t{} [label=\"{} x{}\"];\n", ActorId::index(r->producer()), ActorId::index(c),
                           dot_escape(str(r->name())), r->register_num());
    }
  out += "}\n";
  return out;
}

std::string plan_dot_ops(const plan::Plan& p, size_t max_boxes) {
  // The op a task acts for: its name without the device ("fc1@0" -> "fc1"),
  // a gradient's or a recomputation's task under its forward op
  // ("grad/h0.attn/softmax_grad" -> "h0.attn").
  auto op_of = [](const plan::Task& t) {
    std::string name = str(t.name());
    name = name.substr(0, name.rfind('@'));
    for (const std::string prefix : {"grad/", "recompute/"})
      if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size(), name.find('/', prefix.size()) - prefix.size());
    return name;
  };
  // Dotted names are paths ("h0.attn.q.w"): the first `depth` parts.
  auto at_depth = [](const std::string& name, size_t depth) {
    size_t at = 0;
    for (size_t d = 0; d < depth; ++d, ++at)
      if ((at = name.find('.', at)) == std::string::npos) return name;
    return name.substr(0, at - 1);
  };
  // The deepest grouping with at most kMaxBoxes boxes (Graphviz lays out a
  // few hundred boxes in seconds, thousands not in minutes).
  constexpr size_t kMaxBoxes = 120;
  std::vector<std::string> ops;
  size_t depth = 1;
  if (p.tasks() != nullptr)
    for (const plan::Task* t : *p.tasks()) {
      ops.push_back(op_of(*t));
      depth = std::max<size_t>(depth, std::count(ops.back().begin(), ops.back().end(), '.') + 1);
    }
  std::map<std::string, int> index;  // group -> its box
  for (;; --depth) {
    index.clear();
    for (const std::string& op : ops) index.try_emplace(at_depth(op, depth), 0);
    if (index.size() <= kMaxBoxes || depth == 1) break;
  }
  struct Box {
    int tasks = 0;
    std::set<std::string> kinds;
    int placement = -1;
  };
  if (max_boxes > 0 && index.size() > max_boxes) return {};
  std::vector<Box> boxes(index.size());
  int next = 0;
  for (auto& [group, i] : index) i = next++;
  std::map<uint64_t, int> box_of;  // task id -> its box
  for (size_t k = 0; k < ops.size(); ++k) {
    const plan::Task* t = p.tasks()->Get(static_cast<uint32_t>(k));
    const int i = index[at_depth(ops[k], depth)];
    Box& b = boxes[static_cast<size_t>(i)];
    ++b.tasks;
    b.kinds.insert(t->op_type() && t->op_type()->size() > 0 ? str(t->op_type()) : plan::EnumNameTaskKind(t->kind()));
    if (b.placement < 0) b.placement = t->placement();
    box_of[t->id()] = i;
  }
  std::string out = fmt::format("digraph \"{}\" {{\n  rankdir=LR;\n  node [shape=box, fontsize=10];\n",
                                dot_escape(str(p.job_name())));
  const size_t num_colours = std::size(kPlacementColours);
  for (const auto& [group, i] : index) {
    const Box& b = boxes[static_cast<size_t>(i)];
    const std::string what =
        b.kinds.size() == 1 ? *b.kinds.begin() : fmt::format("{} kinds", b.kinds.size());
    const std::string fill =
        b.placement >= 0 ? fmt::format(", style=filled, fillcolor=\"{}\"",
                                       kPlacementColours[static_cast<size_t>(b.placement) % num_colours])
                         : "";
    out += fmt::format("  o{} [label=\"{}\\n{}, {} task(s)\"{}];\n", i, dot_escape(group), dot_escape(what),
                       b.tasks, fill);
  }
  // One edge per pair of boxes a regst joins.
  std::set<std::pair<int, int>> edges;
  if (p.regsts() != nullptr)
    for (const plan::RegstDesc* r : *p.regsts()) {
      const auto from = box_of.find(r->producer());
      if (r->consumers() == nullptr || from == box_of.end()) continue;
      for (uint64_t c : *r->consumers())
        if (const auto to = box_of.find(c); to != box_of.end() && to->second != from->second)
          edges.insert({from->second, to->second});
    }
  for (const auto& [from, to] : edges) out += fmt::format("  o{} -> o{};\n", from, to);
  out += "}\n";
  return out;
}

}  // namespace rill::compiler
