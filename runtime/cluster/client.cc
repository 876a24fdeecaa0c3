#include "runtime/cluster/client.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "comm/client_key.h"
#include "comm/cluster_key.h"
#include "comm/default_key.h"
#include "graph/job_file.h"
#include "runtime/cluster/cluster_config.h"
#include "runtime/cluster/control_codec.h"

namespace rill {
namespace {

namespace ctl = control;
using Clock = std::chrono::steady_clock;

class ZmqClient : public Client {
 public:
  ZmqClient(Machine master, double answer_timeout_s, std::shared_ptr<const comm::ClientKey> key, bool running,
            double refused_grace_s)
      : master_(std::move(master)), answer_timeout_s_(answer_timeout_s) {
    socket_.set(zmq::sockopt::linger, 1000);
    if (key) comm::curve_client(socket_, *key);
    watch_ = std::make_unique<comm::HandshakeWatch>(context_, socket_, fmt::format("the master {}", format_machine(master_)),
                                                    key != nullptr, false, /*refused_is_final=*/running,
                                                    std::chrono::milliseconds(std::lround(refused_grace_s * 1000)));
    socket_.connect(tcp_endpoint(master_.address, master_.ctrl_port));
  }

  StatusOr<SubmitResult> submit_text(const std::string& job_text, const std::string& file_name,
                                     const SubmitOptions& options) override {
    send(ctl::Submit{job_text, file_name, static_cast<bool>(options.on_line), options.devices, options.steps,
                     options.overrides, options.resume, options.max_restarts, options.trace,
                     options.min_nodes, options.replica_every, options.replica_copies});
    // The master answers once the cluster has formed: a Ctrl-C before then
    // ends the wait (there is no job to stop yet).
    RILL_ASSIGN_OR_RETURN(ctl::Message first, receive(answer_timeout_s_, options.interrupts));
    auto* reply = std::get_if<ctl::SubmitReply>(&first);
    if (!reply) return data_loss("the master answered a submit with an unexpected message");
    if (!reply->error.empty()) return invalid_argument("{}", reply->error);
    SubmitResult result;
    result.job_id = reply->job_id;
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(options.timeout_s));
    // A master that says nothing for a while is asked for its status; one
    // that does not answer that either is gone (its process died), and the
    // wait ends instead of lasting the job's whole timeout.
    bool asked = false;
    int stops_sent = 0;
    auto quiet_since = Clock::now();
    for (;;) {
      double left = std::chrono::duration<double>(deadline - Clock::now()).count();
      if (left <= 0)
        return Status(Code::kDeadlineExceeded, fmt::format("job {} did not finish within {} s", result.job_id,
                                                           options.timeout_s));
      const int interrupts = options.interrupts ? std::min(options.interrupts->load(), 2) : 0;
      for (; stops_sent < interrupts; ++stops_sent) send(ctl::Stop{result.job_id, stops_sent == 1});
      const double quiet = std::chrono::duration<double>(Clock::now() - quiet_since).count();
      if (quiet >= answer_timeout_s_ && left > answer_timeout_s_) {
        if (asked)
          return Status(Code::kUnavailable,
                        fmt::format("the master {} stopped answering while job {} ran (its agent died?)",
                                    format_machine(master_), result.job_id));
        send(ctl::StatusRequest{});
        asked = true;
        quiet_since = Clock::now();
        continue;
      }
      // With interrupts to pass on, they are looked at every 50 ms.
      double wait = quiet < answer_timeout_s_ ? std::min(left, answer_timeout_s_ - quiet) : left;
      if (options.interrupts) wait = std::min(wait, 0.05);
      auto received = receive(std::max(wait, 0.0));
      if (!received.ok() && received.status().code() == Code::kDeadlineExceeded) continue;
      if (!received.ok()) return received.status();
      asked = false;
      quiet_since = Clock::now();
      ctl::Message& message = *received;
      if (auto* p = std::get_if<ctl::Progress>(&message)) {
        if (options.on_line && p->job_id == result.job_id) options.on_line(p->line);
      } else if (auto* r = std::get_if<ctl::Result>(&message)) {
        if (r->job_id != result.job_id) continue;
        result.result_json = r->result_json;
        result.trace_json = std::move(r->trace_json);
        if (!r->error.empty()) result.status = Status(r->code == Code::kOk ? Code::kAborted : r->code, r->error);
        return result;
      }
    }
  }

  StatusOr<SubmitResult> submit(const graph::Job& job, const SubmitOptions& options) override {
    RILL_ASSIGN_OR_RETURN(std::string text, graph::job_to_json(job));
    return submit_text(text, fmt::format("job '{}' (C++)", job.name), options);
  }

  StatusOr<std::string> status() override {
    send(ctl::StatusRequest{});
    RILL_ASSIGN_OR_RETURN(ctl::Message message, receive(answer_timeout_s_));
    if (auto* s = std::get_if<ctl::StatusReply>(&message)) return s->status_json;
    return data_loss("the master answered a status request with an unexpected message");
  }

