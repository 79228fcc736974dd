#include "backends/dns_resolver.h"

#include <ares.h>
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <mutex>

namespace infergate::backends {

namespace {
constexpr std::string_view kDnsPrefix = "dns:///";

std::once_flag g_ares_init;
int g_ares_init_rc = ARES_SUCCESS;

bool validName(std::string_view n) {
  if (n.empty() || n.size() > 253) return false;
  size_t label = 0;
  for (char c : n) {
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
      continue;
    }
    if (++label > 63) return false;
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
          c == '_')) {
      return false;
    }
  }
  return true;
}
}  // namespace

bool isDnsEntry(std::string_view entry) { return entry.substr(0, 6) == "dns://"; }

absl::StatusOr<DnsTargetSpec> parseDnsEntry(std::string_view entry) {
  if (!isDnsEntry(entry)) {
    return absl::NotFoundError(fmt::format("'{}' is not a dns:/// entry", entry));
  }
  if (entry.substr(0, kDnsPrefix.size()) != kDnsPrefix) {
    return absl::InvalidArgumentError(fmt::format(
        "invalid endpoint '{}': expected dns:///name:port (three slashes: no authority; the "
        "DNS server is dns_server or /etc/resolv.conf's)",
        entry));
  }
  std::string_view rest = entry.substr(kDnsPrefix.size());
  const size_t colon = rest.rfind(':');
  uint32_t port = 0;
  if (colon == std::string_view::npos) {
    return absl::InvalidArgumentError(fmt::format(
        "invalid endpoint '{}': expected dns:///name:port (the port is required)", entry));
  }
  auto [p, ec] = std::from_chars(rest.data() + colon + 1, rest.data() + rest.size(), port);
  if (ec != std::errc() || p != rest.data() + rest.size() || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(
        fmt::format("invalid endpoint '{}': port must be 1..65535", entry));
  }
  std::string_view name = rest.substr(0, colon);
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  if (!validName(name)) {
    return absl::InvalidArgumentError(fmt::format(
        "invalid endpoint '{}': '{}' is not a DNS name (letters, digits, '-', '_', dots)", entry,
        name));
  }
  return DnsTargetSpec{std::string(name), static_cast<uint16_t>(port)};
}

std::string joinHostPort(const std::string& ip, uint16_t port) {
  if (ip.find(':') != std::string::npos) return fmt::format("[{}]:{}", ip, port);
  return fmt::format("{}:{}", ip, port);
}

struct DnsResolver::Impl {
  ares_channel channel = nullptr;
  Options options;
  ~Impl() {
    if (channel != nullptr) ares_destroy(channel);
  }
};

DnsResolver::DnsResolver(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DnsResolver::~DnsResolver() = default;

absl::StatusOr<std::unique_ptr<DnsResolver>> DnsResolver::create(const Options& options) {
  std::call_once(g_ares_init, [] { g_ares_init_rc = ares_library_init(ARES_LIB_INIT_ALL); });
  if (g_ares_init_rc != ARES_SUCCESS) {
    return absl::InternalError(
        fmt::format("c-ares initialisation failed: {}", ares_strerror(g_ares_init_rc)));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  ares_options o{};
  int mask = ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES;
  // Two tries inside the whole budget.
  o.timeout = static_cast<int>(std::clamp<uint64_t>(options.timeout_ms / 2, 50, 30000));
  o.tries = 2;
  char lookups[] = "b";  // DNS only: no /etc/hosts
  if (!options.server.empty()) {
    // A given server answers for the name as written: no search domains, no hosts file.
    mask |= ARES_OPT_LOOKUPS | ARES_OPT_DOMAINS | ARES_OPT_FLAGS;
    o.lookups = lookups;
    o.domains = nullptr;
    o.ndomains = 0;
    o.flags = ARES_FLAG_NOSEARCH;
  }
  int rc = ares_init_options(&impl->channel, &o, mask);
  if (rc != ARES_SUCCESS) {
    impl->channel = nullptr;
    return absl::InternalError(fmt::format("c-ares: {}", ares_strerror(rc)));
  }
  if (!options.server.empty()) {
    rc = ares_set_servers_ports_csv(impl->channel, options.server.c_str());
    if (rc != ARES_SUCCESS) {
      return absl::InvalidArgumentError(
          fmt::format("dns_server '{}': {} (expected ip:port, e.g. 127.0.0.1:5353 or [::1]:53)",
                      options.server, ares_strerror(rc)));
    }
  }
  return std::unique_ptr<DnsResolver>(new DnsResolver(std::move(impl)));
}

namespace {
struct Query {
  DnsResolver::Answer* answer;
  bool done = false;
};

// Runs on the calling thread inside ares_process_fd (c-ares callback): no exception escapes.
void onAddrInfo(void* arg, int status, int /*timeouts*/, struct ares_addrinfo* res) noexcept {
  auto* q = static_cast<Query*>(arg);
  q->done = true;
  DnsResolver::Answer& a = *q->answer;
  try {
    if (status == ARES_SUCCESS && res != nullptr) {
      uint32_t ttl = UINT32_MAX;
      for (ares_addrinfo_node* n = res->nodes; n != nullptr; n = n->ai_next) {
        char buf[INET6_ADDRSTRLEN] = {};
        if (n->ai_family == AF_INET && n->ai_addrlen >= sizeof(sockaddr_in)) {
          inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(n->ai_addr)->sin_addr, buf,
                    sizeof buf);
        } else if (n->ai_family == AF_INET6 && n->ai_addrlen >= sizeof(sockaddr_in6)) {
          inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(n->ai_addr)->sin6_addr, buf,
                    sizeof buf);
        } else {
          continue;
        }
        a.addresses.emplace_back(buf);
        if (n->ai_ttl >= 0) ttl = std::min(ttl, static_cast<uint32_t>(n->ai_ttl));
      }
      std::sort(a.addresses.begin(), a.addresses.end());
      a.addresses.erase(std::unique(a.addresses.begin(), a.addresses.end()), a.addresses.end());
      a.min_ttl_s = ttl == UINT32_MAX ? 0 : ttl;
      a.status =
          a.addresses.empty() ? absl::NotFoundError("no A or AAAA record") : absl::OkStatus();
    } else if (status == ARES_ENOTFOUND || status == ARES_ENODATA || status == ARES_SUCCESS) {
      a.status = absl::NotFoundError(status == ARES_ENOTFOUND ? "NXDOMAIN (no such name)"
                                                              : "no A or AAAA record");
    } else {
      a.status = absl::UnavailableError(ares_strerror(status));
    }
  } catch (...) {
    a.status = absl::InternalError("out of memory in the DNS callback");
  }
  if (res != nullptr) ares_freeaddrinfo(res);
}
}  // namespace

