#pragma once
// Remote backends: the settings of a model served by Triton (any KServe v2 gRPC server) or TF
// Serving, and the endpoint pool every remote adapter runs on. docs/BACKENDS.md has the rules.
//
// Pool: a BatchBackend over several endpoints of one model. Each batch goes to one endpoint,
// chosen by power-of-two-choices on load among the healthy endpoints below their concurrency
// limit (batches wait in a FIFO when every healthy endpoint is at its limit). Load is our
// outstanding batches at the endpoint, plus, when the endpoint has a metrics URL and a fresh
// reading (at most 3 metrics intervals old), the server's own queue depth
// (nv_inference_pending_request_count for the model, scraped by the pool's metrics thread).
// Ties are broken at random. Scrape failures are counted and logged; they never change health.
// Health: an active probe per endpoint every health_check_interval_ms (the protocol client's
// probe(): ServerReady + ModelReady for Triton), plus passive ejection after
// eject_after_failures consecutive failed batches, for ejection_ms, after which a passing probe
// re-admits the endpoint. Failures: a batch that never left (no connection to the endpoint) is
// retried on another endpoint; a batch that was sent and failed is answered, for each of its
// requests, UNAVAILABLE naming the endpoint (never retried: the server may have run it); no
// healthy endpoint -> UNAVAILABLE at once. Deadlines: when every request of a batch has one,
// the call's deadline is the latest of them (and request_timeout_ms at most).
//
// Endpoint set at run time: setEndpoints() (configuration reload) and `dns:///name:port` entries
// (re-resolved by the pool's resolver thread, backends/dns_resolver.h) change it. A new endpoint
// is probed at once and takes batches after its first passing probe; a removed one is drained:
// no new batches (except those of sequences bound to it, and all of them while no endpoint of
// the new set is healthy yet: a set that replaces every endpoint fails nothing), its in-flight
// batches complete, then the health thread closes it (EndpointClient::shutdown, destroyed).
// Sequences (Triton's sequence batcher): a batch whose request carries a sequence id (it is a
// batch of one: the batcher never merges it) goes to the endpoint the sequence is bound to. The
// binding is made by the sequence_start request (picked as any batch), removed by sequence_end,
// expires after sequence_idle_timeout_ms without a request, and at most sequence_max exist
// (a start beyond that: RESOURCE_EXHAUSTED, counted). When the bound endpoint fails (a failed
// batch, unhealthy, ejected, removed), the sequence's next request gets FAILED_PRECONDITION
// naming the endpoint and why, and the binding is dropped: a sequence is never moved.
//
// Threading: execute() from the batcher's dispatcher; completions on gRPC threads; one health
// thread per pool, and one metrics thread when an endpoint has a metrics URL (scrapes have their
// own cadence and must not delay probes, nor a hung probe age the readings), one resolver thread
// when an endpoint entry is dns:///. State is behind one mutex per pool, taken a few times per
// batch; scrapes, probes and resolutions run without it.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "backends/batched_model.h"
#include "backends/queue_metrics.h"

namespace infergate::common {
class MetricsRegistry;
class Counter;
class Gauge;
class Histogram;
}  // namespace infergate::common

