// Progress: what a run prints as it goes. A progress line every log_every
// steps (a bar redrawn in place on a terminal), the loss curve and step
// times kept in the JobResult, each step's metrics as a JSON line when a
// metrics file is given. Used by run_job (job_runner.cc) on the thread that
// reports steps.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/ops/lr_schedule.h"
#include "runtime/cluster/job_runner.h"

namespace rill {

// Prints a progress line every log_every steps and keeps the loss curve.
class Progress {
 public:
  using Clock = std::chrono::steady_clock;

  Progress(std::FILE* out, std::function<void(const std::string&)> on_line, int64_t steps, int64_t global_batch,
           int64_t log_every, JobResult* result)
      : out_(out),
        on_line_(std::move(on_line)), steps_(steps), global_batch_(global_batch), log_every_(std::max<int64_t>(log_every, 1)),
        result_(result) {
    // Reserved up front so that recording a step allocates nothing, up to a
    // bound: a long run grows the vectors rarely instead of asking for it all.
    const auto reserve = static_cast<size_t>(std::clamp<int64_t>(steps, 0, int64_t{1} << 20));
    result_->loss_curve.reserve(reserve);
    step_seconds_.reserve(reserve);
    const char* term = std::getenv("TERM");
    bar_ = out_ != nullptr && isatty(fileno(out_)) && !(term && std::string_view(term) == "dumb");
  }

  // Samples per second after the first steps (warm-up: caches, page faults).
  double steady_samples_per_sec() const {
    int64_t n = static_cast<int64_t>(step_seconds_.size());
    int64_t warm = std::min<int64_t>(20, n / 5);
    if (warm < 1 || n - warm < 1) return 0.0;
    double seconds = step_seconds_[n - 1] - step_seconds_[warm - 1];
    return seconds > 0 ? (n - warm) * global_batch_ / seconds : 0.0;
  }

  void on_step(const StepMetrics& m) {
    auto now = Clock::now();
    if (first_) {
      last_ = start_ = now;
      last_step_ = m.step;
      first_ = false;
    }
    step_seconds_.push_back(std::chrono::duration<double>(now - start_).count());
    double loss = std::numeric_limits<double>::quiet_NaN();
    for (size_t i = 0; i < m.names.size(); ++i)
      if (m.names[i] == "loss") loss = m.values[i];
    result_->loss_curve.push_back(loss);
    int64_t done = m.step + 1;
    if (bar_ && done % log_every_ != 0 && done != steps_ && now - last_draw_ >= std::chrono::milliseconds(100))
      draw_bar(done, loss, now);
    if (done == steps_)  // the whole fetched tensors, copied out of their regsts once
      for (size_t i = 0; i < m.fetched.size() && i < m.fetch_names.size(); ++i) {
        const TensorView& t = *m.fetched[i];
        VariableValue& v = result_->fetched[m.fetch_names[i]];
        v.shape = t.shape;
        v.values.resize(static_cast<size_t>(t.size()));
        visit_dtype(t.dtype, [&]<typename T>(std::type_identity<T>) {
          const T* values = static_cast<const T*>(t.data);
          for (size_t k = 0; k < v.values.size(); ++k) v.values[k] = float_of(values[k]);
        });
      }
    // The last step's metrics, logged or not (a run stopped between logged
    // steps reports the step it stopped at).
    for (size_t i = 0; i < m.names.size(); ++i) result_->train_metrics[m.names[i]] = m.values[i];
    if (done % log_every_ != 0 && done != steps_) return;
    // The mirrored view: each rank's own line first, as a program that
    // prints on every rank would ("[rank1] 50/500 loss:0.0041").
    result_->rank_metrics.resize(static_cast<size_t>(m.ranks));
    for (int r = 0; r < m.ranks; ++r) {
      std::string line = fmt::format("[rank{}] {}/{}", r, done, steps_);
      for (size_t i = 0; i < m.names.size(); ++i) {
        const double value = m.rank_values[i * static_cast<size_t>(m.ranks) + static_cast<size_t>(r)];
        result_->rank_metrics[static_cast<size_t>(r)][m.names[i]] = value;
        line += fmt::format(" {}:{}", m.names[i], value);
      }
      emit(line);
    }
    double seconds = std::chrono::duration<double>(now - last_).count();
    int64_t interval = done - last_step_;
    if (metrics_) write_metrics(m, done, seconds, interval);
    if (!out_ && !on_line_) return;
    std::string line = fmt::format("step {:>6}/{}", done, steps_);
    for (size_t i = 0; i < m.names.size(); ++i) line += fmt::format("  {} {:.6g}", m.names[i], m.values[i]);
    // A scheduled rate is shown as the last step done applied it.
    if (lr_.warmup_steps > 0 || lr_.decay_steps > 0) line += fmt::format("  lr {:.4g}", lr_at(lr_, done - 1));
    if (seconds > 0 && interval > 0)
      line += fmt::format("  {:.1f} ms/step  {:.0f} samples/s", 1e3 * seconds / interval,
                          interval * global_batch_ / seconds);
    emit(line);
    last_ = now;
    last_step_ = done;
    if (bar_ && done != steps_) draw_bar(done, loss, now);
  }

