#include "backends/grpc_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "common/check.h"
#include "common/clock.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace infergate::backends {

namespace {

constexpr int32_t kWindow = 16 << 20;        // our receive window, per stream and connection
constexpr uint64_t kInitialBackoffMs = 100;  // reconnect back-off after a failed connect
constexpr uint64_t kMaxBackoffMs = 1000;
constexpr uint64_t kIdleTickNs = 1'000'000'000;  // the I/O thread's longest sleep
constexpr size_t kSendChunk = 64 << 10;          // bytes gathered before a send()

}  // namespace

namespace grpc_detail {

struct Conn;

// One unary call, owned by the endpoint from call() until its `done` has been taken.
struct Call {
  const char* method = nullptr;
  std::string owned;                     // request bytes for the copying overload
  char prefix[5];                        // the gRPC message prefix: flag, length (big-endian)
  std::vector<std::string_view> pieces;  // the prefix, then the message
  size_t piece = 0;                      // send position: piece index ...
  size_t piece_off = 0;                  // ... and offset in it
  uint64_t timeout_ms = 0;
  uint64_t deadline_ns = 0;  // 0: none
  std::multimap<uint64_t, Call*>::iterator deadline_it;
  std::function<void(GrpcResult)> done;
  Conn* conn = nullptr;  // set while waiting for or running on a connection
  int32_t stream_id = 0;
  uint64_t cancel_id = 0;     // key in Impl::cancellable while the call can be cancelled
  bool headers_sent = false;  // the request reached the socket
  // The response.
  int http_status = 0;
  int grpc_status = -1;
  std::string grpc_message;
  std::shared_ptr<std::string> data = std::make_shared<std::string>();
  bool too_large = false;
  GrpcResult result;  // set when finished
};

// One HTTP/2 connection (a "channel"): a slot of the endpoint, reconnected on demand.
struct Conn {
  enum class State : uint8_t { kIdle, kConnecting, kReady, kFailure };
  State state = State::kIdle;
  int fd = -1;
  bool connect_wanted = false;  // the I/O thread should start connecting
  bool draining = false;        // GOAWAY received: no new calls, close when empty
  bool want_write = false;      // EPOLLOUT armed
  nghttp2_session* session = nullptr;
  std::string out;  // bytes nghttp2 produced that the socket has not taken
  size_t out_off = 0;
  uint64_t retry_at_ns = 0;
  uint64_t backoff_ms = kInitialBackoffMs;
  std::string last_error;
  std::vector<Call*> waiting;       // calls waiting for the connection
  std::unordered_set<Call*> calls;  // calls submitted on this connection
};

}  // namespace grpc_detail

using grpc_detail::Call;
using grpc_detail::Conn;

// The endpoint's state: its connections, the calls, and the I/O thread. Every nghttp2 session
// is used under `mu`: by call() (submit and write, on the caller's thread) and by the I/O thread
// (reads, writes the socket did not take at once, connects, deadlines).
struct GrpcEndpoint::Impl {
  Impl(std::string address, int channels, int max_message_bytes);
  ~Impl();

  void start(Call* c, const char* method, uint64_t timeout_ms,
             std::shared_ptr<net::CancelToken> cancel);
  // A cancel token fired for call `id` (any thread): handed to the I/O thread.
  void requestCancel(uint64_t id);
  // Ends call `id` with CANCELLED (RST_STREAM CANCEL when on the wire); no-op when it ended.
  void cancelLocked(uint64_t id, std::vector<Call*>& fin);
  // Ends a call before its answer (deadline, cancel): RST_STREAM CANCEL when it has a stream
  // (its late frames then find no call), else out of its connection's queue; answered `status`.
  void abortLocked(Call* c, absl::Status status, std::vector<Call*>& fin);
  bool reachable();
  void wake();
  void ioLoop();
  void removeDeadlineLocked(Call* c);
  void finishLocked(Call* c, std::vector<Call*>& fin);
  static void runDone(std::vector<Call*>& fin);
  void submitLocked(Conn& k, Call* c, std::vector<Call*>& fin);
  void flushLocked(Conn& k, std::vector<Call*>& fin);
  void readLocked(Conn& k, std::vector<Call*>& fin);
  // The endpoint's address, resolved (getaddrinfo: may block, so never under `mu`).
  struct Resolved {
    std::string error;  // empty: addr is set
    int family = AF_INET;
    sockaddr_storage addr{};
    socklen_t len = 0;
  };
  Resolved resolve() const;
  void connectLocked(Conn& k, const Resolved& to, std::vector<Call*>& fin);
  void connectFailedLocked(Conn& k, const std::string& err, std::vector<Call*>& fin);
  void connectedLocked(Conn& k, std::vector<Call*>& fin);
  void closeConnLocked(Conn& k, const std::string& why, std::vector<Call*>& fin);
  // Fails the calls waiting for `k` (UNAVAILABLE `msg`, not sent).
  void failWaitingLocked(Conn& k, const std::string& msg, std::vector<Call*>& fin);

