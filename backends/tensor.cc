#include "backends/tensor.h"

#include <array>
#include <limits>

#include "common/checked.h"

namespace infergate::backends {
namespace {
struct TypeInfo {
  std::string_view name;
  size_t size;
};
constexpr std::array<TypeInfo, kNumDataTypes> kTypes = {{
    {"BOOL", 1}, {"UINT8", 1}, {"UINT16", 2}, {"UINT32", 4}, {"UINT64", 8},
    {"INT8", 1}, {"INT16", 2}, {"INT32", 4}, {"INT64", 8}, {"FP16", 2},
    {"BF16", 2}, {"FP32", 4}, {"FP64", 8}, {"BYTES", 0},
}};
}  // namespace

std::optional<DataType> parseDataType(std::string_view name) {
  for (size_t i = 0; i < kTypes.size(); ++i) {
    if (kTypes[i].name == name) return static_cast<DataType>(i);
  }
  return std::nullopt;
}

std::string_view dataTypeName(DataType t) { return kTypes[static_cast<size_t>(t)].name; }
size_t dataTypeSize(DataType t) { return kTypes[static_cast<size_t>(t)].size; }

std::optional<uint64_t> elementCount(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d)) {
      return std::nullopt;
    }
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

std::optional<uint64_t> tensorByteSize(const std::vector<int64_t>& shape, DataType t) {
  const size_t size = dataTypeSize(t);
  if (size == 0) return std::nullopt;
  const std::optional<uint64_t> n = elementCount(shape);
  uint64_t bytes = 0;
  if (!n || !common::checkedMul(*n, static_cast<uint64_t>(size), bytes)) return std::nullopt;
  return bytes;
}

std::string shapeToString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace infergate::backends
