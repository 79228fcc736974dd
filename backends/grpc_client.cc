#include "backends/grpc_client.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <future>
#include <thread>

namespace infergate::backends {

struct GrpcEndpoint::Chan {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::GenericStub> stub;
};

// The completion queue every call of the endpoint finishes on, and the one thread that polls
// it: gRPC reads the responses on that thread (it is the poller) and the call's `done` runs
// there directly, so a response costs one thread wake-up. gRPC's callback API instead reads on
// one of its own "nexting" threads and hands the completion to another (two wake-ups).
struct GrpcEndpoint::Completions {
  grpc::CompletionQueue cq;
  std::thread thread;
};

namespace {

struct Call {
  grpc::ClientContext ctx;
  std::string owned;  // request bytes for the copying overload
  grpc::ByteBuffer request;
  grpc::ByteBuffer response;
  grpc::Status status;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> reader;
  std::function<void(GrpcResult)> done;
};

// A call that failed before any connection existed: gRPC's pick failed (connection refused,
// no address), so the server cannot have seen the request.
bool neverSent(const grpc::Status& s) {
  if (s.error_code() != grpc::StatusCode::UNAVAILABLE) return false;
  const std::string& m = s.error_message();
  return m.find("failed to connect") != std::string::npos ||
         m.find("Connection refused") != std::string::npos ||
         m.find("connections to all backends failing") != std::string::npos ||
         m.find("No route to host") != std::string::npos ||
         m.find("DNS resolution failed") != std::string::npos;
}

void finish(Call* c) {
  const grpc::Status& s = c->status;
  GrpcResult r;
  if (s.ok()) {
    auto slice = std::make_shared<grpc::Slice>();
    grpc::Status d = c->response.DumpToSingleSlice(slice.get());
    if (d.ok()) {
      r.body = std::string_view(reinterpret_cast<const char*>(slice->begin()), slice->size());
      r.owner = std::move(slice);
    } else {
      r.status = absl::InternalError("cannot read the backend's response: " + d.error_message());
    }
  } else {
    r.status = fromGrpcStatus(s.error_code(), s.error_message());
    r.not_sent = neverSent(s);
  }
  std::function<void(GrpcResult)> done = std::move(c->done);
  delete c;
  done(std::move(r));
}

}  // namespace

absl::Status fromGrpcStatus(int code, const std::string& message) {
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

GrpcEndpoint::GrpcEndpoint(std::string address, int channels, int max_message_bytes)
    : address_(std::move(address)), completions_(std::make_unique<Completions>()) {
  if (channels < 1) channels = 1;
  for (int i = 0; i < channels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // one connection per channel
    args.SetInt("grpc.channel_index_infergate", i);      // distinct args: distinct channels
    args.SetMaxReceiveMessageSize(max_message_bytes);
    args.SetMaxSendMessageSize(max_message_bytes);
    // A restarted backend is found again quickly.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
    auto c = std::make_unique<Chan>();
    c->channel = grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), args);
    c->stub = std::make_unique<grpc::GenericStub>(c->channel);
    channels_.push_back(std::move(c));
  }
  completions_->thread = std::thread([cq = &completions_->cq] {
    void* tag = nullptr;
    bool ok = false;
    // `ok` is always true for a unary Finish (a failed call reports it in its status).
    while (cq->Next(&tag, &ok)) finish(static_cast<Call*>(tag));
  });
}

GrpcEndpoint::~GrpcEndpoint() {
  // Calls still in flight finish (or fail) first: Next() returns false only once the queue is
  // shut down and drained.
  completions_->cq.Shutdown();
  completions_->thread.join();
}

void GrpcEndpoint::call(const char* method, const wire::ModelInferEncoding& request,
                        uint64_t timeout_ms, std::function<void(GrpcResult)> done) {
  Call* c = new Call;
  c->done = std::move(done);
  // Slices over existing memory: STATIC_SLICE takes no reference and copies nothing; `request`
  // and the tensor memory outlive the call (the caller's contract).
  constexpr size_t kInline = 16;
  grpc::Slice inline_slices[kInline];
  std::vector<grpc::Slice> more;
  grpc::Slice* slices = inline_slices;
  if (request.pieces.size() > kInline) {
    more.resize(request.pieces.size());
    slices = more.data();
  }
  for (size_t i = 0; i < request.pieces.size(); ++i) {
    const wire::ModelInferEncoding::Piece& p = request.pieces[i];
    const void* data = p.external ? static_cast<const void*>(p.data)
                                  : static_cast<const void*>(request.meta.data() + p.offset);
    slices[i] = grpc::Slice(data, p.size, grpc::Slice::STATIC_SLICE);
  }
  c->request = grpc::ByteBuffer(slices, request.pieces.size());
  start(c, method, timeout_ms);
}

void GrpcEndpoint::call(const char* method, std::string request, uint64_t timeout_ms,
                        std::function<void(GrpcResult)> done) {
  Call* c = new Call;
  c->owned = std::move(request);
  c->done = std::move(done);
  grpc::Slice s(c->owned.data(), c->owned.size(), grpc::Slice::STATIC_SLICE);
  c->request = grpc::ByteBuffer(&s, 1);
  start(c, method, timeout_ms);
}

void GrpcEndpoint::start(void* call, const char* method, uint64_t timeout_ms) {
  Call* c = static_cast<Call*>(call);
  if (timeout_ms > 0) {
    c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  }
  Chan& ch = *channels_[next_.fetch_add(1, std::memory_order_relaxed) % channels_.size()];
  // The request is written from this thread (gRPC flushes the write before StartCall returns
  // when the connection is idle); the response completes on the endpoint's completion thread.
  c->reader = ch.stub->PrepareUnaryCall(&c->ctx, method, c->request, &completions_->cq);
  c->reader->StartCall();
  c->reader->Finish(&c->response, &c->status, c);
}

GrpcResult GrpcEndpoint::callSync(const char* method, std::string request, uint64_t timeout_ms) {
  std::promise<GrpcResult> p;
  std::future<GrpcResult> f = p.get_future();
  call(method, std::move(request), timeout_ms, [&p](GrpcResult r) { p.set_value(std::move(r)); });
  return f.get();
}

bool GrpcEndpoint::reachable() {
  for (auto& c : channels_) {
    if (c->channel->GetState(true) != GRPC_CHANNEL_TRANSIENT_FAILURE) return true;
  }
  return false;
}

}  // namespace infergate::backends
