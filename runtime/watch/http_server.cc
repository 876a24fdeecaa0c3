#include "runtime/watch/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <microhttpd.h>
#include <spdlog/spdlog.h>

#include "base/mutex.h"
#include "runtime/watch/http_routes.h"

namespace rill {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::seconds kLogEvery{10};
constexpr std::chrono::milliseconds kDeadlineTick{100};  // how late a header deadline may be enforced
constexpr size_t kRequestBytes = 32 * 1024;              // a connection's buffer: a request's headers must fit

// A listening socket on address:port (non-blocking, SO_REUSEADDR: an agent
// restarted on its port binds again while the last one's connections linger
// in TIME-WAIT, and a port another process listens on is still refused), or
// -1; `bound` gets its port.
int listen_on(const std::string& address, int port, int* bound) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (::getaddrinfo(address.empty() ? nullptr : address.c_str(), std::to_string(port).c_str(), &hints, &found) != 0)
    return -1;
  int fd = -1;
  for (const addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) return -1;
  sockaddr_storage local{};
  socklen_t size = sizeof local;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &size);
  *bound = local.ss_family == AF_INET6 ? ntohs(reinterpret_cast<const sockaddr_in6*>(&local)->sin6_port)
                                       : ntohs(reinterpret_cast<const sockaddr_in*>(&local)->sin_port);
  return fd;
}

std::string header(MHD_Connection* connection, MHD_ValueKind kind, const char* name) {
  const char* value = MHD_lookup_connection_value(connection, kind, name);
  return value == nullptr ? std::string() : std::string(value);
}

int connection_fd(MHD_Connection* connection) {
  const MHD_ConnectionInfo* info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
  return info == nullptr ? -1 : info->connect_fd;
}

}  // namespace

struct HttpServer::Impl {
  Impl(MetricsBoard& board, std::string token, HttpLimits limits, std::string where)
      : board(board), token(std::move(token)), limits(limits), where(std::move(where)) {}

  MetricsBoard& board;
  const std::string token;
  const HttpLimits limits;
  const std::string where;  // "HTTP 127.0.0.1:8265", in logs
  MHD_Daemon* daemon = nullptr;
  std::thread watchdog;

  // Connections whose next request's headers are not all in, and since
  // when: accepted, or answered and kept alive. An entry is removed (under
  // mu) before libmicrohttpd closes its descriptor (its CLOSED notification
  // comes first), so the watchdog never shuts down a descriptor reused since.
  struct Waiting {
    int fd;
    Clock::time_point since;
  };
  Mutex mu;
  CondVar wake;
  bool stopping GUARDED_BY(mu) = false;
  std::map<MHD_Connection*, Waiting> waiting GUARDED_BY(mu);
  int64_t cut GUARDED_BY(mu) = 0, cut_logged GUARDED_BY(mu) = 0;
  Clock::time_point cut_log_at GUARDED_BY(mu){};

  // libmicrohttpd's own messages. That a connection was refused over a
  // limit is warned of: the first, then at most one every 10 s with how
  // many came. The rest (a client that closed mid-request, say) is routine:
  // debug.
  Mutex log_mu;
  int64_t refusals GUARDED_BY(log_mu) = 0;
  Clock::time_point refusal_log_at GUARDED_BY(log_mu){};

  // Closes, every tick, the connections past their header deadline: a
  // shutdown, after which libmicrohttpd reads the end and closes it.
  void watch() {
    MutexLock lock(mu);
    while (!stopping) {
      (void)wake.wait_until(mu, Clock::now() + kDeadlineTick);
      const auto now = Clock::now();
      for (auto it = waiting.begin(); it != waiting.end();) {
        if (now - it->second.since < limits.header_deadline) {
          ++it;
          continue;
        }
        ::shutdown(it->second.fd, SHUT_RDWR);
        ++cut;
        it = waiting.erase(it);
      }
      if (cut > cut_logged && now - cut_log_at >= kLogEvery) {
        spdlog::warn("{}: closed {} connection(s) whose request headers were not all in within {} ms (slow or idle "
                     "clients); {} since it started",
                     where, cut - cut_logged, limits.header_deadline.count(), cut);
        cut_logged = cut;
        cut_log_at = now;
      }
    }
  }

  void note(const char* text) {
    std::string line(text);
    while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
    if (line.find("connection limit") == std::string::npos) {
      spdlog::debug("{}: {}", where, line);
      return;
    }
    MutexLock lock(log_mu);
    ++refusals;
    const auto now = Clock::now();
    if (now - refusal_log_at < kLogEvery) return;
    spdlog::warn("{}: refused {} connection(s) over the limit of {} per client address or {} in all (the latest: "
                 "{})",
                 where, refusals, limits.per_address, limits.total, line);
    refusals = 0;
    refusal_log_at = now;
  }

  static void log_message(void* cls, const char* format, va_list arguments) {
    char text[512];
    std::vsnprintf(text, sizeof text, format, arguments);
    static_cast<Impl*>(cls)->note(text);
  }