namespace infergate::backends {

enum class SharedMemoryKind : uint8_t { kNone, kSystem, kCuda };

// models[].triton / models[].tfserving.
struct RemoteBackendConfig {
  // host:port or dns:///name:port, at least one. As configured: the pool's set changes at run
  // time (setEndpoints, DNS), so a built model's config() has this (and metrics_urls) empty
  // and Pool::endpoints() is the current set.
  std::vector<std::string> endpoints;
  std::string model_name;     // the model's name at the backend; empty: models[].name
  std::string model_version;  // empty: the backend's default (TF Serving: latest)
  std::string signature_name = "serving_default";  // TF Serving only
  uint32_t max_concurrency = 4;                    // batches in flight per endpoint
  uint32_t channels = 2;                           // gRPC channels (connections) per endpoint
  uint64_t health_check_interval_ms = 1000;
  uint64_t health_check_timeout_ms = 1000;
  uint64_t request_timeout_ms = 30000;  // per batch at the backend; 0 = none
  uint64_t startup_timeout_ms = 10000;  // start-up waits this long for a ready endpoint
  uint32_t eject_after_failures = 3;    // consecutive failed batches (0 = never eject)
  uint64_t ejection_ms = 5000;
  SharedMemoryKind shared_memory = SharedMemoryKind::kNone;  // Triton only
  uint32_t cuda_device = 0;       // shared_memory: cuda: the GPU holding the regions
  bool validate_metadata = true;  // compare the backend's metadata with inputs/outputs
                                  // (Triton: ModelMetadata; TF Serving: signature_def)
  uint64_t max_message_bytes = 256ull << 20;
  // Queue-depth aware picking (Triton): the Prometheus metrics URL of each endpoint, parallel to
  // `endpoints` (shorter, or an empty string: no metrics for that endpoint), and how often
  // each is scraped (a scrape has that long, at most health_check_timeout_ms, to finish).
  std::vector<std::string> metrics_urls;
  uint64_t metrics_interval_ms = 500;
  // dns:/// entries: re-resolved every dns_refresh_ms (sooner when the records' TTL is shorter,
  // not below dns_min_refresh_ms; after a failed resolution, every dns_min_refresh_ms until
  // one succeeds). dns_server: "ip:port" queried instead of /etc/resolv.conf's (tests).
  // dns_max_endpoints: addresses kept per entry (sorted, the rest ignored and counted); it also
  // sizes the batcher's in-flight limit for the entry (config.cc).
  uint64_t dns_refresh_ms = 5000;
  uint64_t dns_min_refresh_ms = 500;
  uint64_t dns_timeout_ms = 2000;
  std::string dns_server;
  uint32_t dns_max_endpoints = 8;
  // Sequence affinity (see Pool). sequence_id_header: an HTTP header (lower case) whose value is
  // a REST request's sequence id (a string id) when its body has no sequence_id parameter.
  std::string sequence_id_header;
  uint64_t sequence_idle_timeout_ms = 60000;
  uint32_t sequence_max = 65536;
  // Bindings one client (SequenceParams::owner: a tenant, else a source address) may hold, so
  // one client cannot fill the table for everyone; a start beyond is 429. 0: no per-client bound.
  uint32_t sequence_max_per_client = 4096;
};

std::string_view sharedMemoryKindName(SharedMemoryKind k);  // "none" | "system" | "cuda"

// Per-call settings the pool computes for a batch.
struct SendOptions {
  uint64_t timeout_ms = 0;  // gRPC deadline; 0 = none
  int64_t priority = 0;     // KServe priority to forward (0: none)
  uint64_t timeout_us = 0;  // KServe timeout parameter to forward (0: none)
};

// The protocol side of one endpoint (Triton or TF Serving over gRPC, or a fake in tests).
class EndpointClient {
 public:
  virtual ~EndpointClient() = default;
  virtual const std::string& address() const = 0;
  // Blocking probe from the health thread: OK when the server and the model are ready. `fresh`:
  // the endpoint was not healthy before (start-up, after a failure or ejection): redo
  // per-endpoint set-up (metadata validation, shared memory registration). A client may also
  // redo set-up on its own when it finds it missing (e.g. a region unknown after a restart).
  virtual absl::Status probe(bool fresh) = 0;
  // Sends `batch`; `done(outputs, not_sent)` exactly once from any thread. `not_sent`: the
  // request never reached the endpoint (safe to retry elsewhere). Outputs are views valid until
  // `done` returns.
  using SendDone = std::function<void(BatchOutputs, bool not_sent)>;
  virtual void send(const Batch& batch, const SendOptions& options, SendDone done) = 0;
  // Pool shutting down or the endpoint removed, nothing in flight: undo set-up (unregister
  // shared memory).
  virtual void shutdown() {}
  // Before start(): the batcher's input buffers that live in shared memory (Pool::prepare).
  virtual void attachBuffers(const std::vector<SharedBuffer>& buffers) { (void)buffers; }
};

class DnsResolver;

// Makes the client of an endpoint added at run time (setEndpoints, DNS). Called without the
// pool's lock, from the thread that changes the set.
using ClientFactory = std::function<std::unique_ptr<EndpointClient>(const std::string& address)>;

class Pool : public BatchBackend {
 public:
  enum class State : uint8_t { kUnknown, kHealthy, kUnhealthy, kEjected };
  struct EndpointStatus {
    std::string address;
    State state;
    uint32_t inflight;
    uint64_t batches;
    uint64_t failures;
    std::string reason;      // why not healthy
    int64_t queue_depth;     // the server's fresh queue-depth reading; -1: none (or stale)
    uint64_t scrape_errors;  // failed metrics scrapes
    bool gpu_degraded;       // setEndpointDegraded: picked only when no unmarked one is healthy
    bool draining = false;   // removed from the set: no new batches, closed once idle
    uint32_t sequences = 0;  // sequences bound to it
  };

