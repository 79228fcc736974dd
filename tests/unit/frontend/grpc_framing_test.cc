// gRPC message framing: messages split at every byte boundary, several per feed, zero-length,
// oversized, compressed; grpc-timeout parsing; grpc-message percent-encoding.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "frontend/grpc_framing.h"

namespace infergate::frontend {
namespace {

std::string framed(const std::vector<std::string>& messages) {
  std::string out;
  for (const auto& m : messages) appendGrpcMessage(out, m);
  return out;
}

TEST(GrpcFraming, PrefixIsFlagAndBigEndianLength) {
  std::string out;
  appendGrpcMessage(out, std::string(258, 'x'));
  ASSERT_EQ(out.size(), 5u + 258);
  EXPECT_EQ(out.substr(0, 5), std::string("\0\0\0\x01\x02", 5));
}

TEST(GrpcFraming, EverySplitPointYieldsTheSameMessages) {
  const std::vector<std::string> msgs = {"hello", "", std::string(300, 'z'), "end"};
  const std::string wire = framed(msgs);
  for (size_t a = 0; a <= wire.size(); ++a) {
    for (size_t b = a; b <= wire.size(); b += 7) {
      GrpcMessageReader r(1024);
      std::vector<std::string> got;
      auto on = [&](std::string_view m) {
        got.emplace_back(m);
        return absl::OkStatus();
      };
      ASSERT_TRUE(r.feed(wire.data(), a, on).ok());
      ASSERT_TRUE(r.feed(wire.data() + a, b - a, on).ok());
      ASSERT_TRUE(r.feed(wire.data() + b, wire.size() - b, on).ok());
      EXPECT_EQ(got, msgs) << "split at " << a << "," << b;
      EXPECT_TRUE(r.atBoundary());
    }
  }
}

TEST(GrpcFraming, ByteAtATime) {
  const std::vector<std::string> msgs = {"abc", std::string(70000, 'q')};
  const std::string wire = framed(msgs);
  GrpcMessageReader r(1 << 20);
  std::vector<std::string> got;
  for (char c : wire) {
    ASSERT_TRUE(r.feed(&c, 1, [&](std::string_view m) {
                   got.emplace_back(m);
                   return absl::OkStatus();
                 }).ok());
  }
  EXPECT_EQ(got, msgs);
  EXPECT_EQ(r.messages(), 2u);
}

TEST(GrpcFraming, WholeMessageInOneFeedIsNotCopied) {
  const std::string wire = framed({"one", "two"});
  GrpcMessageReader r(100);
  std::vector<const char*> ptrs;
  ASSERT_TRUE(r.feed(wire.data(), wire.size(), [&](std::string_view m) {
                 ptrs.push_back(m.data());
                 return absl::OkStatus();
               }).ok());
  ASSERT_EQ(ptrs.size(), 2u);
  EXPECT_EQ(ptrs[0], wire.data() + 5);  // a view into the caller's bytes
  EXPECT_EQ(ptrs[1], wire.data() + 13);
  EXPECT_EQ(r.gatheredBytes(), 0u);
}

TEST(GrpcFraming, PartialMessageIsNotAtBoundary) {
  const std::string wire = framed({"abcdef"});
  GrpcMessageReader r(100);
  int n = 0;
  ASSERT_TRUE(r.feed(wire.data(), 7, [&](std::string_view) { ++n; return absl::OkStatus(); }).ok());
  EXPECT_EQ(n, 0);
  EXPECT_FALSE(r.atBoundary());
}

TEST(GrpcFraming, OversizedMessageIsResourceExhausted) {
  const std::string wire = framed({std::string(101, 'x')});
  for (size_t split : {size_t{2}, wire.size()}) {
    GrpcMessageReader r(100);
    int n = 0;
    auto on = [&](std::string_view) { ++n; return absl::OkStatus(); };
    absl::Status st = r.feed(wire.data(), split, on);
    if (st.ok()) st = r.feed(wire.data() + split, wire.size() - split, on);
    EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(n, 0);
  }
}

TEST(GrpcFraming, CompressedFlagIsUnimplementedAndBadFlagInternal) {
  std::string wire = framed({"abc"});
  wire[0] = 1;
  GrpcMessageReader r(100);
  auto on = [](std::string_view) { return absl::OkStatus(); };
  EXPECT_EQ(r.feed(wire.data(), wire.size(), on).code(), absl::StatusCode::kUnimplemented);
  wire[0] = 2;
  GrpcMessageReader r2(100);
  EXPECT_EQ(r2.feed(wire.data(), wire.size(), on).code(), absl::StatusCode::kInternal);
}

TEST(GrpcFraming, CallbackErrorIsSticky) {
  const std::string wire = framed({"a", "b"});
  GrpcMessageReader r(100);
  int n = 0;
  auto on = [&](std::string_view) {
    ++n;
    return absl::InvalidArgumentError("no");
  };
  EXPECT_EQ(r.feed(wire.data(), wire.size(), on).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(n, 1);
  EXPECT_FALSE(r.feed(wire.data(), wire.size(), on).ok());
  EXPECT_EQ(n, 1);
}

TEST(GrpcTimeout, Units) {
  EXPECT_EQ(parseGrpcTimeout("1H"), 3600ull * 1'000'000'000);
  EXPECT_EQ(parseGrpcTimeout("2M"), 120ull * 1'000'000'000);
  EXPECT_EQ(parseGrpcTimeout("3S"), 3'000'000'000ull);
  EXPECT_EQ(parseGrpcTimeout("250m"), 250'000'000ull);
  EXPECT_EQ(parseGrpcTimeout("7u"), 7000ull);
  EXPECT_EQ(parseGrpcTimeout("99999999n"), 99999999ull);
  EXPECT_EQ(parseGrpcTimeout("0m"), 0ull);
  EXPECT_EQ(parseGrpcTimeout("99999999H"), UINT64_MAX);  // saturates (about 11,400 years)
}

TEST(GrpcTimeout, Malformed) {
  for (const char* v : {"", "S", "10", "10x", "-1S", "123456789S", "1.5S", " 1S"}) {
    EXPECT_FALSE(parseGrpcTimeout(v).has_value()) << v;
  }
}

TEST(GrpcMessage, PercentEncodingRoundTrips) {
  const std::string m = "bad input 'x': 100% \xc3\xa9\n";
  const std::string enc = percentEncodeGrpcMessage(m);
  EXPECT_EQ(enc, "bad input 'x': 100%25 %C3%A9%0A");
  EXPECT_EQ(percentDecodeGrpcMessage(enc), m);
}

// Issue 13: a 5-byte prefix announcing a 60 MiB message must not reserve 60 MiB before the bytes
// come; the buffer grows with what arrives and is released with the message.
TEST(GrpcFraming, PrefixAloneReservesLittle) {
  GrpcMessageReader r(64u << 20);
  char prefix[5];
  writeGrpcPrefix(prefix, 60u << 20);
  std::string m(prefix, 5);
  m += "abc";
  ASSERT_TRUE(r.feed(m.data(), m.size(), [](std::string_view) { return absl::OkStatus(); }).ok());
  EXPECT_LE(r.bufferedBytes(), GrpcMessageReader::kMaxReserveBytes);
  std::string rest((60u << 20) - 3, 'x');
  size_t got = 0;
  ASSERT_TRUE(r.feed(rest.data(), rest.size(), [&](std::string_view v) {
                 got = v.size();
                 return absl::OkStatus();
               }).ok());
  EXPECT_EQ(got, 60u << 20);
  EXPECT_EQ(r.bufferedBytes(), 0u);
}

}  // namespace
}  // namespace infergate::frontend
