#pragma once
// Connection byte buffers over a per-stack pool of fixed-size chunks: no allocation at steady
// state (chunks are recycled through the pool), nothing held by an idle connection (an empty
// buffer returns its chunks), random-access reads for retransmission and sparse writes for
// out-of-order reassembly.
//
// Threading: one pool per stack (reactor thread); not thread-safe.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace infergate::dataplane::tcp {

class ChunkPool {
 public:
  ChunkPool(size_t chunk_size, size_t keep_free);
  ~ChunkPool();
  ChunkPool(const ChunkPool&) = delete;
  ChunkPool& operator=(const ChunkPool&) = delete;

  char* get();
  void put(char* chunk);
  size_t chunkSize() const { return chunk_size_; }
  size_t inUse() const { return in_use_; }
  size_t bytesInUse() const { return in_use_ * chunk_size_; }

 private:
  size_t chunk_size_;
  size_t keep_free_;
  size_t in_use_ = 0;
  std::vector<char*> free_;
};

// A byte queue: `size()` contiguous bytes from the head, plus (for reassembly) bytes written
// further out with writeAt() that become part of the queue when extend() covers them.
class ChunkBuffer {
 public:
  ChunkBuffer() = default;
  ChunkBuffer(const ChunkBuffer&) = delete;
  ChunkBuffer& operator=(const ChunkBuffer&) = delete;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  void append(ChunkPool& pool, const char* data, size_t len);
  // Writes at offset `off` from the head (may be beyond size()); does not change size().
  void writeAt(ChunkPool& pool, size_t off, const char* data, size_t len);
  // Makes `n` more bytes (already written with writeAt) part of the queue.
  void extend(size_t n) { size_ += n; }
  // Copies `len` bytes starting `off` bytes after the head into dst.
  void copyOut(size_t off, uint8_t* dst, size_t len) const;
  // The first contiguous run of queued bytes (within one chunk).
  const char* front(size_t* len) const;
  void consume(ChunkPool& pool, size_t n);
  // Drops everything (queued and written-ahead bytes) and returns the chunks to the pool.
  void clear(ChunkPool& pool);
  // clear() when nothing is queued; for callers that know nothing was written ahead.
  void releaseIfEmpty(ChunkPool& pool) {
    if (size_ == 0 && chunks_.size() != first_) clear(pool);
  }
  size_t chunksHeld() const { return chunks_.size() - first_; }

 private:
  void ensure(ChunkPool& pool, size_t end_off);  // chunks cover head..end_off
  std::vector<char*> chunks_;
  size_t first_ = 0;     // index of the chunk holding the head
  size_t head_off_ = 0;  // offset of the head in chunks_[first_]
  size_t size_ = 0;
  size_t cs_ = 0;        // chunk size, learnt from the pool on first use
};

}  // namespace infergate::dataplane::tcp