  // `model`: for messages and metric labels; `kind`: "triton" | "tfserving". `metrics` nullptr:
  // none. `queue_depth`: where each endpoint's queue depth comes from (parallel to `clients`,
  // nullptr entries: none); empty: built from config.metrics_urls (Triton's
  // nv_inference_pending_request_count for config.model_name, or `model` when that is empty,
  // and config.model_version when set).
  Pool(std::string model, std::string kind, RemoteBackendConfig config,
       std::vector<std::unique_ptr<EndpointClient>> clients, common::MetricsRegistry* metrics,
       std::vector<std::unique_ptr<QueueDepthSource>> queue_depth = {});
  ~Pool() override;  // answers queued batches, waits for in-flight ones, stops the health thread

  // Needed for setEndpoints() and dns:/// entries; before start(). `clients` given to the
  // constructor are the initial set (their addresses; a dns:/// entry of config.endpoints has
  // none: the resolver fills it in).
  void setClientFactory(ClientFactory factory);

  // Replaces the configured endpoint list (host:port and dns:///name:port entries, as
  // RemoteBackendConfig::endpoints) at run time; safe from any thread, never blocks on the
  // network (dns entries are resolved by the resolver thread; the first resolution of a new
  // one runs there too). Endpoints no longer in the set are drained (see above); new ones are
  // probed at once. INVALID_ARGUMENT for a malformed entry, FAILED_PRECONDITION without a
  // client factory (nothing changes either way).
  // FAILED_PRECONDITION once retired.
  absl::Status setEndpoints(const std::vector<std::string>& configured) override;
  // What setEndpoints() would answer, changing nothing (reload validates before applying).
  absl::Status checkEndpoints(const std::vector<std::string>& configured) const override;

  // The model left the registry (Model::retire, BatchBackend::retire); never blocks. From now
  // on no endpoint is probed (the health thread stops probing, the metrics and resolver threads
  // exit), and setEndpoints() is refused; endpoints keep their last state so a batch that
  // still arrives (a request admitted before the removal) is served. Once the pool and
  // `upstream_idle()` (nullptr: always true) have been idle for kRetireGraceMs, the health
  // thread closes every endpoint (EndpointClient::shutdown; a batch still in flight completes
  // first), drops the sequence bindings and exits. A batch after that: UNAVAILABLE.
  static constexpr uint64_t kRetireGraceMs = 200;
  void retire(std::function<bool()> upstream_idle) override;
  // retire() has closed every endpoint: each one's shutdown() has returned (tests).
  bool retiredAndClosed() const;

  // Probes every endpoint until one is healthy or startup_timeout_ms passes, then starts the
  // health thread (and the metrics thread when an endpoint has a queue-depth source).
  // `require_ready`: an error naming each endpoint's problem when none became healthy; otherwise
  // the pool starts anyway (batches fail fast until one is ready).
  absl::Status start(bool require_ready);