  // Takes the bar off the terminal (the run ended, or failed).
  void clear_bar() {
    if (bar_shown_) fmt::print(out_, "\r\033[K");
    bar_shown_ = false;
  }

  // On a terminal: one line redrawn in place between the logged lines,
  // "[=====>     ] 120/468  26%  ETA 0:04  loss 0.5123  24103 samples/s".
  void draw_bar(int64_t done, double loss, Clock::time_point now) {
    last_draw_ = now;
    constexpr int kWidth = 30;
    const double fraction = steps_ > 0 ? static_cast<double>(done) / static_cast<double>(steps_) : 0.0;
    const int filled = static_cast<int>(fraction * kWidth);
    std::string bar(static_cast<size_t>(filled), '=');
    if (filled < kWidth) bar += '>' + std::string(static_cast<size_t>(kWidth - filled - 1), ' ');
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const int64_t run = static_cast<int64_t>(step_seconds_.size());
    std::string rate, eta;
    if (elapsed > 0 && run > 1) {
      const double per_step = elapsed / static_cast<double>(run - 1);
      const auto left = static_cast<int64_t>(per_step * static_cast<double>(steps_ - done));
      eta = fmt::format("  ETA {}:{:02}", left / 60, left % 60);
      rate = fmt::format("  {:.0f} samples/s", global_batch_ / per_step);
    }
    fmt::print(out_, "\r\033[K[{}] {}/{}  {:.0f}%{}  loss {:.4g}{}", bar, done, steps_, 100 * fraction, eta, loss, rate);
    std::fflush(out_);
    bar_shown_ = true;
  }

  // Metrics as JSON lines, one per logged step (a pandas.read_json(lines=True)
  // table): step, loss and every metric, lr, ms/step, samples/s, and each
  // node's pace when the run has nodes.
  void write_to(std::FILE* metrics, std::function<nlohmann::json()> nodes) {
    metrics_ = metrics;
    nodes_ = std::move(nodes);
  }

  void schedule_lr(const LrSchedule& schedule) { lr_ = schedule; }

  void write_metrics(const StepMetrics& m, int64_t done, double seconds, int64_t interval) {
    nlohmann::ordered_json j;
    j["step"] = done;
    for (size_t i = 0; i < m.names.size(); ++i)
      j[m.names[i]] = std::isfinite(m.values[i]) ? nlohmann::ordered_json(m.values[i]) : nullptr;
    j["lr"] = lr_at(lr_, done - 1);
    const bool timed = seconds > 0 && interval > 0;
    j["ms_per_step"] = timed ? nlohmann::ordered_json(1e3 * seconds / interval) : nullptr;
    j["samples_per_sec"] = timed ? nlohmann::ordered_json(interval * global_batch_ / seconds) : nullptr;
    if (nodes_) j["nodes"] = nodes_();
    fmt::print(metrics_, "{}\n", j.dump());
    std::fflush(metrics_);
  }

  void emit(const std::string& line) {
    if (out_) {
      if (bar_shown_) fmt::print(out_, "\r\033[K");  // the line takes the bar's place
      bar_shown_ = false;
      fmt::print(out_, "{}\n", line);
      std::fflush(out_);
    }
    if (on_line_) on_line_(line);
  }

 private:
  std::FILE* out_;
  std::function<void(const std::string&)> on_line_;
  int64_t steps_, global_batch_, log_every_;
  JobResult* result_;
  Clock::time_point last_, start_;
  int64_t last_step_ = 0;
  bool first_ = true;
  std::vector<double> step_seconds_;
  bool bar_ = false;         // out_ is a terminal: draw the progress bar
  bool bar_shown_ = false;   // the bar is on the current line
  Clock::time_point last_draw_{};
  std::FILE* metrics_ = nullptr;
  LrSchedule lr_;
  std::function<nlohmann::json()> nodes_;
};

}  // namespace rill