  // nghttp2 callbacks (user data: the Impl).
  static ssize_t readRequest(nghttp2_session*, int32_t, uint8_t* buf, size_t length,
                             uint32_t* data_flags, nghttp2_data_source* source, void*);
  static int onHeader(nghttp2_session* s, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void*);
  static int onData(nghttp2_session* s, uint8_t, int32_t id, const uint8_t* data, size_t len,
                    void* user);
  static int onFrameSend(nghttp2_session* s, const nghttp2_frame* frame, void*);
  static int onFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user);
  static int onStreamClose(nghttp2_session* s, int32_t id, uint32_t error_code, void* user);

  const std::string address;
  const int max_message_bytes;
  std::mutex mu;
  int epfd = -1;
  int wakefd = -1;
  std::vector<std::unique_ptr<Conn>> conns;
  std::multimap<uint64_t, Call*> deadlines;
  uint64_t next = 0;          // round robin
  uint64_t next_wake_ns = 0;  // when the sleeping I/O thread wakes; 0: it is awake
  bool stopping = false;
  std::vector<std::function<void()>> posted;  // GrpcEndpoint::post, run by the I/O thread
  // Cancellable calls by id, and the cancels the I/O thread has yet to carry out.
  std::unordered_map<uint64_t, Call*> cancellable;
  std::vector<uint64_t> cancel_requests;
  uint64_t next_cancel_id = 1;
  // What cancel tokens reach the endpoint through: a token may outlive it (held by a batch
  // being answered, a connection); the destructor clears `impl` under `mu`.
  struct Lifeline {
    std::mutex mu;
    Impl* impl = nullptr;
  };
  std::shared_ptr<Lifeline> lifeline = std::make_shared<Lifeline>();
  Conn* current = nullptr;               // the connection nghttp2 is working on (callbacks)
  std::vector<Call*>* cb_fin = nullptr;  // where callbacks put finished calls
  std::thread thread;
};

namespace {

// Runs an nghttp2 callback's body; see connectedLocked.
template <typename F>
int guarded(F&& body) noexcept {
  try {
    return body();
  } catch (...) {
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
}

// gRPC's percent-encoding of grpc-message.
std::string percentDecode(std::string_view s) {
  std::string r;
  r.reserve(s.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      r.push_back(static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2])));
      i += 2;
    } else {
      r.push_back(s[i]);
    }
  }
  return r;
}

// HTTP status -> gRPC code when a response carries no grpc-status (the gRPC spec's table).
absl::StatusCode httpToGrpc(int http) {
  switch (http) {
    case 400:
      return absl::StatusCode::kInternal;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kUnimplemented;
    case 429:
    case 502:
    case 503:
    case 504:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kUnknown;
  }
}

bool parseHostPort(const std::string& address, std::string* host, std::string* port) {
  std::string a = address;
  if (a.rfind("dns:///", 0) == 0) a = a.substr(7);
  if (a.rfind("ipv4:", 0) == 0) a = a.substr(5);
  if (a.rfind("ipv6:", 0) == 0) a = a.substr(5);
  if (!a.empty() && a[0] == '[') {
    const size_t close = a.find(']');
    if (close == std::string::npos || close + 1 >= a.size() || a[close + 1] != ':') return false;
    *host = a.substr(1, close - 1);
    *port = a.substr(close + 2);
    return !port->empty();
  }
  const size_t colon = a.rfind(':');
  if (colon == std::string::npos || colon + 1 >= a.size()) return false;
  *host = a.substr(0, colon);
  *port = a.substr(colon + 1);
  return !host->empty();
}

}  // namespace

absl::Status fromGrpcStatus(int code, const std::string& message) {
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

GrpcEndpoint::Impl::Impl(std::string address_in, int channels, int max_bytes)
    : address(std::move(address_in)), max_message_bytes(max_bytes) {
  lifeline->impl = this;
  if (channels < 1) channels = 1;
  for (int i = 0; i < channels; ++i) conns.push_back(std::make_unique<Conn>());
  epfd = epoll_create1(EPOLL_CLOEXEC);
  wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  IG_CHECK(epfd >= 0 && wakefd >= 0, "gRPC client: cannot create an epoll instance or eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;
  epoll_ctl(epfd, EPOLL_CTL_ADD, wakefd, &ev);
  thread = std::thread([this] {
    pthread_setname_np(pthread_self(), "ig-grpc-client");
    ioLoop();
  });
}

GrpcEndpoint::Impl::~Impl() {
  {
    std::lock_guard<std::mutex> lock(lifeline->mu);  // waits for a canceller running
    lifeline->impl = nullptr;
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    stopping = true;
  }
  wake();
  thread.join();
  // Posted work still runs (its calls fail at once: stopping), so that every done runs.
  for (auto& t : posted) t();
  posted.clear();
  // Whatever is left fails (the owner waits for its calls first: this is a safety net).
  std::vector<Call*> left;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& k : conns) closeConnLocked(*k, "gRPC client shut down", left);
  }
  runDone(left);
  close(epfd);
  close(wakefd);
}

