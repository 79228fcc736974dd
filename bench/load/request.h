#pragma once
// Request payloads for infergate-bench: every request the generator sends is one of a small set
// of pre-encoded variants (one per priority level, one per malformed kind), built once at
// start-up so the send path only copies bytes.
//
// Encodings: KServe v2 REST over HTTP/1.1 (JSON, or the binary tensor extension), KServe v2 gRPC
// ModelInfer (the length-prefixed protobuf message of one HTTP/2 DATA stream, encoded with the
// generated classes of frontend/proto/grpc_service.proto), and a plain HTTP/1.1 GET.

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace infergate::bench {

enum class Protocol { kRest, kGrpc, kGet };
enum class RestFormat { kJson, kBinary };

// One input tensor: NAME:DATATYPE:DIMS, e.g. "INPUT0:FP32:1x16"; values random unless `file`
// names a file of raw little-endian element bytes (exactly the tensor's size; BYTES: a file of
// 4-byte-length-prefixed elements as in the binary extension).
struct TensorSpec {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
  std::string file;
};

// Parses "NAME:DATATYPE:D0xD1x..." (datatype upper-cased KServe name: BOOL, UINT8..UINT64,
// INT8..INT64, FP16, BF16, FP32, FP64, BYTES).
absl::StatusOr<TensorSpec> parseTensorSpec(const std::string& text);
// Bytes per element, 0 for BYTES, -1 for an unknown datatype.
int datatypeSize(const std::string& datatype);
int64_t elementCount(const std::vector<int64_t>& shape);
// `s` as a JSON string: quoted, with '"' and '\\' escaped and control characters as \u00XX.
std::string jsonString(const std::string& s);

struct PayloadOptions {
  Protocol protocol = Protocol::kRest;
  RestFormat rest_format = RestFormat::kJson;
  std::string authority = "localhost";  // Host / :authority
  std::string model = "identity";
  std::string model_version;            // empty: latest
  std::string path;                     // REST/GET path; empty: /v2/models/<model>/infer (REST), / (GET)
  std::vector<TensorSpec> inputs;
  std::vector<std::string> outputs;     // requested outputs (none: all)
  uint64_t seed = 1;
};

// The malformed kinds each protocol can send (names used on the command line and in reports).
const std::vector<std::string>& malformedKinds(Protocol p);

struct Variant {
  // HTTP/1.1: the complete request (head and body). gRPC: the gRPC message (5-byte prefix +
  // serialized ModelInferRequest).
  std::string bytes;
  std::string grpc_path;   // gRPC only: the :path of the call
  int priority = -1;       // the KServe "priority" parameter sent; -1: none
  std::string malformed;   // empty: a well-formed request
};

// Builds the well-formed variant for each level in `priorities` (-1: without the parameter),
// followed by one variant per name in `malformed` (sent without a priority). Errors name the
// bad option (unknown datatype, file of the wrong size, unknown malformed kind, ...).
absl::StatusOr<std::vector<Variant>> buildVariants(const PayloadOptions& opts,
                                                   const std::vector<int>& priorities,
                                                   const std::vector<std::string>& malformed);

// Chooses a variant per request: a malformed one with probability `malformed_fraction`
// (uniform over the malformed variants), otherwise a well-formed one by the priority weights.
class RequestMix {
 public:
  // `weights[i]` is the weight of well-formed variant i (normalised here); `malformed_count`
  // malformed variants follow the well-formed ones.
  RequestMix(std::vector<double> weights, size_t malformed_count, double malformed_fraction);
  size_t pick(std::mt19937_64& rng) const;
  size_t wellFormedCount() const { return cumulative_.size(); }

 private:
  std::vector<double> cumulative_;
  size_t malformed_count_;
  double malformed_fraction_;
};

}  // namespace infergate::bench
