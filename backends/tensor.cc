#include "backends/tensor.h"

#include <limits>

#include "common/checked.h"

namespace infergate::backends {

std::optional<DataType> parseDataType(std::string_view name) {
  for (size_t i = 0; i < kDataTypeNames.size(); ++i) {
    if (kDataTypeNames[i] == name) return static_cast<DataType>(i);
  }
  return std::nullopt;
}

std::string_view dataTypeName(DataType t) {
  return visitDataType(t, [](auto tag) { return tag.kName; });
}
size_t dataTypeSize(DataType t) {
  return visitDataType(t, [](auto tag) { return tag.kSize; });
}

std::optional<DataType> fromTfDataType(int tf) {
  for (int k = 0; k < kNumDataTypes; ++k) {
    if (tf != 0 && kTfDataTypes[k] == tf) return static_cast<DataType>(k);
  }
  return std::nullopt;
}

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