GrpcEndpoint::GrpcEndpoint(std::string address, int channels, int max_message_bytes)
    : impl_(std::make_unique<Impl>(std::move(address), channels, max_message_bytes)) {}

GrpcEndpoint::~GrpcEndpoint() = default;

const std::string& GrpcEndpoint::address() const { return impl_->address; }

bool GrpcEndpoint::reachable() { return impl_->reachable(); }

void GrpcEndpoint::post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->posted.push_back(std::move(fn));
  }
  impl_->wake();
}

void GrpcEndpoint::Impl::wake() {
  uint64_t one = 1;
  ssize_t n = ::write(wakefd, &one, sizeof one);
  (void)n;
}

void GrpcEndpoint::call(const char* method, const wire::ModelInferEncoding& request,
                        uint64_t timeout_ms, std::function<void(GrpcResult)> done,
                        std::shared_ptr<net::CancelToken> cancel) {
  Call* c = new Call;
  c->done = std::move(done);
  c->pieces.reserve(request.pieces.size() + 1);
  c->pieces.emplace_back(c->prefix, sizeof c->prefix);
  // Views of existing memory: `request` and the tensor memory outlive the call (the caller's
  // contract); the bytes are copied once, into the connection's output buffer.
  for (const wire::ModelInferEncoding::Piece& p : request.pieces) {
    const char* data =
        p.external ? reinterpret_cast<const char*>(p.data) : request.meta.data() + p.offset;
    c->pieces.emplace_back(data, p.size);
  }
  impl_->start(c, method, timeout_ms, std::move(cancel));
}

void GrpcEndpoint::call(const char* method, std::string request, uint64_t timeout_ms,
                        std::function<void(GrpcResult)> done,
                        std::shared_ptr<net::CancelToken> cancel) {
  Call* c = new Call;
  c->owned = std::move(request);
  c->done = std::move(done);
  c->pieces.emplace_back(c->prefix, sizeof c->prefix);
  c->pieces.emplace_back(c->owned);
  impl_->start(c, method, timeout_ms, std::move(cancel));
}

GrpcResult GrpcEndpoint::callSync(const char* method, std::string request, uint64_t timeout_ms) {
  std::promise<GrpcResult> p;
  std::future<GrpcResult> f = p.get_future();
  call(method, std::move(request), timeout_ms, [&p](GrpcResult r) { p.set_value(std::move(r)); });
  return f.get();
}

void GrpcEndpoint::Impl::start(Call* c, const char* method, uint64_t timeout_ms,
                               std::shared_ptr<net::CancelToken> cancel) {
  c->method = method;
  c->timeout_ms = timeout_ms;
  size_t len = 0;
  for (size_t i = 1; i < c->pieces.size(); ++i) len += c->pieces[i].size();
  c->prefix[0] = 0;
  const uint32_t n = static_cast<uint32_t>(len);
  c->prefix[1] = static_cast<char>(n >> 24);
  c->prefix[2] = static_cast<char>(n >> 16);
  c->prefix[3] = static_cast<char>(n >> 8);
  c->prefix[4] = static_cast<char>(n);
  const uint64_t now = common::monotonicNs();
  std::vector<Call*> fin;
  bool need_wake = false;
  uint64_t cancel_id = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (cancel != nullptr && cancel->cancelled()) {
      c->result.status = absl::CancelledError("Cancelled before it was sent");
      fin.push_back(c);
    } else if (stopping) {
      c->result.status = absl::UnavailableError("gRPC client shut down");
      c->result.not_sent = true;
      fin.push_back(c);
    } else if (len > static_cast<size_t>(max_message_bytes)) {
      c->result.status = absl::ResourceExhaustedError(
          fmt::format("Sent message larger than max ({} vs. {})", len, max_message_bytes));
      c->result.not_sent = true;
      fin.push_back(c);
    } else {
      if (timeout_ms > 0) {
        c->deadline_ns = now + timeout_ms * 1'000'000;
        c->deadline_it = deadlines.emplace(c->deadline_ns, c);
        if (c->deadline_ns < next_wake_ns) need_wake = true;
      }
      // Round robin over the connections, preferring one that is ready.
      const size_t n_conns = conns.size();
      const size_t first = next++ % n_conns;
      Conn* pick = nullptr;
      for (size_t i = 0; i < n_conns && pick == nullptr; ++i) {
        Conn& k = *conns[(first + i) % n_conns];
        if (k.state == Conn::State::kReady && !k.draining) pick = &k;
      }
      // Else wait for one being set up, or one draining after GOAWAY (reconnected when empty).
      for (size_t i = 0; i < n_conns && pick == nullptr; ++i) {
        Conn& k = *conns[(first + i) % n_conns];
        if (k.state == Conn::State::kConnecting || k.state == Conn::State::kReady) pick = &k;
      }
      for (size_t i = 0; i < n_conns && pick == nullptr; ++i) {
        Conn& k = *conns[(first + i) % n_conns];
        if (k.state == Conn::State::kIdle ||
            (k.state == Conn::State::kFailure && now >= k.retry_at_ns)) {
          pick = &k;
          k.state = Conn::State::kConnecting;
          k.connect_wanted = true;
          need_wake = true;
        }
      }
      if (pick == nullptr) {
        // Every connection failed recently: fail fast, as gRPC does in TRANSIENT_FAILURE.
        removeDeadlineLocked(c);
        c->result.status = absl::UnavailableError(fmt::format(
            "failed to connect to all addresses; last error: {}", conns[first]->last_error));
        c->result.not_sent = true;
        fin.push_back(c);
      } else {
        if (cancel != nullptr) {
          // Before submitting: a submit that fails finishes the call, which forgets the id.
          cancel_id = c->cancel_id = next_cancel_id++;
          cancellable.emplace(cancel_id, c);
        }
        if (pick->state == Conn::State::kReady && !pick->draining) {
          submitLocked(*pick, c, fin);
          flushLocked(*pick, fin);
        } else {
          c->conn = pick;
          pick->waiting.push_back(c);
        }
      }
    }
  }
  if (need_wake) wake();
  runDone(fin);
  // Registered unlocked: a token already cancelled runs the canceller here, which takes `mu`.
  // If the call has ended meanwhile its id is gone and the cancel is a no-op.
  if (cancel_id != 0) {
    cancel->onCancel([life = lifeline, cancel_id]() noexcept {
      try {  // runs in a client's close path: out of memory leaves the call to finish
        std::lock_guard<std::mutex> lock(life->mu);
        if (life->impl != nullptr) life->impl->requestCancel(cancel_id);
      } catch (...) {
      }
    });
  }
}

