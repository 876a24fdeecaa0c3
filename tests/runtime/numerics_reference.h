// The one-step numerics problem shared by the CPU and GPU tests: a small MLP
// whose exact gradients a double-precision reference computes together with a
// derived bound on any float implementation's error (see numerics_test.cc for
// the argument), and a runner of one training step on any layout.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <latch>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "comm/transport.h"
#include "compiler/compiler.h"
#include "graph/job_file.h"
#include "runtime/node/node_runtime.h"
#include "runtime/node/plan_reader.h"

namespace rill::testing {

constexpr int kBatch = 24;  // divisible by 1, 2, 3 and 4 devices
constexpr int kIn = 20, kHidden = 32, kClasses = 5;
constexpr double kU = 1.0 / (1 << 24);  // unit roundoff of float

inline double gamma(int n) { return n * kU / (1 - n * kU); }

// Deterministic values in [-1, 1), the same on every machine.
struct Lcg {
  uint64_t state;
  float next() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>(static_cast<int64_t>(state >> 40) - (1 << 23)) / static_cast<float>(1 << 23);
  }
};

// A matrix of exact values (double) with a bound on the float computation's error.
struct Mat {
  int rows = 0, cols = 0;
  std::vector<double> v, e;
  Mat(int r, int c) : rows(r), cols(c), v(size_t(r) * c, 0.0), e(size_t(r) * c, 0.0) {}
  double& at(int r, int c) { return v[size_t(r) * cols + c]; }
  double& err(int r, int c) { return e[size_t(r) * cols + c]; }
  double at(int r, int c) const { return v[size_t(r) * cols + c]; }
  double err(int r, int c) const { return e[size_t(r) * cols + c]; }
  Mat transposed() const {
    Mat t(cols, rows);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) t.at(c, r) = at(r, c), t.err(c, r) = err(r, c);
    return t;
  }
};

// C = A B (A: n x k, B: k x m), any summation order in float:
// err(C) <= gamma_k sum |a b| + sum (err(a) |b| + |a| err(b)).
inline Mat matmul(const Mat& a, const Mat& b) {
  Mat c(a.rows, b.cols);
  for (int i = 0; i < a.rows; ++i)
    for (int j = 0; j < b.cols; ++j) {
      double sum = 0, abs_sum = 0, carried = 0;
      for (int k = 0; k < a.cols; ++k) {
        sum += a.at(i, k) * b.at(k, j);
        abs_sum += std::abs(a.at(i, k) * b.at(k, j));
        carried += a.err(i, k) * std::abs(b.at(k, j)) + std::abs(a.at(i, k)) * b.err(k, j);
      }
      c.at(i, j) = sum;
      c.err(i, j) = gamma(a.cols) * abs_sum + carried;
    }
  return c;
}

// Adds a bias row (one more rounding), then ReLU when asked.
inline void add_bias(Mat* z, const Mat& bias) {
  for (int i = 0; i < z->rows; ++i)
    for (int j = 0; j < z->cols; ++j) {
      z->at(i, j) += bias.at(0, j);
      z->err(i, j) += kU * (std::abs(z->at(i, j)) + std::abs(bias.at(0, j))) + bias.err(0, j);
    }
}

inline Mat relu(const Mat& z) {
  Mat h = z;
  for (size_t i = 0; i < h.v.size(); ++i) h.v[i] = std::max(0.0, h.v[i]);
  return h;
}

// dz = dh * [z > 0]; where |z| is within its error of 0 the mask may flip.
inline Mat relu_grad(const Mat& dh, const Mat& z) {
  Mat dz = dh;
  for (size_t i = 0; i < dz.v.size(); ++i) {
    bool uncertain = std::abs(z.v[i]) <= z.e[i];
    if (z.v[i] <= 0) dz.v[i] = 0;
    dz.e[i] = uncertain ? std::abs(dh.v[i]) + dh.e[i] : (z.v[i] > 0 ? dh.e[i] : 0.0);
  }
  return dz;
}

// Column sums over the batch (a bias gradient): a sum of n terms.
inline Mat column_sums(const Mat& d) {
  Mat s(1, d.cols);
  for (int j = 0; j < d.cols; ++j) {
    double sum = 0, abs_sum = 0, carried = 0;
    for (int i = 0; i < d.rows; ++i) sum += d.at(i, j), abs_sum += std::abs(d.at(i, j)), carried += d.err(i, j);
    s.at(0, j) = sum;
    s.err(0, j) = gamma(d.rows) * abs_sum + carried;
  }
  return s;
}

