#pragma once
// A tiny HTTP/1.1 server for the webhook tests: listens on 127.0.0.1 (an ephemeral port),
// reads each request (head and Content-Length body), records it and answers a fixed status
// (or nothing, when `status` is 0, until stop()). One connection at a time.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace infergate::gpu::testing {

class HttpTestServer {
 public:
  struct Request {
    std::string head;  // request line and headers, up to the blank line
    std::string body;
  };

  explicit HttpTestServer(int status) : status_(status) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(listen_fd_, 128);
    socklen_t len = sizeof a;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~HttpTestServer() { stop(); }

  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    if (listen_fd_ >= 0) ::close(listen_fd_);
    listen_fd_ = -1;
  }

  uint16_t port() const { return port_; }
  std::string url(const std::string& path = "/hook") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  std::vector<Request> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }
  int accepted() const { return accepted_.load(); }
  // Waits until `n` connections were accepted.
  bool waitAccepted(int n, std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (accepted_.load() < n) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return true;
  }

 private:
  bool readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 20) > 0;
  }

  void serve(int fd) {
    std::string data;
    char buf[4096];
    size_t head_end = std::string::npos;
    size_t want = 0;
    while (!stop_.load()) {
      if (head_end != std::string::npos && data.size() >= head_end + 4 + want) break;
      if (!readable(fd)) continue;
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return;
      data.append(buf, static_cast<size_t>(n));
      if (head_end == std::string::npos && (head_end = data.find("\r\n\r\n")) != std::string::npos) {
        const size_t cl = data.find("Content-Length: ");
        if (cl != std::string::npos && cl < head_end) want = std::stoul(data.substr(cl + 16));
      }
    }
    if (head_end == std::string::npos) return;
    {
      std::lock_guard lock(mu_);
      requests_.push_back({data.substr(0, head_end), data.substr(head_end + 4, want)});
    }
    if (status_ == 0) {
      while (!stop_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    const std::string answer = "HTTP/1.1 " + std::to_string(status_) +
                               " Test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    (void)::send(fd, answer.data(), answer.size(), MSG_NOSIGNAL);
  }

  void run() {
    while (!stop_.load()) {
      if (!readable(listen_fd_)) continue;
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      accepted_.fetch_add(1);
      serve(fd);
      ::close(fd);
    }
  }

  int status_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::mutex mu_;
  std::vector<Request> requests_;
  std::thread thread_;
};

}  // namespace infergate::gpu::testing