void GrpcEndpoint::Impl::requestCancel(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (cancellable.find(id) == cancellable.end()) return;  // ended already
    cancel_requests.push_back(id);
  }
  wake();
}

void GrpcEndpoint::Impl::cancelLocked(uint64_t id, std::vector<Call*>& fin) {
  auto it = cancellable.find(id);
  if (it == cancellable.end()) return;
  abortLocked(it->second, absl::CancelledError("Cancelled: every client of the call went away"),
              fin);
}

void GrpcEndpoint::Impl::abortLocked(Call* c, absl::Status status, std::vector<Call*>& fin) {
  Conn* k = c->conn;
  if (k != nullptr && k->session != nullptr && c->stream_id > 0) {
    nghttp2_session_set_stream_user_data(k->session, c->stream_id, nullptr);
    nghttp2_submit_rst_stream(k->session, NGHTTP2_FLAG_NONE, c->stream_id, NGHTTP2_CANCEL);
  } else if (k != nullptr) {
    k->waiting.erase(std::remove(k->waiting.begin(), k->waiting.end(), c), k->waiting.end());
  }
  c->result = GrpcResult{};
  c->result.status = std::move(status);
  finishLocked(c, fin);
  if (k != nullptr) flushLocked(*k, fin);
}

void GrpcEndpoint::Impl::removeDeadlineLocked(Call* c) {
  if (c->deadline_ns != 0) {
    deadlines.erase(c->deadline_it);
    c->deadline_ns = 0;
  }
}

void GrpcEndpoint::Impl::finishLocked(Call* c, std::vector<Call*>& fin) {
  removeDeadlineLocked(c);
  if (c->cancel_id != 0) {
    cancellable.erase(c->cancel_id);
    c->cancel_id = 0;
  }
  if (c->conn != nullptr) c->conn->calls.erase(c);
  c->conn = nullptr;
  fin.push_back(c);
}

void GrpcEndpoint::Impl::runDone(std::vector<Call*>& fin) {
  for (Call* c : fin) {
    std::function<void(GrpcResult)> done = std::move(c->done);
    GrpcResult r = std::move(c->result);
    delete c;
    done(std::move(r));
  }
  fin.clear();
}

// nghttp2 callbacks ------------------------------------------------------------------------------

ssize_t GrpcEndpoint::Impl::readRequest(nghttp2_session*, int32_t, uint8_t* buf, size_t length,
                                        uint32_t* data_flags, nghttp2_data_source* source, void*) {
  Call* c = static_cast<Call*>(source->ptr);
  size_t n = 0;
  while (n < length && c->piece < c->pieces.size()) {
    std::string_view p = c->pieces[c->piece];
    const size_t take = std::min(length - n, p.size() - c->piece_off);
    std::memcpy(buf + n, p.data() + c->piece_off, take);
    n += take;
    c->piece_off += take;
    if (c->piece_off == p.size()) {
      ++c->piece;
      c->piece_off = 0;
    }
  }
  if (c->piece == c->pieces.size()) *data_flags |= NGHTTP2_DATA_FLAG_EOF;
  return static_cast<ssize_t>(n);
}

namespace {

Call* streamCall(nghttp2_session* s, int32_t id) {
  return static_cast<Call*>(nghttp2_session_get_stream_user_data(s, id));
}

}  // namespace