  StatusOr<std::string> stop(int64_t job_id, bool now) override {
    send(ctl::Stop{job_id, now});
    RILL_ASSIGN_OR_RETURN(ctl::Message message, receive(answer_timeout_s_));
    auto* reply = std::get_if<ctl::StatusReply>(&message);
    if (!reply) return data_loss("the master answered a stop with an unexpected message");
    auto j = nlohmann::json::parse(reply->status_json, nullptr, false);
    if (j.is_discarded() || !j.contains("stopping"))
      return Status(Code::kNotFound, j.is_object() && j.contains("error") ? j["error"].get<std::string>()
                                                                          : reply->status_json);
    return j["stopping"].get<std::string>();
  }

  // Returns once the master has taken the request (so it is not lost when
  // this client closes right after).
  Status shutdown() override {
    send(ctl::Shutdown{});
    RILL_ASSIGN_OR_RETURN(ctl::Message reply, receive(answer_timeout_s_));
    if (!std::holds_alternative<ctl::StatusReply>(reply))
      return data_loss("the master answered a shutdown with an unexpected message");
    return {};
  }

 private:
  void send(const ctl::Message& message) {
    std::string bytes = ctl::encode(message);
    socket_.send(zmq::buffer(bytes), zmq::send_flags::none);
  }

  // A refused connection or handshake ends the wait at once, saying why; so
  // does an interrupt when `interrupts` counts them.
  StatusOr<ctl::Message> receive(double timeout_s, const std::atomic<int>* interrupts = nullptr) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0}, {watch_->handle(), 0, ZMQ_POLLIN, 0}};
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      // With interrupts to watch, in slices: one that came just before the
      // poll interrupts nothing.
      const auto slice = interrupts != nullptr ? std::min(left, std::chrono::milliseconds(50)) : left;
      try {
        zmq::poll(items, 2, std::max(slice, std::chrono::milliseconds(0)));
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
        if (interrupts == nullptr || interrupts->load() == 0) continue;  // a signal not for us: wait on
      }
      if (interrupts != nullptr && interrupts->load() > 0)
        return Status(Code::kAborted, fmt::format("interrupted while waiting for the master {} to answer (the "
                                                  "cluster had not formed: no job was started)",
                                                  format_machine(master_)));
      if (const std::string failure = watch_->poll(); !failure.empty()) {
        socket_.set(zmq::sockopt::linger, 0);  // nothing queued can reach it: closing need not wait
        return Status(watch_->unreachable() ? Code::kUnavailable : Code::kPermissionDenied, failure);
      }
      if ((items[0].revents & ZMQ_POLLIN) || Clock::now() >= deadline) break;
    }
    if (!(items[0].revents & ZMQ_POLLIN))
      return Status(Code::kDeadlineExceeded,
                    fmt::format("the master {} did not answer within {} s (is its agent running, and has every "
                                "node's agent joined it?)",
                                format_machine(master_), timeout_s));
    zmq::message_t message;
    (void)socket_.recv(message);
    return ctl::decode(message.to_string_view());
  }

  Machine master_;
  double answer_timeout_s_;
  zmq::context_t context_{1};
  zmq::socket_t socket_{context_, zmq::socket_type::dealer};
  std::unique_ptr<comm::HandshakeWatch> watch_;  // after socket_: closed first
};

}  // namespace

StatusOr<std::unique_ptr<Client>> Client::connect(const std::string& master, double answer_timeout_s,
                                                  bool running, double refused_grace_s, const std::string& key_file) {
  // One address, named as the --master the user gave (not as a machine list).
  const size_t first = master.find_first_not_of(" \t\r\n"), last = master.find_last_not_of(" \t\r\n");
  const std::string given = first == std::string::npos ? std::string() : master.substr(first, last - first + 1);
  if (given.empty() || given.find(',') != std::string::npos)
    return invalid_argument("--master names one address[:port], got '{}'", master);
  RILL_ASSIGN_OR_RETURN(Machine machine, parse_machine(given, kDefaultCtrlPort, fmt::format("--master '{}'", given)));
  std::vector<Machine> machines{machine};
  // A client key file, or the cluster key's.
  auto key = key_file.empty() ? comm::client_key_from_environment() : comm::client_key_from_file(key_file);
  if (!key.ok()) return key.status();
  // An agent on loopback makes the user's default key as it starts: a
  // client started with it (a script, a supervisor) may look a moment too
  // soon, and would then be refused. Without a key, and not --insecure, it
  // looks again for up to 2 s.
  if (*key == nullptr && key_file.empty() && !comm::insecure_from_environment() &&
      is_loopback_address(machine.address))
    for (int tries = 0; tries < 40 && key.ok() && *key == nullptr; ++tries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      key = comm::client_key_from_environment();
    }
  if (!key.ok()) return key.status();
  return std::unique_ptr<Client>(
      std::make_unique<ZmqClient>(machines[0], answer_timeout_s, std::move(*key), running, refused_grace_s));
}

}  // namespace rill
