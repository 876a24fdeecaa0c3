#include "compiler/pserver.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/fnv1a.h"

namespace rill::compiler {
namespace {


StatusOr<int> pserver_node(const std::string& entry, int num_nodes) {
  int node = -1;
  auto [end, ec] = std::from_chars(entry.data(), entry.data() + entry.size(), node);
  if (ec != std::errc() || end != entry.data() + entry.size())
    return invalid_argument(
        "distributed.pservers: '{}' is not a node number (a machine-list entry is mapped to its node by the agents; "
        "here give node numbers)",
        entry);
  if (node < 0 || node >= num_nodes)
    return Status(Code::kFailedPrecondition,  // the cluster is too small for the layout (rill check: a note)
                  fmt::format("distributed.pservers: node {} is not in the cluster's nodes 0 to {}", node,
                              num_nodes - 1));
  return node;
}

}  // namespace

StatusOr<PserverLayout> pserver_layout(const graph::Job& job, const Cluster& cluster) {
  if (!job.pserver_mode()) return invalid_argument("the job is not in pserver mode (distributed.mode)");
  const graph::Distributed& d = *job.distributed;
  PserverLayout layout;
  std::set<int> named;
  for (const std::string& entry : d.pservers) {
    RILL_ASSIGN_OR_RETURN(int node, pserver_node(entry, cluster.num_nodes));
    if (!named.insert(node).second)
      return invalid_argument("distributed.pservers: node {} is named twice", node);
    layout.pservers.push_back(node);
  }
  if (layout.pservers.empty()) return invalid_argument("distributed.pservers: pserver mode needs at least one pserver");
  for (int node = 0; node < cluster.num_nodes; ++node)
    if (named.count(node) == 0) layout.trainers.push_back(node);
  if (layout.trainers.empty())
    return Status(Code::kFailedPrecondition,  // the cluster is too small for the layout (rill check: a note)
                  fmt::format("distributed.pservers: all {} nodes are pservers; no node is left to train",
                              cluster.num_nodes));
  if (d.trainers != 0 && d.trainers != static_cast<int64_t>(layout.trainers.size()))
    return Status(Code::kFailedPrecondition,  // the cluster's size does not fit the layout (rill check: a note)
                  fmt::format("distributed.trainers is {}, but the cluster's {} nodes less {} pservers leave {} "
                              "trainers (nodes {})",
                              d.trainers, cluster.num_nodes, layout.pservers.size(), layout.trainers.size(),
                              fmt::join(layout.trainers, ", ")));
  if (d.min_block_size < 1)
    return invalid_argument("distributed.min_block_size must be >= 1 element, got {}", d.min_block_size);

  const int64_t servers = static_cast<int64_t>(layout.pservers.size());
  int64_t next = 0;  // RoundRobin's counter, over every block of the job
  for (const graph::Variable& v : job.variables) {
    if (!v.trainable) continue;
    const int64_t elements = num_elements(v.shape);
    // Whole rows: blocks are cut along axis 0, each a multiple of a row.
    const int64_t width = v.shape.empty() || v.shape[0] == 0 ? std::max<int64_t>(elements, 1) : elements / v.shape[0];
    const int64_t rows = v.shape.empty() ? 1 : v.shape[0];
    int64_t count = d.slice_var_up ? servers : 1;
    count = std::max<int64_t>(1, std::min(count, elements / d.min_block_size));
    int64_t block = (elements + count - 1) / count;      // elements per block
    block = std::max<int64_t>(width, (block + width - 1) / width * width);  // whole rows
    const int64_t block_rows = block / width;
    count = (rows + block_rows - 1) / std::max<int64_t>(block_rows, 1);
    if (v.shape.empty() || count < 1) count = 1;
    for (int64_t k = 0; k < count; ++k) {
      PserverBlock b;
      b.variable = v.name;
      b.name = fmt::format("{}.block{}", v.name, k);
      b.row_offset = v.shape.empty() ? 0 : k * block_rows;
      b.rows = v.shape.empty() ? 1 : std::min(block_rows, rows - b.row_offset);
      b.elements = v.shape.empty() ? elements : b.rows * width;
      const int64_t pick = d.split_method == graph::SplitMethod::kHashName ? static_cast<int64_t>(fnv1a(b.name) % servers)
                                                        : next++ % servers;
      b.pserver = layout.pservers[static_cast<size_t>(pick)];
      layout.blocks.push_back(std::move(b));
    }
  }
  return layout;
}

std::string describe_pserver_layout(const PserverLayout& layout, const graph::Job& job) {
  const graph::Distributed& d = *job.distributed;
  std::string out = fmt::format("pserver mode ({}, {}, slice_var_up {}, min_block_size {}): pservers nodes {}; "
                                "trainers nodes {}\n",
                                d.sync_mode ? "sync" : "async", graph::to_string(d.split_method), d.slice_var_up, d.min_block_size,
                                fmt::join(layout.pservers, ", "), fmt::join(layout.trainers, ", "));
  for (const PserverBlock& b : layout.blocks) {
    const auto v = std::find_if(job.variables.begin(), job.variables.end(),
                                [&](const graph::Variable& x) { return x.name == b.variable; });
    out += fmt::format("  {:<16} rows {}-{} of {} {}  {} elements  pserver node {}\n", b.name, b.row_offset,
                       b.row_offset + b.rows - 1, b.variable, shape_string(v->shape), b.elements, b.pserver);
  }
  return out;
}

// The distributed lookup tables: trainable variables that only embedding ops
// with is_distributed read (as their table) -> those ops' indices.
StatusOr<std::map<std::string, std::vector<size_t>>> lookup_tables(const graph::Job& job) {
  std::map<std::string, std::vector<size_t>> tables;
  for (size_t i = 0; i < job.ops.size(); ++i) {
    const graph::Op& op = job.ops[i];
    if (op.type == "embedding" && op.attrs.get_int("is_distributed", 0) != 0 && op.inputs.size() == 2)
      tables[op.inputs[1]].push_back(i);
  }
  for (const graph::Op& op : job.ops)
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      auto it = tables.find(op.inputs[k]);
      if (it == tables.end()) continue;
      if (op.type != "embedding" || op.attrs.get_int("is_distributed", 0) == 0 || k != 1)
        return invalid_argument(
            "op '{}' reads '{}', a distributed lookup table: only embedding ops with is_distributed may read it "
            "(the trainers never hold the whole table)",
            op.name, op.inputs[k]);
    }
  for (const auto& [name, ops] : tables) {
    auto v = std::find_if(job.variables.begin(), job.variables.end(),
                          [&table = name](const graph::Variable& x) { return x.name == table; });
    if (v == job.variables.end() || !v->trainable)
      return invalid_argument("op '{}': is_distributed needs its table '{}' to be a trainable variable",
                              job.ops[ops[0]].name, name);
  }
  return tables;
}