  void execute(const Batch& batch, BatchDone done) override;
  // Hands `buffers` to every client (EndpointClient::attachBuffers), then start(true) unless
  // started already.
  absl::Status prepare(const std::vector<SharedBuffer>& buffers) override;

  std::vector<EndpointStatus> status() const;
  // GPU health (BatchBackend): the endpoints' addresses, and the mark on those whose GPU process
  // is unhealthy (docs/GPU.md): while some unmarked endpoint is healthy, marked ones are not
  // picked (batches wait for an unmarked one's concurrency slot); when every healthy endpoint is
  // marked, they are picked as before. An unknown address is ignored.
  std::vector<std::string> endpoints() const override;
  void setEndpointDegraded(const std::string& address, bool degraded) override;
  // One health round now, on the calling thread (tests).
  void probeAll();
  // One metrics round now, on the calling thread (tests): scrapes every endpoint that has a
  // queue-depth source.
  void scrapeAll();
  // One housekeeping round now (tests; the health thread does it every round): closes drained
  // endpoints, expires idle sequence bindings. Rounds are serialized: when reap() returns, every
  // endpoint it or a concurrent round erased has been shut down and released (its series have
  // left the registry unless another pool claims them).
  void reap();
  // One resolution of every dns:/// entry now, on the calling thread (tests; start-up).
  void resolveAll();
  size_t sequenceCount() const;
  static std::string_view stateName(State s);

 private:
  struct Endpoint;
  struct Pending {
    const Batch* batch;
    BatchDone done;
    std::vector<uint64_t> tried;  // endpoint ids
    bool triedContains(uint64_t id) const {
      for (uint64_t t : tried) {
        if (t == id) return true;
      }
      return false;
    }
  };
  struct Binding {
    uint64_t endpoint = 0;  // id
    uint64_t last_ns = 0;
    std::string broken;  // non-empty: the endpoint failed; the next request is refused
    std::string owner;   // SequenceParams::owner of its start
  };
  // What a sequence request needs: where to go (0: pick, then bind), or an error.
  struct Affinity {
    std::string key;  // empty: not a sequence
    bool start = false;
    bool end = false;
    std::string owner;
  };
  Affinity affinityOf(const Batch& batch) const;
  std::shared_ptr<Endpoint> makeEndpoint(std::unique_ptr<EndpointClient> client);
  // Makes the effective set static_ + resolved_ (clients outside the lock). set_mu_ held.
  void applySetLocked(std::unique_lock<std::mutex>& set_lock);
  void resolverLoop();
  // retire(): the health thread's loop once retired (waits for idle, closes, returns).
  void retiredLoop(std::unique_lock<std::mutex>& lock);
  void breakBindingsLocked(const Endpoint& e, const std::string& why);
  Endpoint* findLocked(uint64_t id) const;
  // No endpoint of the current set is healthy (and the pool is not retired and closing): the
  // drained ones, still healthy, keep taking batches and stay open until a new one passes its
  // first probe, so a set change that replaces every endpoint fails nothing. Lock held.
  bool useDrainingLocked() const;
  // Picks an endpoint for `p` (nullptr: none eligible); `*all_busy` when healthy endpoints exist
  // but every untried one is at its limit. Lock held.
  Endpoint* pickLocked(const Pending& p, bool* all_busy);
  void dispatch(Pending p);
  void onDone(Endpoint* e, Pending p, uint64_t start_ns, BatchOutputs out, bool not_sent);
  void setStateLocked(Endpoint& e, State s, std::string reason);
  void drainPendingLocked(std::vector<Pending>& ready);
  std::string unavailableMessageLocked() const;
  void healthLoop();
  void probeOne(Endpoint& e);
  void metricsLoop();
  void scrapeOne(Endpoint& e);
  // Our in-flight batches at `e` plus the server's queue depth when the reading is fresh at
  // `now_ns`. Lock held.
  uint64_t loadLocked(const Endpoint& e, uint64_t now_ns) const;
  bool freshLocked(const Endpoint& e, uint64_t now_ns) const;

