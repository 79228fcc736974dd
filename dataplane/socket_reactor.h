#pragma once
// Socket mode: one reactor thread per core over kernel TCP (epoll, SO_REUSEPORT listeners,
// non-blocking sockets). Each reactor owns its listeners' sockets and its connections
// (shared-nothing); sessions from frontend/ speak the protocols. Writes are batched: what
// sessions send during one loop iteration goes out in one send() per connection.
//
// Threading: a reactor's connections and sessions live on its thread only. post() is the one
// thread-safe entry (backends completing requests); stop() may be called from any thread.

#include <sys/socket.h>

#include <atomic>
#include <functional>
#include <optional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/connection_metrics.h"
#include "dataplane/output_limits.h"
#include "dataplane/reactor_thread.h"
#include "net/session.h"

namespace infergate::dataplane {

// Opens a non-blocking listening TCP socket with SO_REUSEADDR and SO_REUSEPORT on
// address:port (IPv4 or IPv6 literal). Returns the fd; `bound_port` receives the actual port
// (useful with port 0). Errors name the address and the reason (EADDRINUSE, EACCES...).
absl::StatusOr<int> openListener(const std::string& address, uint16_t port, uint16_t* bound_port);

struct ReactorOptions {
  int index = 0;
  int cpu = -1;                                  // pin the thread to this CPU; -1 = no pinning
  // Every connection is ticked (Session::onTick, linger and send timeouts) once per tick_ns
  // (to 9/8 of it), counted from its accept: the due ones come off the head of a FIFO, so an
  // iteration visits only those, never every connection.
  uint64_t tick_ns = 100'000'000;
  uint64_t linger_ns = 2'000'000'000;            // lingering close after the last response
  uint64_t max_connections = 10000;              // process-wide, shared through `connections`
  std::atomic<uint64_t>* connections = nullptr;  // process-wide open-connection count
  ConnectionMetrics* metrics = nullptr;          // may be null (admin listener)
  // Slow readers and output memory (dataplane/output_limits.h): applied to the userspace
  // write queue; a connection closed for them is reset (SO_LINGER 0), which also frees what
  // the kernel still holds for it.
  OutputLimits output;
  std::string name = "reactor";
  // xdp-filter mode: looks up the ingress tag of a connection (peer = client, local = us).
  // Called once per request start; empty = no ingress filter.
  using TagLookup = std::function<std::optional<net::IngressTag>(const sockaddr_storage& peer,
                                                                 const sockaddr_storage& local)>;
  TagLookup tag_lookup;
};

class SocketReactor final : public ReactorThread {
 public:
  explicit SocketReactor(ReactorOptions options);
  ~SocketReactor() override;

  // Adds a listening socket (takes ownership of `fd`); call before start(). `refusal`: the
  // bytes sent to a connection refused because max_connections is reached, before closing it
  // (an HTTP/1.1 503 by default; empty for protocols that cannot be answered blindly, e.g. h2).
  void addListener(int fd, net::SessionFactory factory, std::string refusal = kHttpRefusal);
  static const std::string kHttpRefusal;
  // start(), join(), and stop(drain_ns): stops accepting, closes idle connections, lets
  // connections with requests in flight finish for up to `drain_ns`, then closes everything
  // and ends the thread (ReactorThread).

  size_t connectionCount() const { return conn_count_.load(std::memory_order_relaxed); }

 private:
  struct Conn;
  struct Listener {
    int fd;
    net::SessionFactory factory;
    std::string refusal;
  };
  void run() override;
  void acceptAll(Listener& l);
  void onReadable(Conn& c);
  void onWritable(Conn& c);
  void flushDirty();
  bool writeOut(Conn& c);  // false when the connection was closed
  void beginLinger(Conn& c);
  void destroy(Conn& c);
  void reapDestroyed();
  void updateEvents(Conn& c);
  void runPosted();
  void runDueTicks();
  void tickConn(Conn& c);
  uint64_t freshDrainRecheck() const;
  uint64_t nextTick() const;
  void tickPush(Conn& c);
  void tickUnlink(Conn& c);
  void updateOutputPause(Conn& c);
  void closeForOutput(Conn& c, OutputCloseReason why);

  ReactorOptions options_;
  int epfd_ = -1;
  std::vector<Listener> listeners_;
  std::unordered_map<int, std::unique_ptr<Conn>> conns_;
  std::atomic<size_t> conn_count_{0};
  std::vector<Conn*> dirty_;
  std::vector<int> to_destroy_;
  // Connections in order of their next tick (all deadlines are "last tick + tick_ns", so the
  // order of insertion is the order of deadlines). Intrusive: Conn::tick_prev/tick_next.
  Conn* tick_head_ = nullptr;
  Conn* tick_tail_ = nullptr;

  bool draining_ = false;
  uint64_t drain_deadline_ = 0;
  uint64_t drain_recheck_ns_ = 0;  // draining: when a held fresh connection's grace ends (0: none)
};

}  // namespace infergate::dataplane