int GrpcEndpoint::Impl::onHeader(nghttp2_session* s, const nghttp2_frame* frame,
                                 const uint8_t* name, size_t namelen, const uint8_t* value,
                                 size_t valuelen, uint8_t, void*) {
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  Call* c = streamCall(s, frame->hd.stream_id);
  if (c == nullptr) return 0;
  std::string_view n(reinterpret_cast<const char*>(name), namelen);
  std::string_view v(reinterpret_cast<const char*>(value), valuelen);
  if (n == ":status") {
    // nghttp2 checks it is three digits; bounded here all the same (no overflow).
    int st = 0;
    for (char ch : v.substr(0, 3)) st = ch >= '0' && ch <= '9' ? st * 10 + (ch - '0') : st;
    c->http_status = st;
  } else if (n == "grpc-status") {
    // Untrusted: 1 to 3 decimal digits (the codes are 0..16), anything else is UNKNOWN (as gRPC
    // core does); no overflow, and never OK by accident ("OK", "", "0x0").
    int st = v.empty() || v.size() > 3 ? -1 : 0;
    for (char ch : v) st = st >= 0 && ch >= '0' && ch <= '9' ? st * 10 + (ch - '0') : -1;
    c->grpc_status = st >= 0 ? st : static_cast<int>(absl::StatusCode::kUnknown);
  } else if (n == "grpc-message") {
    c->grpc_message = percentDecode(v);
  }
  return 0;
}

int GrpcEndpoint::Impl::onData(nghttp2_session* s, uint8_t, int32_t id, const uint8_t* data,
                               size_t len, void* user) {
  Call* c = streamCall(s, id);
  if (c == nullptr || c->too_large) return 0;
  auto* ep = static_cast<Impl*>(user);
  if (c->data->size() + len > static_cast<size_t>(ep->max_message_bytes) + 5) {
    c->too_large = true;
    nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
    return 0;
  }
  const size_t had = c->data->size();
  c->data->append(reinterpret_cast<const char*>(data), len);
  if (had < 5 && c->data->size() >= 5) {
    // The message length is known: one allocation for the whole message, not a doubling
    // series of copies (large tensors).
    const auto* d = reinterpret_cast<const uint8_t*>(c->data->data());
    const size_t msg = (size_t{d[1]} << 24) | (size_t{d[2]} << 16) | (size_t{d[3]} << 8) | d[4];
    if (msg <= static_cast<size_t>(ep->max_message_bytes)) c->data->reserve(5 + msg);
  }
  return 0;
}

int GrpcEndpoint::Impl::onFrameSend(nghttp2_session* s, const nghttp2_frame* frame, void*) {
  if (frame->hd.type == NGHTTP2_HEADERS) {
    if (Call* c = streamCall(s, frame->hd.stream_id)) c->headers_sent = true;
  }
  return 0;
}

int GrpcEndpoint::Impl::onFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  if (frame->hd.type == NGHTTP2_GOAWAY) {
    auto* ep = static_cast<Impl*>(user);
    if (ep->current != nullptr) ep->current->draining = true;
  }
  return 0;
}

int GrpcEndpoint::Impl::onStreamClose(nghttp2_session* s, int32_t id, uint32_t error_code,
                                      void* user) {
  Call* c = streamCall(s, id);
  if (c == nullptr) return 0;
  nghttp2_session_set_stream_user_data(s, id, nullptr);
  auto* ep = static_cast<Impl*>(user);
  GrpcResult& r = c->result;
  if (c->too_large) {
    r.status = absl::ResourceExhaustedError(fmt::format(
        "Received message larger than max ({} vs. {})", c->data->size(), ep->max_message_bytes));
  } else if (c->grpc_status >= 0) {
    if (c->grpc_status != 0) {
      r.status = fromGrpcStatus(c->grpc_status, c->grpc_message);
    } else if (c->data->size() < 5) {
      r.status = absl::InternalError("No message returned for unary request");
    } else if ((*c->data)[0] != 0) {
      r.status = absl::InternalError("compressed responses are not supported");
    } else {
      const auto* d = reinterpret_cast<const uint8_t*>(c->data->data());
      const size_t msg = (size_t{d[1]} << 24) | (size_t{d[2]} << 16) | (size_t{d[3]} << 8) | d[4];
      if (msg != c->data->size() - 5) {
        r.status = absl::InternalError(fmt::format(
            "malformed response: a {}-byte message in {} bytes", msg, c->data->size() - 5));
      } else {
        r.body = std::string_view(c->data->data() + 5, msg);
        r.owner = std::move(c->data);
      }
    }
  } else if (error_code == NGHTTP2_REFUSED_STREAM) {
    r.status = absl::UnavailableError("stream refused by the server (GOAWAY)");
    r.not_sent = true;
  } else if (error_code != NGHTTP2_NO_ERROR) {
    r.status = absl::UnavailableError(
        fmt::format("stream reset by the server: {}", nghttp2_http2_strerror(error_code)));
  } else if (c->http_status != 0 && c->http_status != 200) {
    r.status = absl::Status(httpToGrpc(c->http_status),
                            fmt::format("Received http2 :status {}", c->http_status));
  } else {
    r.status = absl::InternalError("the server's response carries no grpc-status");
  }
  ep->finishLocked(c, *ep->cb_fin);
  return 0;
}

