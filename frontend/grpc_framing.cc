#include "frontend/grpc_framing.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace infergate::frontend {

namespace {
// The 5-byte prefix: flag (0 plain; 1 compressed, refused) and the big-endian length (at most
// `max`) into `n`.
absl::Status parsePrefix(const char* p, size_t max, uint32_t& n) {
  const uint8_t flag = static_cast<uint8_t>(p[0]);
  n = (uint32_t{static_cast<uint8_t>(p[1])} << 24) | (uint32_t{static_cast<uint8_t>(p[2])} << 16) |
      (uint32_t{static_cast<uint8_t>(p[3])} << 8) | uint32_t{static_cast<uint8_t>(p[4])};
  if (flag > 1) return absl::InternalError("invalid gRPC message flag " + std::to_string(flag));
  if (flag == 1) {
    return absl::UnimplementedError(
        "compressed gRPC messages are not supported (grpc-encoding: identity only)");
  }
  if (n > max) {
    return absl::ResourceExhaustedError("gRPC message of " + std::to_string(n) +
                                        " bytes is larger than the limit of " +
                                        std::to_string(max));
  }
  return absl::OkStatus();
}
}  // namespace

bool GrpcMessageReader::takePrefix(const char*& data, size_t& len) {
  const size_t take = std::min(len, kGrpcPrefixBytes - have_);
  std::memcpy(prefix_ + have_, data, take);
  have_ += take;
  data += take;
  len -= take;
  if (have_ < kGrpcPrefixBytes) return false;
  status_ = parsePrefix(prefix_, max_, body_len_);
  return status_.ok();
}

absl::Status GrpcMessageReader::feed(const char* data, size_t len, const OnMessage& on_message) {
  while (len > 0 && status_.ok()) {
    if (have_ < kGrpcPrefixBytes) {
      // Fast path: a whole message in the caller's bytes, nothing buffered.
      if (have_ == 0 && len >= kGrpcPrefixBytes) {
        uint32_t n = 0;
        status_ = parsePrefix(data, max_, n);
        if (!status_.ok()) break;
        if (len - kGrpcPrefixBytes >= n) {
          ++messages_;
          status_ = on_message(std::string_view(data + kGrpcPrefixBytes, n));
          data += kGrpcPrefixBytes + n;
          len -= kGrpcPrefixBytes + n;
          continue;
        }
      }
      if (!takePrefix(data, len)) break;
      body_.clear();
      // Not body_len_: a 5-byte prefix announcing 64 MiB must not cost 64 MiB until the bytes
      // come (a connection with 128 streams would pin 8 GiB with 640 bytes).
      body_.reserve(std::min<size_t>(body_len_, std::max(len, kMaxReserveBytes)));
    }
    const size_t want = body_len_ - body_.size();
    const size_t take = std::min(len, want);
    body_.append(data, take);
    gathered_ += take;
    data += take;
    len -= take;
    have_ += take;
    if (body_.size() == body_len_) {
      ++messages_;
      have_ = 0;
      status_ = on_message(body_);
      std::string().swap(body_);  // the memory goes with the message, not with the stream
    }
  }
  return status_;
}

absl::Status GrpcMessageReader::feedPieces(const char* data, size_t len, PieceHandler& handler) {
  while (len > 0 && status_.ok()) {
    if (have_ < kGrpcPrefixBytes) {
      if (have_ == 0 && len >= kGrpcPrefixBytes) {
        // Fast path: a whole message in the caller's bytes (the small-message case).
        uint32_t n = 0;
        status_ = parsePrefix(data, max_, n);
        if (!status_.ok()) break;
        if (len - kGrpcPrefixBytes >= n) {
          ++messages_;
          status_ = handler.onWhole(std::string_view(data + kGrpcPrefixBytes, n));
          data += kGrpcPrefixBytes + n;
          len -= kGrpcPrefixBytes + n;
          continue;
        }
      }
      if (!takePrefix(data, len)) break;
      status_ = handler.onBegin(body_len_);
      if (!status_.ok()) break;
    }
    const size_t take = std::min<size_t>(len, body_len_ - (have_ - kGrpcPrefixBytes));
    if (take > 0) {
      status_ = handler.onPiece(data, take);
      data += take;
      len -= take;
      have_ += take;
      if (!status_.ok()) break;
    }
    if (have_ - kGrpcPrefixBytes == body_len_) {
      ++messages_;
      have_ = 0;
      status_ = handler.onEnd();
    }
  }
  return status_;
}

void writeGrpcPrefix(char* out, uint32_t len) {
  out[0] = 0;
  out[1] = static_cast<char>(len >> 24);
  out[2] = static_cast<char>(len >> 16);
  out[3] = static_cast<char>(len >> 8);
  out[4] = static_cast<char>(len);
}

void appendGrpcMessage(std::string& out, std::string_view message) {
  char prefix[kGrpcPrefixBytes];
  writeGrpcPrefix(prefix, static_cast<uint32_t>(message.size()));
  out.append(prefix, kGrpcPrefixBytes);
  out.append(message);
}

std::optional<uint64_t> parseGrpcTimeout(std::string_view v) {
  if (v.size() < 2 || v.size() > 9) return std::nullopt;
  uint64_t n = 0;
  for (size_t i = 0; i + 1 < v.size(); ++i) {
    if (v[i] < '0' || v[i] > '9') return std::nullopt;
    n = n * 10 + static_cast<uint64_t>(v[i] - '0');
  }
  uint64_t mul;
  switch (v.back()) {
    case 'H': mul = 3600ull * 1'000'000'000ull; break;
    case 'M': mul = 60ull * 1'000'000'000ull; break;
    case 'S': mul = 1'000'000'000ull; break;
    case 'm': mul = 1'000'000ull; break;
    case 'u': mul = 1'000ull; break;
    case 'n': mul = 1; break;
    default: return std::nullopt;
  }
  if (n != 0 && mul > UINT64_MAX / n) return UINT64_MAX;
  return n * mul;
}

std::string percentEncodeGrpcMessage(std::string_view m) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(m.size());
  for (unsigned char c : m) {
    if (c >= 0x20 && c <= 0x7E && c != '%') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string percentDecodeGrpcMessage(std::string_view v) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == '%' && i + 2 < v.size() && hex(v[i + 1]) >= 0 && hex(v[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(v[i + 1]) * 16 + hex(v[i + 2])));
      i += 2;
    } else {
      out.push_back(v[i]);
    }
  }
  return out;
}


}  // namespace infergate::frontend