struct Reference {
  std::map<std::string, Mat> grads;
  double loss = 0, loss_err = 0;
};

// The MLP below (x -> 32 -> 32 -> 5, ReLU, mean softmax cross-entropy), in
// double with error bounds, given its exact float inputs and weights.
inline Reference reference(const Mat& x, const std::vector<int>& y, std::map<std::string, Mat> w) {
  Mat z1 = matmul(x, w.at("w1"));
  add_bias(&z1, w.at("b1"));
  Mat h1 = relu(z1);
  Mat z2 = matmul(h1, w.at("w2"));
  add_bias(&z2, w.at("b2"));
  Mat h2 = relu(z2);
  Mat z3 = matmul(h2, w.at("w3"));
  add_bias(&z3, w.at("b3"));

  // Softmax cross-entropy and its gradient, scaled by reduce_mean's 1/B.
  Reference ref;
  Mat dz3(kBatch, kClasses);
  double loss_sum = 0, loss_abs_err = 0;
  for (int i = 0; i < kBatch; ++i) {
    double max = z3.at(i, 0), sum = 0, weighted_err = 0, max_err = 0;
    for (int j = 0; j < kClasses; ++j) max = std::max(max, z3.at(i, j));
    for (int j = 0; j < kClasses; ++j) sum += std::exp(z3.at(i, j) - max);
    for (int j = 0; j < kClasses; ++j) {
      double p = std::exp(z3.at(i, j) - max) / sum;
      weighted_err += p * z3.err(i, j);
      max_err = std::max(max_err, z3.err(i, j));
    }
    double loss = max + std::log(sum) - z3.at(i, y[i]);
    // d loss / d z = p - onehot: moving z by its errors moves the loss by at
    // most err(z_y) + sum p err(z); rounding of the subtraction, expf (1 ulp),
    // the C-term sum, logf and the final adds: (C + 8) u relative to the
    // largest magnitude involved.
    double loss_err = z3.err(i, y[i]) + weighted_err +
                      (kClasses + 8) * kU * (std::abs(max) + std::abs(std::log(sum)) + std::abs(z3.at(i, y[i])) + 1);
    loss_sum += loss;
    loss_abs_err += loss_err + kU * std::abs(loss);
    for (int j = 0; j < kClasses; ++j) {
      double p = std::exp(z3.at(i, j) - max) / sum;
      double target = j == y[i] ? 1.0 : 0.0;
      dz3.at(i, j) = (p - target) / kBatch;
      // d p_j / d z_k = p_j (delta_jk - p_k): |dp_j| <= p_j (err z_j + sum_k p_k err z_k).
      // Rounding of p (exp, sum of C, divide, the shift by max): (C + 8 + |z - max|) u.
      double p_err = p * (z3.err(i, j) + weighted_err) + p * (kClasses + 8 + std::abs(z3.at(i, j) - max)) * kU;
      dz3.err(i, j) = (p_err + kU * std::abs(p - target)) / kBatch + 4 * kU * std::abs(dz3.at(i, j));
    }
  }
  ref.loss = loss_sum / kBatch;
  ref.loss_err = (gamma(kBatch) * loss_sum + loss_abs_err) / kBatch + 4 * kU * std::abs(ref.loss);

  ref.grads.emplace("w3", matmul(h2.transposed(), dz3));
  ref.grads.emplace("b3", column_sums(dz3));
  Mat dz2 = relu_grad(matmul(dz3, w.at("w3").transposed()), z2);
  ref.grads.emplace("w2", matmul(h1.transposed(), dz2));
  ref.grads.emplace("b2", column_sums(dz2));
  Mat dz1 = relu_grad(matmul(dz2, w.at("w2").transposed()), z1);
  ref.grads.emplace("w1", matmul(x.transposed(), dz1));
  ref.grads.emplace("b1", column_sums(dz1));
  // A gradient may be averaged over devices or scaled by 1/B once more: a
  // few more roundings relative to its value.
  for (auto& [name, g] : ref.grads)
    for (size_t i = 0; i < g.v.size(); ++i) g.e[i] += 4 * kU * std::abs(g.v[i]);
  return ref;
}

inline std::string json_floats(const std::vector<float>& values) {
  std::string out;
  for (float f : values) out += fmt::format("{}{:.9g}", out.empty() ? "" : ",", f);
  return out;
}

struct Problem {
  Mat x{kBatch, kIn};
  std::vector<int> y;
  std::map<std::string, Mat> weights;
  std::map<std::string, std::vector<float>> initial;  // the same weights, as floats
  graph::Job job;
};