void GrpcEndpoint::Impl::submitLocked(Conn& k, Call* c, std::vector<Call*>& fin) {
  c->conn = &k;
  std::string timeout;
  if (c->deadline_ns != 0) {
    const uint64_t now = common::monotonicNs();
    const uint64_t left_ms =
        c->deadline_ns > now ? std::max<uint64_t>((c->deadline_ns - now) / 1'000'000, 1) : 1;
    timeout = fmt::format("{}m", left_ms);
  }
  auto nv = [](const char* n, std::string_view v) {
    return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(n)),
                      reinterpret_cast<uint8_t*>(const_cast<char*>(v.data())), std::strlen(n),
                      v.size(), NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE};
  };
  nghttp2_nv hdrs[8] = {nv(":method", "POST"),
                        nv(":scheme", "http"),
                        nv(":path", c->method),
                        nv(":authority", address),
                        nv("content-type", "application/grpc"),
                        nv("te", "trailers"),
                        nv("user-agent", "infergate"),
                        nv("grpc-timeout", timeout)};
  const size_t nhdrs = timeout.empty() ? 7 : 8;
  // NO_COPY: nghttp2 keeps pointers until the HEADERS frame is written; the path is static,
  // the address is ours, the literals are static. The timeout string is not: copied.
  hdrs[7].flags = NGHTTP2_NV_FLAG_NONE;
  nghttp2_data_provider prd;
  prd.source.ptr = c;
  prd.read_callback = &GrpcEndpoint::Impl::readRequest;
  const int32_t id = nghttp2_submit_request(k.session, nullptr, hdrs, nhdrs, &prd, c);
  if (id < 0) {
    c->result.status =
        absl::UnavailableError(fmt::format("cannot start a stream: {}", nghttp2_strerror(id)));
    c->result.not_sent = true;
    finishLocked(c, fin);  // not in k.calls yet: only forgets the deadline and cancel id
    return;
  }
  c->stream_id = id;
  k.calls.insert(c);
}

void GrpcEndpoint::Impl::flushLocked(Conn& k, std::vector<Call*>& fin) {
  if (k.session == nullptr) return;
  for (;;) {
    while (k.out.size() - k.out_off < kSendChunk) {
      const uint8_t* p = nullptr;
      current = &k;
      this->cb_fin = &fin;
      const ssize_t n = nghttp2_session_mem_send(k.session, &p);
      if (n < 0) {
        closeConnLocked(k, fmt::format("HTTP/2 error: {}", nghttp2_strerror(static_cast<int>(n))),
                        fin);
        return;
      }
      if (n == 0) break;
      if (k.out_off > 0 && k.out_off == k.out.size()) {
        k.out.clear();
        k.out_off = 0;
      }
      k.out.append(reinterpret_cast<const char*>(p), static_cast<size_t>(n));
    }
    if (k.out_off == k.out.size()) break;
    const ssize_t w = ::send(k.fd, k.out.data() + k.out_off, k.out.size() - k.out_off,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      closeConnLocked(k, fmt::format("write: {}", std::strerror(errno)), fin);
      return;
    }
    k.out_off += static_cast<size_t>(w);
    if (k.out_off == k.out.size()) {
      k.out.clear();
      k.out_off = 0;
    }
  }
  const bool pending = k.out_off < k.out.size();
  if (pending != k.want_write) {
    k.want_write = pending;
    epoll_event ev{};
    ev.events = EPOLLIN | (pending ? EPOLLOUT : 0u);
    ev.data.ptr = &k;
    epoll_ctl(epfd, EPOLL_CTL_MOD, k.fd, &ev);
  }
  if (k.draining && k.calls.empty()) {
    closeConnLocked(k, "", fin);
  } else if (!nghttp2_session_want_read(k.session) && !nghttp2_session_want_write(k.session)) {
    // nghttp2 ended the session (a connection error from the server's bytes: it sent GOAWAY
    // and reads nothing more): drop the connection, or its calls and the channel would wait
    // forever on a peer that keeps it open.
    closeConnLocked(k, "HTTP/2 session ended by a protocol error from the server", fin);
  }
}

// Connections ------------------------------------------------------------------------------------

GrpcEndpoint::Impl::Resolved GrpcEndpoint::Impl::resolve() const {
  Resolved r;
  std::string host, port;
  if (!parseHostPort(address, &host, &port)) {
    r.error = fmt::format("cannot parse the address '{}' (host:port)", address);
    return r;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    r.error = fmt::format("DNS resolution failed for {}: {}", address, gai_strerror(rc));
    return r;
  }
  r.family = res->ai_family;
  std::memcpy(&r.addr, res->ai_addr, std::min<size_t>(res->ai_addrlen, sizeof r.addr));
  r.len = res->ai_addrlen;
  freeaddrinfo(res);
  return r;
}