StatusOr<graph::Job> transpile_pserver(const graph::Job& job, const Cluster& cluster) {
  if (job.distributed && !job.pserver_mode()) {
    // Collective mode: every node trains; gradients are all-reduced (data
    // parallelism over the cluster, Rill's own collectives on CPU devices).
    const int64_t trainers = job.distributed->trainers;
    if (trainers != 0 && trainers != cluster.num_nodes)
      return Status(Code::kFailedPrecondition,  // the cluster's size does not fit the layout (rill check: a note)
                    fmt::format("distributed.trainers is {}, but in mode \"{}\" every node trains: the cluster has {}",
                                trainers, graph::to_string(job.distributed->mode), cluster.num_nodes));
    return job;
  }
  if (!job.pserver_mode()) return job;
  RILL_ASSIGN_OR_RETURN(PserverLayout layout, pserver_layout(job, cluster));
  RILL_ASSIGN_OR_RETURN(auto tables, lookup_tables(job));
  graph::Placement trainers;
  trainers.type = cluster.device_type;
  trainers.nodes = layout.trainers;
  for (int device = 0; device < cluster.devices_per_node; ++device) trainers.devices.push_back(device);
  auto on_pserver = [&](int node) {
    graph::Placement p;
    p.type = cluster.device_type;
    p.nodes = {node};
    p.devices = {0};
    return p;
  };
  graph::Job out = job;
  out.variables.clear();
  std::vector<graph::Op> concats;
  // A distributed lookup's op -> per block, its lookup on the block's
  // pserver and the trainers' mask of that block's rows.
  std::map<size_t, std::vector<std::pair<graph::Op, graph::Op>>> lookups;
  for (const graph::Variable& v : job.variables) {
    if (!v.trainable) {
      out.variables.push_back(v);
      out.variables.back().placement = trainers;
      continue;
    }
    std::vector<std::string> blocks;
    std::vector<const PserverBlock*> table_blocks;
    for (const PserverBlock& b : layout.blocks) {
      if (b.variable != v.name) continue;
      graph::Variable block = v;
      block.name = b.name;
      block.placement = on_pserver(b.pserver);
      if (!block.shape.empty()) block.shape[0] = b.rows;
      block.block_of = graph::BlockOf{v.name, v.shape, b.row_offset};
      out.variables.push_back(std::move(block));
      blocks.push_back(b.name);
      table_blocks.push_back(&b);
    }
    if (tables.count(v.name) != 0) {
      // A distributed lookup table: no trainer holds it. Each lookup runs
      // on every block's pserver (the batch's ids gathered there), each
      // block giving its rows and zeros for the others (which do not cross:
      // zero rows are left out on the wire); the trainers add the blocks'
      // rows up. Each block's gradient is made on its pserver from the
      // looked-up rows' gradients. A trainer masks what it reads of a block
      // to the block's rows (embedding_mask: the same values), so that the
      // gradient going back is masked too and only the rows of the block's
      // ids cross to its pserver.
      for (size_t i : tables.at(v.name)) {
        const graph::Op& lookup = job.ops[i];
        std::vector<std::string> parts;
        for (const PserverBlock* b : table_blocks) {
          graph::Op part = lookup;
          part.name = fmt::format("{}.{}", lookup.name, b->name.substr(v.name.size() + 1));
          part.inputs = {lookup.inputs[0], b->name};
          part.outputs = {part.name};
          part.attrs.set("row_offset", b->row_offset);
          part.attrs.set("total_rows", v.shape[0]);
          part.placement = on_pserver(b->pserver);
          part.output_sbp = {NdSbp(Sbp::broadcast())};
          graph::Op mask;
          mask.name = part.name + ".rows";
          mask.type = "embedding_mask";
          mask.inputs = {lookup.inputs[0], part.name};
          mask.outputs = {mask.name};
          mask.attrs.set("row_offset", b->row_offset);
          mask.attrs.set("rows", b->rows);
          mask.attrs.set("total_rows", v.shape[0]);
          mask.placement = trainers;
          lookups[i].emplace_back(std::move(part), std::move(mask));
        }
      }
      continue;
    }
    {
      // The trainers' copy of the variable, whole (every trainer reads every
      // block; the gradient flows back through it to each block).
      graph::Op concat;
      concat.name = v.name;
      concat.type = blocks.size() > 1 ? "concat" : "identity";
      concat.inputs = blocks;
      concat.outputs = {v.name};
      if (blocks.size() > 1) concat.attrs.set("axis", int64_t{0});
      concat.placement = trainers;
      concat.output_sbp = {NdSbp(Sbp::broadcast())};  // every trainer holds the whole parameter
      concats.push_back(std::move(concat));
    }
  }
  for (graph::Input& in : out.inputs) in.placement = trainers;
  out.ops.clear();
  out.ops = concats;
  for (size_t i = 0; i < job.ops.size(); ++i) {
    auto parts = lookups.find(i);
    if (parts == lookups.end()) {
      out.ops.push_back(job.ops[i]);
      out.ops.back().placement = trainers;
      continue;
    }
    // The blocks' lookups, the trainers' masks of them, then their sum on
    // the trainers under the op's name.
    std::vector<std::string> names;
    for (auto& [part, mask] : parts->second) out.ops.push_back(std::move(part));
    for (auto& [part, mask] : parts->second) {
      names.push_back(mask.name);
      out.ops.push_back(std::move(mask));
    }
    std::string sum = names[0];
    for (size_t k = 1; k < names.size(); ++k) {
      graph::Op add;
      add.name = k + 1 == names.size() ? job.ops[i].name : fmt::format("{}.sum{}", job.ops[i].name, k);
      add.type = "add";
      add.inputs = {sum, names[k]};
      add.outputs = {add.name};
      add.placement = trainers;
      out.ops.push_back(add);
      sum = add.name;
    }
    if (names.size() == 1) {
      graph::Op copy;
      copy.name = job.ops[i].name;
      copy.type = "identity";
      copy.inputs = {sum};
      copy.outputs = {copy.name};
      copy.placement = trainers;
      out.ops.push_back(copy);
    }
  }
  out.distributed.reset();  // placed: the checker's rules for a user's pserver job are met by construction
  return out;
}

}  // namespace rill::compiler
