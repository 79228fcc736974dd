#pragma once
// A real gRPC C++ server on loopback, in the test process, for the tests of
// backends::GrpcEndpoint (grpc_client_test.cc, cancel_test.cc). Generic methods (no protos):
//   /t/Echo  answers the request's bytes;
//   /t/Big   answers 2 MiB;
//   /t/Fail  answers FAILED_PRECONDITION with a message that needs percent-encoding
//            ("bad: 100% \xc3\xbc");
//   /t/Slow  counts the call in `started` and answers only when cancelled;
//   any other method answers UNIMPLEMENTED.
// Every call cancelled at the server (RST_STREAM, deadline) is counted in `cancelled`.

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

namespace infergate::backends::test_util {

class FakeGrpcService : public grpc::CallbackGenericService {
 public:
  std::atomic<int> started{0};    // /t/Slow calls read
  std::atomic<int> cancelled{0};  // calls cancelled at the server

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override {
    class Reactor : public grpc::ServerGenericBidiReactor {
     public:
      Reactor(FakeGrpcService* svc, grpc::GenericCallbackServerContext* ctx)
          : svc_(svc), ctx_(ctx) {
        StartRead(&req_);
      }
      void OnReadDone(bool ok) override {
        if (!ok) return finishOnce(grpc::Status(grpc::StatusCode::INTERNAL, "no request"));
        const std::string& m = ctx_->method();
        if (m == "/t/Echo") {
          resp_ = req_;
          writeAndFinish();
        } else if (m == "/t/Big") {
          std::string big(2 << 20, 'b');
          grpc::Slice s(big);
          resp_ = grpc::ByteBuffer(&s, 1);
          writeAndFinish();
        } else if (m == "/t/Fail") {
          finishOnce(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "bad: 100% \xc3\xbc"));
        } else if (m == "/t/Slow") {
          svc_->started.fetch_add(1);  // nothing until OnCancel
        } else {
          finishOnce(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, ""));
        }
      }
      void OnCancel() override {
        svc_->cancelled.fetch_add(1);
        finishOnce(grpc::Status::CANCELLED);
      }
      void OnDone() override { delete this; }

     private:
      // finished_ is set before the write: OnDone may delete this once it is started.
      void writeAndFinish() {
        finished_ = true;
        StartWriteAndFinish(&resp_, grpc::WriteOptions(), grpc::Status::OK);
      }
      void finishOnce(const grpc::Status& s) {
        if (finished_) return;
        finished_ = true;
        Finish(s);
      }
      FakeGrpcService* svc_;
      grpc::GenericCallbackServerContext* ctx_;
      grpc::ByteBuffer req_, resp_;
      bool finished_ = false;
    };
    return new Reactor(this, ctx);
  }
};

// FakeGrpcService listening on 127.0.0.1:`port` (0: any free port; port() says which, 0 when
// it could not bind). stop() (or the destructor) shuts it down at once, failing open calls.
class FakeGrpcServer {
 public:
  explicit FakeGrpcServer(int port = 0) {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials(),
                       &port_);
    b.RegisterCallbackGenericService(&svc_);
    server_ = b.BuildAndStart();
  }
  ~FakeGrpcServer() { stop(); }
  FakeGrpcServer(const FakeGrpcServer&) = delete;
  FakeGrpcServer& operator=(const FakeGrpcServer&) = delete;

  void stop() {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
    server_.reset();
  }
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  FakeGrpcService& service() { return svc_; }

 private:
  FakeGrpcService svc_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace infergate::backends::test_util