void GrpcEndpoint::Impl::connectLocked(Conn& k, const Resolved& to, std::vector<Call*>& fin) {
  k.connect_wanted = false;
  std::string err = to.error;
  int fd = -1;
  if (err.empty()) {
    fd = socket(to.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      err = fmt::format("socket: {}", std::strerror(errno));
    } else if (::connect(fd, reinterpret_cast<const sockaddr*>(&to.addr), to.len) < 0 &&
               errno != EINPROGRESS) {
      err = fmt::format("failed to connect to {}: {}", address, std::strerror(errno));
      close(fd);
      fd = -1;
    }
  }
  if (fd < 0) {
    connectFailedLocked(k, err, fin);
    return;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // Dead peers are found as gRPC's keep-alive (10 s / 5 s) would find them.
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  const int idle = 10, intvl = 5, cnt = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  k.fd = fd;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT;
  ev.data.ptr = &k;
  epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
  k.want_write = true;
}

void GrpcEndpoint::Impl::connectFailedLocked(Conn& k, const std::string& err,
                                             std::vector<Call*>& fin) {
  if (k.fd >= 0) {
    epoll_ctl(epfd, EPOLL_CTL_DEL, k.fd, nullptr);
    close(k.fd);
    k.fd = -1;
  }
  k.state = Conn::State::kFailure;
  k.last_error = err;
  k.retry_at_ns = common::monotonicNs() + k.backoff_ms * 1'000'000;
  k.backoff_ms = std::min(k.backoff_ms * 2, kMaxBackoffMs);
  failWaitingLocked(k, fmt::format("failed to connect to all addresses; last error: {}", err), fin);
}

void GrpcEndpoint::Impl::failWaitingLocked(Conn& k, const std::string& msg,
                                           std::vector<Call*>& fin) {
  for (Call* c : k.waiting) {
    c->result.status = absl::UnavailableError(msg);
    c->result.not_sent = true;
    finishLocked(c, fin);
  }
  k.waiting.clear();
}

void GrpcEndpoint::Impl::connectedLocked(Conn& k, std::vector<Call*>& fin) {
  nghttp2_session_callbacks* cbs = nullptr;
  nghttp2_session_callbacks_new(&cbs);
  // The callbacks that allocate run guarded: an exception (an allocation failure) must not
  // unwind through nghttp2's C frames. It becomes NGHTTP2_ERR_CALLBACK_FAILURE, which ends the
  // session; readLocked then closes the connection and fails its calls UNAVAILABLE.
  nghttp2_session_callbacks_set_on_header_callback(
      cbs, [](nghttp2_session* s, const nghttp2_frame* f, const uint8_t* n, size_t nl,
              const uint8_t* v, size_t vl, uint8_t fl, void* u) {
        return guarded([&] { return Impl::onHeader(s, f, n, nl, v, vl, fl, u); });
      });
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
      cbs, [](nghttp2_session* s, uint8_t fl, int32_t id, const uint8_t* d, size_t len, void* u) {
        return guarded([&] { return Impl::onData(s, fl, id, d, len, u); });
      });
  nghttp2_session_callbacks_set_on_stream_close_callback(
      cbs, [](nghttp2_session* s, int32_t id, uint32_t code, void* u) {
        return guarded([&] { return Impl::onStreamClose(s, id, code, u); });
      });
  nghttp2_session_callbacks_set_on_frame_send_callback(cbs, &GrpcEndpoint::Impl::onFrameSend);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, &GrpcEndpoint::Impl::onFrameRecv);
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  nghttp2_option_set_no_auto_window_update(opt, 0);
  nghttp2_session_client_new2(&k.session, cbs, this, opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cbs);
  const nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                                             {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, kWindow}};
  nghttp2_submit_settings(k.session, NGHTTP2_FLAG_NONE, settings, 2);
  nghttp2_session_set_local_window_size(k.session, NGHTTP2_FLAG_NONE, 0, kWindow);
  k.state = Conn::State::kReady;
  k.backoff_ms = kInitialBackoffMs;
  k.last_error.clear();
  std::vector<Call*> waiting = std::move(k.waiting);
  k.waiting.clear();
  for (Call* c : waiting) submitLocked(k, c, fin);
}

void GrpcEndpoint::Impl::closeConnLocked(Conn& k, const std::string& why, std::vector<Call*>& fin) {
  const std::string msg = why.empty() ? std::string("connection closed") : why;
  for (Call* c : std::vector<Call*>(k.calls.begin(), k.calls.end())) {
    if (k.session != nullptr && c->stream_id > 0) {
      nghttp2_session_set_stream_user_data(k.session, c->stream_id, nullptr);
    }
    c->result = GrpcResult{};
    c->result.status = absl::UnavailableError(msg);
    c->result.not_sent = !c->headers_sent;
    finishLocked(c, fin);
  }
  k.calls.clear();
  if (k.session != nullptr) {
    nghttp2_session_del(k.session);
    k.session = nullptr;
  }
  if (k.fd >= 0) {
    epoll_ctl(epfd, EPOLL_CTL_DEL, k.fd, nullptr);
    close(k.fd);
    k.fd = -1;
  }
  k.out.clear();
  k.out_off = 0;
  k.want_write = false;
  k.draining = false;
  k.state = Conn::State::kIdle;
  if (!k.waiting.empty() && !stopping) {
    // Calls queued behind a draining connection: a fresh one.
    k.state = Conn::State::kConnecting;
    k.connect_wanted = true;
    wake();
  } else {
    failWaitingLocked(k, msg, fin);
  }
}

