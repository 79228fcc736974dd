#include "dataplane/tcp/buffer.h"

#include <cstdlib>
#include <cstring>

namespace infergate::dataplane::tcp {

ChunkPool::ChunkPool(size_t chunk_size, size_t keep_free)
    : chunk_size_(chunk_size), keep_free_(keep_free) {
  free_.reserve(keep_free);
}

ChunkPool::~ChunkPool() {
  for (char* c : free_) std::free(c);
}

char* ChunkPool::get() {
  ++in_use_;
  if (!free_.empty()) {
    char* c = free_.back();
    free_.pop_back();
    return c;
  }
  return static_cast<char*>(std::malloc(chunk_size_));
}

void ChunkPool::put(char* chunk) {
  --in_use_;
  if (free_.size() < keep_free_) {
    free_.push_back(chunk);
  } else {
    std::free(chunk);
  }
}

void ChunkBuffer::ensure(ChunkPool& pool, size_t end_off) {
  if (cs_ == 0) cs_ = pool.chunkSize();
  const size_t need = (head_off_ + end_off + cs_ - 1) / cs_;
  while (chunks_.size() - first_ < need) chunks_.push_back(pool.get());
}

void ChunkBuffer::writeAt(ChunkPool& pool, size_t off, const char* data, size_t len) {
  if (len == 0) return;
  ensure(pool, off + len);
  size_t pos = head_off_ + off;
  while (len > 0) {
    const size_t ci = first_ + pos / cs_;
    const size_t in = pos % cs_;
    const size_t n = len < cs_ - in ? len : cs_ - in;
    std::memcpy(chunks_[ci] + in, data, n);
    data += n;
    len -= n;
    pos += n;
  }
}

void ChunkBuffer::append(ChunkPool& pool, const char* data, size_t len) {
  writeAt(pool, size_, data, len);
  size_ += len;
}

void ChunkBuffer::copyOut(size_t off, uint8_t* dst, size_t len) const {
  size_t pos = head_off_ + off;
  while (len > 0) {
    const size_t ci = first_ + pos / cs_;
    const size_t in = pos % cs_;
    const size_t n = len < cs_ - in ? len : cs_ - in;
    std::memcpy(dst, chunks_[ci] + in, n);
    dst += n;
    len -= n;
    pos += n;
  }
}

const char* ChunkBuffer::front(size_t* len) const {
  if (size_ == 0) {
    *len = 0;
    return nullptr;
  }
  const size_t room = cs_ - head_off_;
  *len = size_ < room ? size_ : room;
  return chunks_[first_] + head_off_;
}

void ChunkBuffer::consume(ChunkPool& pool, size_t n) {
  if (n > size_) n = size_;
  size_ -= n;
  head_off_ += n;
  while (cs_ != 0 && head_off_ >= cs_ && first_ < chunks_.size()) {
    pool.put(chunks_[first_++]);
    head_off_ -= cs_;
  }
  if (first_ == chunks_.size()) {
    // Nothing held (no written-ahead bytes either): start over at offset 0.
    chunks_.clear();
    first_ = 0;
    head_off_ = 0;
  } else if (first_ > 32 && first_ * 2 > chunks_.size()) {
    chunks_.erase(chunks_.begin(), chunks_.begin() + static_cast<ptrdiff_t>(first_));
    first_ = 0;
  }
}

void ChunkBuffer::clear(ChunkPool& pool) {
  for (size_t i = first_; i < chunks_.size(); ++i) pool.put(chunks_[i]);
  chunks_.clear();
  if (chunks_.capacity() > 8) std::vector<char*>().swap(chunks_);
  first_ = 0;
  head_off_ = 0;
  size_ = 0;
}

}  // namespace infergate::dataplane::tcp
