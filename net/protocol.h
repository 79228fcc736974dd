#pragma once
// The API protocol a request came in by; used for metrics labels and error encoding.

#include <cstdint>
#include <string_view>

namespace infergate::net {

enum class Protocol : uint8_t { kHttpKserve, kGrpcKserve, kHttpTfServing, kGrpcTfServing };
inline constexpr int kProtocols = 4;

// "kserve_http", "kserve_grpc", "tfserving_http", "tfserving_grpc" (the metrics label).
std::string_view protocolName(Protocol p);

}  // namespace infergate::net