inline Problem make_problem() {
  Problem p;
  Lcg rng{42};
  std::vector<float> xs;
  for (int i = 0; i < kBatch * kIn; ++i) {
    xs.push_back(rng.next());
    p.x.v[i] = xs.back();
  }
  std::vector<float> ys;
  for (int i = 0; i < kBatch; ++i) {
    p.y.push_back(i % kClasses);
    ys.push_back(static_cast<float>(p.y.back()));
  }
  auto weight = [&](const std::string& name, int rows, int cols, float scale) {
    Mat m(rows, cols);
    std::vector<float> f;
    for (int i = 0; i < rows * cols; ++i) {
      f.push_back(rng.next() * scale);
      m.v[i] = f.back();
    }
    p.weights.emplace(name, m);
    p.initial[name] = f;
  };
  weight("w1", kIn, kHidden, 0.4f);
  weight("b1", 1, kHidden, 0.1f);
  weight("w2", kHidden, kHidden, 0.3f);
  weight("b2", 1, kHidden, 0.1f);
  weight("w3", kHidden, kClasses, 0.4f);
  weight("b3", 1, kClasses, 0.1f);

  std::string text = fmt::format(R"({{
    "name": "numerics",
    "datasets": [{{"name": "d", "kind": "inline", "tensors": [
      {{"name": "x", "shape": [{0}, {1}], "data": [{3}]}},
      {{"name": "y", "shape": [{0}], "dtype": "i32", "data": [{4}]}}]}}],
    "inputs": [{{"name": "x", "dataset": "d", "field": "x", "shape": [{1}]}},
               {{"name": "y", "dataset": "d", "field": "y", "shape": [], "dtype": "i32"}}],
    "variables": [{{"name": "w1", "shape": [{1}, {2}]}}, {{"name": "b1", "shape": [{2}]}},
                  {{"name": "w2", "shape": [{2}, {2}]}}, {{"name": "b2", "shape": [{2}]}},
                  {{"name": "w3", "shape": [{2}, {5}]}}, {{"name": "b3", "shape": [{5}]}}],
    "ops": [{{"name": "fc1", "type": "matmul", "inputs": ["x", "w1"]}},
            {{"name": "z1", "type": "bias_add", "inputs": ["fc1", "b1"]}},
            {{"name": "h1", "type": "relu", "inputs": ["z1"]}},
            {{"name": "fc2", "type": "matmul", "inputs": ["h1", "w2"]}},
            {{"name": "z2", "type": "bias_add", "inputs": ["fc2", "b2"]}},
            {{"name": "h2", "type": "relu", "inputs": ["z2"]}},
            {{"name": "fc3", "type": "matmul", "inputs": ["h2", "w3"]}},
            {{"name": "z3", "type": "bias_add", "inputs": ["fc3", "b3"]}},
            {{"name": "xent", "type": "sparse_softmax_cross_entropy", "inputs": ["z3", "y"]}},
            {{"name": "loss", "type": "reduce_mean", "inputs": ["xent"]}}],
    "loss": "loss",
    "optimizer": {{"type": "momentum", "lr": 0.1, "momentum": 0.9}},
    "train": {{"epochs": 1, "batch_size": {0}, "shuffle": false}}
  }})",
                                 kBatch, kIn, kHidden, json_floats(xs), json_floats(ys), kClasses);
  auto job = graph::parse_job_json(text, "numerics.json");
  REQUIRE_MESSAGE(job.ok(), job.status().to_string());
  p.job = *job;
  return p;
}

struct OneStep {
  double loss = 0;
  // After the first step a momentum buffer is exactly the gradient: v = 0.9 * 0 + g.
  std::map<std::string, std::vector<float>> grads;
};