void GrpcEndpoint::Impl::readLocked(Conn& k, std::vector<Call*>& fin) {
  char buf[64 << 10];
  for (;;) {
    const ssize_t n = ::recv(k.fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      current = &k;
      this->cb_fin = &fin;
      const ssize_t used =
          nghttp2_session_mem_recv(k.session, reinterpret_cast<const uint8_t*>(buf), n);
      if (used < 0) {
        closeConnLocked(
            k, fmt::format("HTTP/2 error: {}", nghttp2_strerror(static_cast<int>(used))), fin);
        return;
      }
      if (static_cast<size_t>(n) < sizeof buf) break;
      continue;
    }
    if (n == 0) {
      closeConnLocked(k, "Socket closed", fin);
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    closeConnLocked(k, fmt::format("Connection reset: {}", std::strerror(errno)), fin);
    return;
  }
  flushLocked(k, fin);
}

void GrpcEndpoint::Impl::ioLoop() {
  epoll_event evs[16];
  std::vector<Call*> fin;
  for (;;) {
    int timeout_ms = 0;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (stopping) return;
      const uint64_t now = common::monotonicNs();
      uint64_t wake_at = now + kIdleTickNs;
      if (!deadlines.empty()) wake_at = std::min(wake_at, deadlines.begin()->first);
      next_wake_ns = wake_at;
      timeout_ms = wake_at > now ? static_cast<int>((wake_at - now + 999'999) / 1'000'000) : 0;
    }
    const int n = epoll_wait(epfd, evs, 16, timeout_ms);
    {
      std::unique_lock<std::mutex> lock(mu);
      next_wake_ns = 0;  // awake: call() need not wake us
      if (stopping) return;
      for (int i = 0; i < n; ++i) {
        if (evs[i].data.ptr == nullptr) {
          uint64_t v;
          ssize_t r = ::read(wakefd, &v, sizeof v);
          (void)r;
          continue;
        }
        Conn& k = *static_cast<Conn*>(evs[i].data.ptr);
        if (k.fd < 0) continue;
        if (k.state == Conn::State::kConnecting) {
          int err = 0;
          socklen_t len = sizeof err;
          getsockopt(k.fd, SOL_SOCKET, SO_ERROR, &err, &len);
          if (err != 0 || (evs[i].events & (EPOLLERR | EPOLLHUP))) {
            connectFailedLocked(k,
                                fmt::format("failed to connect to {}: {}", address,
                                            std::strerror(err != 0 ? err : ECONNREFUSED)),
                                fin);
            continue;
          }
          if (!(evs[i].events & EPOLLOUT)) continue;
          connectedLocked(k, fin);
          flushLocked(k, fin);
          continue;
        }
        if (k.state != Conn::State::kReady) continue;
        if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
          readLocked(k, fin);
        } else if (evs[i].events & EPOLLOUT) {
          flushLocked(k, fin);
        }
      }
      bool want = false;
      for (auto& k : conns) want = want || k->connect_wanted;
      if (want) {
        // Resolve without the lock (call() must never wait on a DNS server), then connect.
        lock.unlock();
        const Resolved to = resolve();
        lock.lock();
        for (auto& k : conns) {
          if (k->connect_wanted) connectLocked(*k, to, fin);
        }
      }
      // Expired deadlines: the stream is cancelled at the server.
      const uint64_t now = common::monotonicNs();
      while (!deadlines.empty() && deadlines.begin()->first <= now) {
        abortLocked(deadlines.begin()->second, absl::DeadlineExceededError("Deadline Exceeded"),
                    fin);
      }
      // Cancelled calls (requestCancel): RST_STREAM CANCEL, answered CANCELLED.
      std::vector<uint64_t> cancels;
      cancels.swap(cancel_requests);
      for (uint64_t id : cancels) cancelLocked(id, fin);
    }
    runDone(fin);
    std::vector<std::function<void()>> tasks;
    {
      std::lock_guard<std::mutex> lock(mu);
      tasks.swap(posted);
    }
    for (auto& t : tasks) t();
  }
}

bool GrpcEndpoint::Impl::reachable() {
  bool any = false;
  bool need_wake = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    const uint64_t now = common::monotonicNs();
    for (auto& k : conns) {
      if (k->state == Conn::State::kIdle ||
          (k->state == Conn::State::kFailure && now >= k->retry_at_ns)) {
        k->state = Conn::State::kConnecting;
        k->connect_wanted = true;
        need_wake = true;
      }
      if (k->state != Conn::State::kFailure) any = true;
    }
  }
  if (need_wake) wake();
  return any;
}

}  // namespace infergate::backends