std::vector<DnsResolver::Answer> DnsResolver::resolve(const std::vector<std::string>& names) {
  std::vector<Answer> answers(names.size());
  std::vector<Query> queries(names.size());
  ares_channel ch = impl_->channel;
  for (size_t i = 0; i < names.size(); ++i) {
    queries[i].answer = &answers[i];
    ares_addrinfo_hints hints{};
    hints.ai_family = AF_UNSPEC;  // A and AAAA
    hints.ai_flags = ARES_AI_NOSORT;
    ares_getaddrinfo(ch, names[i].c_str(), nullptr, &hints, onAddrInfo, &queries[i]);
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(std::max<uint64_t>(impl_->options.timeout_ms, 1));
  auto all_done = [&] {
    for (const Query& q : queries) {
      if (!q.done) return false;
    }
    return true;
  };
  while (!all_done()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      ares_cancel(ch);  // the callbacks run with ARES_ECANCELLED
      break;
    }
    ares_socket_t socks[ARES_GETSOCK_MAXNUM];
    const int bits = ares_getsock(ch, socks, ARES_GETSOCK_MAXNUM);
    pollfd fds[ARES_GETSOCK_MAXNUM];
    nfds_t n = 0;
    for (int i = 0; i < ARES_GETSOCK_MAXNUM; ++i) {
      short ev = 0;
      if (ARES_GETSOCK_READABLE(bits, i)) ev |= POLLIN;
      if (ARES_GETSOCK_WRITABLE(bits, i)) ev |= POLLOUT;
      if (ev == 0) continue;
      fds[n++] = pollfd{socks[i], ev, 0};
    }
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - now).count();
    timeval maxtv{static_cast<time_t>(left / 1000000), static_cast<suseconds_t>(left % 1000000)};
    timeval tv{};
    ares_timeout(ch, &maxtv, &tv);
    const int wait_ms = static_cast<int>(tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000);
    const int rc = ::poll(fds, n, std::max(wait_ms, 1));
    if (rc <= 0) {
      ares_process_fd(ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD);  // timeouts
      continue;
    }
    for (nfds_t i = 0; i < n; ++i) {
      const bool r = (fds[i].revents & (POLLIN | POLLERR | POLLHUP)) != 0;
      const bool w = (fds[i].revents & POLLOUT) != 0;
      if (!r && !w) continue;
      ares_process_fd(ch, r ? fds[i].fd : ARES_SOCKET_BAD, w ? fds[i].fd : ARES_SOCKET_BAD);
    }
  }
  for (Answer& a : answers) {
    if (a.status.ok() && a.addresses.empty()) a.status = absl::UnavailableError("no answer");
  }
  for (size_t i = 0; i < names.size(); ++i) {
    if (!queries[i].done) answers[i].status = absl::UnavailableError("timed out");
    if (!answers[i].status.ok()) {
      answers[i].status = absl::Status(
          answers[i].status.code(),
          fmt::format("resolving {}: {}", names[i], std::string(answers[i].status.message())));
    }
  }
  return answers;
}

}  // namespace infergate::backends