// Runs `plan` on `nodes` in-process runtimes over in-process transports
// (nodes > 1), each with the options `setup` fills; fails the test unless
// every node ends well.
// `given`: the nodes' transports (default: in-process ones).
inline std::vector<RunReport> run_nodes(const std::string& plan, int nodes,
                                        const std::function<void(RunOptions&)>& setup,
                                        std::vector<comm::Transport*> given = {}) {
  auto owned = nodes > 1 && given.empty() ? comm::make_inproc_transports(nodes)
                                          : std::vector<std::unique_ptr<comm::Transport>>{};
  for (auto& t : owned) given.push_back(t.get());
  std::vector<RunReport> reports(nodes);
  std::latch built(nodes);
  std::vector<std::thread> threads;
  for (int node = 0; node < nodes; ++node)
    threads.emplace_back([&, node] {
      RunOptions options;
      options.node = node;
      options.transport = nodes > 1 ? given[static_cast<size_t>(node)] : nullptr;
      options.stall_timeout_s = 30;
      setup(options);
      // Every node builds (and so listens for its peers) before any runs,
      // as the agents' Start does; a message that came earlier would go to
      // the transport's mailbox, not to the runtime.
      auto runtime = NodeRuntime::build(plan, options);
      built.arrive_and_wait();
      if (!runtime.ok()) {
        reports[node].status = runtime.status();
        return;
      }
      reports[node] = (*runtime)->run();
    });
  for (auto& t : threads) t.join();
  std::string statuses;
  for (size_t node = 0; node < reports.size(); ++node)
    statuses += fmt::format("\nnode {}: {}", node, reports[node].status.to_string());
  for (auto& report : reports) REQUIRE_MESSAGE(report.status.ok(), statuses);
  return reports;
}

// One step of `problem` on `nodes` x `devices` (nodes > 1: one runtime per
// node, in-process, over in-process transports).
inline OneStep run_one_step(const Problem& problem, int nodes, const std::string& devices) {
  auto cluster = compiler::parse_devices(devices, nodes);
  REQUIRE(cluster.ok());
  auto plan = compiler::compile(problem.job, *cluster, {.steps = 1});
  REQUIRE_MESSAGE(plan.ok(), plan.status().to_string());
  std::mutex mu;
  OneStep out;
  run_nodes(*plan, nodes, [&](RunOptions& options) {
    options.initial_values = problem.initial;
    options.snapshot_every = 1;
    options.on_snapshot = [&](int64_t, VariablePiece piece) {
      std::lock_guard lock(mu);
      for (auto& [state, values] : piece.state)
        if (state == "momentum") {
          // Pieces of a split variable fill their part of the whole; the
          // replicas of a broadcast one must agree.
          auto [it, fresh] = out.grads.emplace(
              piece.name, std::vector<float>(static_cast<size_t>(num_elements(piece.logical_shape)), NAN));
          std::vector<float> whole(it->second.size(), NAN);
          copy_block(piece.logical_shape, piece.offset, piece.shape, whole.data(), values.data(), false);
          for (size_t i = 0; i < whole.size(); ++i) {
            if (std::isnan(whole[i])) continue;
            if (!std::isnan(it->second[i])) CHECK(it->second[i] == whole[i]);  // every replica holds the same sum
            it->second[i] = whole[i];
          }
        }
    };
    options.on_step = [&](const StepMetrics& m) {
      for (size_t i = 0; i < m.names.size(); ++i)
        if (m.names[i] == "loss") out.loss = m.values[i];
    };
  });
  return out;
}

// One step of `problem` on a layout, checked against the exact gradients and
// loss within 2 E (the derived bound; see numerics_test.cc).
// The problem's job with SBP hints: variables by name (others B), and the
// inputs' SBP (the batch split S(0) unless given).
inline Problem with_sbp(Problem problem, const std::map<std::string, NdSbp>& variables, std::optional<NdSbp> inputs) {
  for (graph::Variable& v : problem.job.variables)
    if (auto it = variables.find(v.name); it != variables.end()) v.sbp = it->second;
  if (inputs)
    for (graph::Input& in : problem.job.inputs) in.sbp = *inputs;
  return problem;
}

inline void check_one_step(const Problem& problem, const Reference& ref, int nodes, const std::string& devices) {
  OneStep run = run_one_step(problem, nodes, devices);
  CHECK(std::abs(run.loss - ref.loss) <= 2 * ref.loss_err);
  REQUIRE(run.grads.size() == 6);
  for (const auto& [tensor, g] : ref.grads) {
    const std::string& name = tensor;  // a structured binding cannot be captured (C++20, clang)
    CAPTURE(name);
    const std::vector<float>& got = run.grads.at(name);
    REQUIRE(got.size() == g.v.size());
    for (float v : got) REQUIRE(!std::isnan(v));  // every element came from some piece
    int outside = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (!(std::abs(got[i] - g.v[i]) <= 2 * g.e[i])) {
        if (++outside <= 3) FAIL_CHECK(fmt::format("{}[{}] = {:.9g}, exact {:.9g}, bound {:.3g}", name, i, got[i], g.v[i], 2 * g.e[i]));
      }
    CHECK(outside == 0);
  }
}

}  // namespace rill::testing