  static void notify_connection(void* cls, MHD_Connection* connection, void** /*socket_context*/,
                                MHD_ConnectionNotificationCode code) {
    auto* impl = static_cast<Impl*>(cls);
    MutexLock lock(impl->mu);
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
      impl->waiting.erase(connection);
      return;
    }
    if (const int fd = connection_fd(connection); fd >= 0) impl->waiting[connection] = {fd, Clock::now()};
  }

  // A request answered; on a connection kept alive, the next one's headers
  // are waited for from now.
  static void completed(void* cls, MHD_Connection* connection, void** request_context,
                        MHD_RequestTerminationCode how) {
    auto* impl = static_cast<Impl*>(cls);
    *request_context = nullptr;
    if (how != MHD_REQUEST_TERMINATED_COMPLETED_OK) return;  // it closes
    MutexLock lock(impl->mu);
    if (const int fd = connection_fd(connection); fd >= 0) impl->waiting[connection] = {fd, Clock::now()};
  }

  static MHD_Result answer(void* cls, MHD_Connection* connection, const char* url, const char* method,
                           const char* /*version*/, const char* /*upload_data*/, size_t* upload_data_size,
                           void** request_context) {
    auto* impl = static_cast<Impl*>(cls);
    {
      MutexLock lock(impl->mu);
      impl->waiting.erase(connection);  // its headers are in
    }
    if (*request_context != nullptr) {  // a body after the answer was queued: dropped
      *upload_data_size = 0;
      return MHD_YES;
    }
    *request_context = impl;
    HttpRequest request;
    request.method = method;
    request.path = url;
    if (const char* token = MHD_lookup_connection_value(connection, MHD_GET_ARGUMENT_KIND, "token"))
      request.query_token = token;
    request.authorization = header(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    request.cookie = header(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_COOKIE);
    const HttpAnswer a = answer_http(impl->board, impl->token, request);
    MHD_Response* response =
        a.static_body.empty()
            ? MHD_create_response_from_buffer(a.body.size(), const_cast<char*>(a.body.data()), MHD_RESPMEM_MUST_COPY)
            : MHD_create_response_from_buffer(a.static_body.size(), const_cast<char*>(a.static_body.data()),
                                              MHD_RESPMEM_PERSISTENT);
    if (response == nullptr) return MHD_NO;
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, a.content_type.c_str());
    for (const auto& [name, value] : a.headers) MHD_add_response_header(response, name.c_str(), value.c_str());
    const MHD_Result queued = MHD_queue_response(connection, static_cast<unsigned>(a.status), response);
    MHD_destroy_response(response);
    return queued;
  }
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StatusOr<std::unique_ptr<HttpServer>> HttpServer::start(const std::string& address, int port, MetricsBoard& board,
                                                        const std::string& token, HttpLimits limits) {
  int bound = 0;
  const int listener = listen_on(address, port, &bound);
  if (listener < 0)
    return Status(Code::kUnavailable, fmt::format("HTTP: cannot listen on {}:{} (in use, or not an address of this "
                                                  "machine)",
                                                  address, port));
  auto impl = std::make_unique<Impl>(board, token, limits, fmt::format("HTTP {}:{}", address, bound));
  Impl* raw = impl.get();
  // The daemon owns the listening socket from here (MHD_stop_daemon closes it).
  raw->daemon = MHD_start_daemon(
      MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG, 0, nullptr, nullptr, &Impl::answer, raw,
      MHD_OPTION_EXTERNAL_LOGGER, &Impl::log_message, raw,  // first: it logs what the others say
      MHD_OPTION_LISTEN_SOCKET, listener,
      MHD_OPTION_THREAD_POOL_SIZE, static_cast<unsigned>(std::max(1, limits.threads)),
      MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned>(std::max(1, limits.total)),
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, static_cast<unsigned>(std::max(1, limits.per_address)),
      MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned>(std::max<int64_t>(1, limits.idle_timeout.count())),
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, kRequestBytes,
      MHD_OPTION_NOTIFY_CONNECTION, &Impl::notify_connection, raw,
      MHD_OPTION_NOTIFY_COMPLETED, &Impl::completed, raw,
      MHD_OPTION_END);
  if (raw->daemon == nullptr) {
    ::close(listener);
    return Status(Code::kInternal, fmt::format("HTTP: libmicrohttpd could not start serving {}:{}", address, bound));
  }
  raw->watchdog = std::thread([raw] { raw->watch(); });
  std::unique_ptr<HttpServer> server(new HttpServer(std::move(impl)));
  server->port_ = bound;
  return server;
}

HttpServer::~HttpServer() {
  // The daemon first: its threads end, and every connection's CLOSED
  // notification has emptied `waiting`; then the watchdog.
  MHD_stop_daemon(impl_->daemon);
  {
    MutexLock lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  if (impl_->watchdog.joinable()) impl_->watchdog.join();
}

}  // namespace rill
