#include "runtime/cli/plan_stats.h"

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "compiler/compiler.h"
#include "compiler/memory_plan.h"
#include "runtime/node/plan_reader.h"

namespace rill {
namespace {

template <typename... Args>
void put(std::string& out, fmt::format_string<Args...> format, Args&&... args) {
  fmt::format_to(std::back_inserter(out), format, std::forward<Args>(args)...);
}

// How regsts change memory zones: copies on a GPU's thread, and the
// Send/Recv pairs carrying a GPU's regst to another node through host memory.
void print_copies(std::string& out, const plan::Plan& p) {
  int to_gpu = 0, to_host = 0, peer = 0, sent = 0;
  for (const plan::Task* t : *p.tasks()) {
    if (t->kind() == plan::TaskKind::Send) ++sent;
    if (t->kind() != plan::TaskKind::Copy) continue;
    const plan::RegstDesc* in = compiler::find_regst(p, t->inputs()->Get(0));
    const plan::RegstDesc* out = compiler::find_regst(p, t->outputs()->Get(0));
    const int from = in ? in->device() : -1, to = out ? out->device() : -1;
    ++(from < 0 ? to_gpu : to < 0 ? to_host : peer);
  }
  if (to_gpu + to_host + peer + sent > 0)
    put(out, "copies: {} host to GPU, {} GPU to host, {} GPU to GPU (peer to peer); {} regsts sent to another "
               "node through host memory\n",
               to_gpu, to_host, peer, sent);
}

// Device collectives (train.nccl): each communicator and what it sums a step.
void print_communicators(std::string& out, const plan::Plan& p) {
  if (p.comm_groups() == nullptr) return;
  for (uint32_t g = 0; g < p.comm_groups()->size(); ++g) {
    const plan::CommGroup& group = *p.comm_groups()->Get(g);
    int64_t bytes = 0;
    std::map<std::string, int> ops;
    for (const plan::CommCall* c : *group.calls()) {
      bytes += c->bytes();
      ++ops[c->op() ? c->op()->str() : "?"];
    }
    std::vector<std::string> counts;
    for (const auto& [op, n] : ops) counts.push_back(fmt::format("{} {}", n, op));
    put(out, "communicator {} ({}): {} ranks, {} in one order, {} logical bytes\n", g, group.cuda() ? "nccl" : "host",
               group.nodes()->size(), fmt::join(counts, ", "), bytes);
  }
}

// Each node's memory as a run plans and checks it (compiler/memory_plan.h):
// the time both take, and the bytes the slots take against their sum.
void print_memory(std::string& out, const plan::Plan& p) {
  const auto start = std::chrono::steady_clock::now();
  const int first = p.node() >= 0 ? p.node() : 0, last = p.node() >= 0 ? p.node() : p.num_nodes() - 1;
  int64_t planned = 0, slots = 0;
  for (int node = first; node <= last; ++node) {
    auto memory = compiler::plan_memory(p, node);
    Status checked = memory.ok() ? compiler::check_memory_plan(p, node, *memory) : memory.status();
    if (!checked.ok()) {
      put(out, "memory of node {}: {}\n", node, checked.message());
      return;
    }
    for (size_t b = 0; b < memory->blocks.size(); ++b) {
      planned += memory->blocks[b].slot_bytes;
      slots += memory->slots_sum(static_cast<int>(b));
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  put(out, "memory of {} node(s) planned and checked in {:.3f} s: slots take {} bytes of their {}\n",
             last - first + 1, seconds, planned, slots);
}

std::string mib(int64_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20)); }

}  // namespace

// Ring attention (compiler/ring_expansion.h): the attentions laid out
// along the sequence, how many steps their rings take, and whether their
// causal work is balanced (compiler/ring_balance.h).
void print_rings(std::string& out, const plan::Plan& p) {
  std::map<std::string, std::set<std::string>> steps;  // attention -> its later steps' ops
  std::set<int64_t> orders;                            // the zigzag parts of causal ones (1: natural)
  for (const plan::Task* t : *p.tasks()) {
    if (t->op_type() == nullptr || t->op_type()->str() != "attention_step" || t->name() == nullptr) continue;
    const Attrs attrs = read_attrs(t->attrs());
    if (attrs.get_int("causal", 0) != 0) orders.insert(attrs.get_int("zigzag", 1));
    const std::string name = t->name()->str();
    const std::string op = name.substr(0, name.rfind('@'));
    steps[op.substr(0, op.rfind(".ring"))].insert(op);
  }
  if (steps.empty()) return;
  std::set<size_t> lengths;
  for (const auto& [attention, later] : steps) lengths.insert(later.size() + 1);
  std::string balance;
  if (orders.size() == 1 && *orders.begin() > 1)
    balance = fmt::format(", balanced: the sequence in the zigzag order of {} chunks", 2 * *orders.begin());
  else if (!orders.empty())
    balance = fmt::format(", causal work unbalanced (the sequence in its natural order: {})",
                          p.natural_order_because() ? p.natural_order_because()->str() : "docs/LAYOUTS.md");
  put(out, "ring attention: {} attention(s) along the sequence ({}, ...), in rings of {} steps{}\n", steps.size(),
      steps.begin()->first, fmt::join(lengths, " or "), balance);
}

std::string plan_summary(const plan::Plan& p) {
  std::string out;
  auto str = [](const flatbuffers::String* s) { return s ? s->str() : std::string(); };
  const std::string devices = p.placements() && p.placements()->size() > 0 ? p.placements()->Get(0)->str() : "?";
  put(out, "job '{}' on {} node(s) x {} device(s) ({}){}\n", str(p.job_name()), p.num_nodes(),
             p.devices_per_node(), devices, p.node() >= 0 ? fmt::format(", node {}'s plan", p.node()) : "");
  put(out, "a step: global batch {}, {} stage(s), {} micro-batch(es){}; {} steps\n", p.global_batch(), p.stages(),
             p.micro_batches(), p.micro_batches() > 1 ? ", schedule " + str(p.schedule()) : "", p.steps());
  std::map<std::string, int> kinds;
  for (const plan::Task* t : *p.tasks()) ++kinds[plan::EnumNameTaskKind(t->kind())];
  std::vector<std::string> counts;
  for (const auto& [kind, n] : kinds) counts.push_back(fmt::format("{} {}", n, kind));
  put(out, "{} tasks ({}), {} regsts, {} placement(s)\n", p.tasks()->size(), fmt::join(counts, ", "),
             p.regsts()->size(), p.placements() ? p.placements()->size() : 0);
  if (p.datasets())
    for (const plan::Dataset* d : *p.datasets())
      put(out, "reads dataset '{}' ({}{})\n", str(d->name()), str(d->kind()),
                 str(d->kind()) == "idx" ? " " + str(d->images()) : " " + str(d->path()));
  // Each node's memory, by zone: the peak is allocated once and kept.
  put(out, "memory planned per node and zone (peak: slots, optimizer state, boxing and compute scratch, held):\n");
  const int first = p.node() >= 0 ? p.node() : 0, last = p.node() >= 0 ? p.node() : p.num_nodes() - 1;
  for (int node = first; node <= last; ++node) {
    auto memory = compiler::plan_memory(p, node);
    if (!memory.ok()) {
      put(out, "  node {}: {}\n", node, memory.status().message());
      continue;
    }
    for (const compiler::MemoryBlock& b : memory->blocks)
      put(out, "  node {} {:<8} {:>11}: {} + {} + {} + {} + {}\n", node, b.zone.to_string(), mib(b.total()),
                 mib(b.slot_bytes), mib(b.state_bytes), mib(b.boxing_bytes), mib(b.scratch_bytes), mib(b.held_bytes));
  }
  print_rings(out, p);
  print_communicators(out, p);
  return out;
}

void print_plan_stats(const plan::Plan& p, size_t bytes, double seconds) {
  std::string out;
  put(out, "compiled in {:.3f} s: {} tasks, {} regsts, {} plan bytes, {} placement(s) on {} node(s) x {}\n", seconds,
             p.tasks()->size(), p.regsts()->size(), bytes, p.placements() ? p.placements()->size() : 0, p.num_nodes(),
             p.devices_per_node());
  print_copies(out, p);
  print_communicators(out, p);
  print_memory(out, p);
  fmt::print("{}", out);
}

}  // namespace rill