  std::string model_;
  std::string kind_;
  RemoteBackendConfig config_;
  // Shared: the health and metrics threads hold a snapshot while probing or scraping without
  // the lock; reap() destroys a drained endpoint only when it holds the last reference and no
  // completion is running (Endpoint::active).
  std::vector<std::shared_ptr<Endpoint>> endpoints_;
  uint64_t next_id_ = 1;
  ClientFactory factory_;
  // The configured entries: static host:port, and dns:/// targets with their last good set.
  std::mutex set_mu_;   // serializes set changes (taken before mu_)
  std::mutex reap_mu_;  // serializes reap() rounds, held across shutdown (taken before mu_)
  std::vector<std::string> static_;
  struct DnsTarget {
    std::string entry;  // dns:///name:port
    std::string name;
    uint16_t port = 0;
    std::vector<std::string> addresses;  // last good resolution ("ip:port", "[ip6]:port")
    bool resolved = false;
    uint64_t next_ns = 0;
  };
  std::vector<DnsTarget> dns_;
  std::vector<SharedBuffer> buffers_;  // prepare()'s, attached to clients added later (set_mu_)
  // The entries of `configured` split into host:port and dns:/// targets; INVALID_ARGUMENT for a
  // malformed one.
  absl::Status parseEntries(const std::vector<std::string>& configured,
                            std::vector<std::string>* statics,
                            std::vector<DnsTarget>* targets) const;
  std::mutex resolve_mu_;                  // serializes resolveAll() (taken before set_mu_)
  std::unique_ptr<DnsResolver> resolver_;  // guarded by resolve_mu_
  std::thread resolver_thread_;
  std::condition_variable resolver_cv_;  // resolver thread: stop or new targets
  bool resolve_now_ = false;
  bool has_dns_ = false;    // dns_ is not empty (guarded by mu_, for setStateLocked)
  bool probe_now_ = false;  // health thread: new endpoints to probe
  common::Counter* dns_resolutions_ = nullptr;
  common::Counter* dns_failures_ = nullptr;
  common::Counter* dns_empty_ = nullptr;
  common::Gauge* endpoints_gauge_ = nullptr;
  // Sequences.
  std::unordered_map<std::string, Binding> sequences_;
  std::unordered_map<std::string, uint32_t> sequence_owners_;  // bindings per owner (non-zero)
  void releaseOwnerLocked(const std::string& owner);
  common::Counter* seq_refused_full_ = nullptr;
  common::Counter* seq_broken_ = nullptr;
  common::Counter* seq_expired_ = nullptr;
  common::Gauge* seq_gauge_ = nullptr;
  common::Counter* retries_ = nullptr;
  common::Counter* no_endpoint_ = nullptr;
  common::MetricsRegistry* metrics_;
  bool has_queue_depth_ = false;  // some endpoint has a queue-depth source (set in the ctor)

  mutable std::mutex mu_;
  std::condition_variable cv_;       // health / metrics threads: stop
  std::condition_variable drained_;  // the destructor: inflight_ reached 0 while stopping_
  std::deque<Pending> queue_;        // waiting for a free concurrency slot
  uint32_t inflight_ = 0;
  bool stopping_ = false;
  bool started_ = false;
  bool retired_ = false;    // retire() called
  bool closed_ = false;     // retired and every endpoint closed (or closing)
  bool shut_down_ = false;  // retired, and every endpoint's shutdown() returned
  bool live_ = false;       // counted among its model's live pools (joinLivePools in pool.cc)
  std::function<bool()> upstream_idle_;  // retire()'s predicate
  uint64_t rng_ = 0x9e3779b97f4a7c15ull;
  std::thread health_;
  std::thread metrics_thread_;
};

}  // namespace infergate::backends
