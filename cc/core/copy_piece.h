// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Short byte copies with fixed-size moves, shared by the copy ops
// (concat.cc, depth_to_space.cc): they move many pieces of a few to a few
// hundred bytes each, where a memcpy call per piece costs more than the
// bytes.
#ifndef TF_FUSED_INT8_CC_CORE_COPY_PIECE_H_
#define TF_FUSED_INT8_CC_CORE_COPY_PIECE_H_

#include <cstdint>
#include <cstring>

namespace tf_fused_int8 {

// Pieces longer than this go to memcpy (libc's wide moves); shorter ones to
// the fixed-size moves of CopyPiece.
constexpr int64_t kCopyPieceMemcpyFrom = 256;

// Copies n bytes, sizeof(T) <= n <= 2 * sizeof(T), as two T moves: the first
// sizeof(T) bytes and the last (they may overlap: the same bytes again).
template <class T>
inline void CopyEnds(int8_t* dst, const int8_t* src, int64_t n) {
  T a, b;
  std::memcpy(&a, src, sizeof(T));
  std::memcpy(&b, src + n - sizeof(T), sizeof(T));
  std::memcpy(dst, &a, sizeof(T));
  std::memcpy(dst + n - sizeof(T), &b, sizeof(T));
}

// Copies n bytes, 0 <= n <= kCopyPieceMemcpyFrom, from src to dst (distinct
// buffers) with fixed-size moves only: 16-byte chunks and one more ending at
// n (it may overlap the one before: the same bytes again) from 16 bytes on;
// two 8- or 4-byte moves, the second ending at n, below. Every move stays
// within [src, src + n) and [dst, dst + n).
inline void CopyPiece(int8_t* dst, const int8_t* src, int64_t n) {
  if (n >= 16) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) std::memcpy(dst + i, src + i, 16);
    if (i < n) std::memcpy(dst + n - 16, src + n - 16, 16);
  } else if (n >= 8) {
    CopyEnds<uint64_t>(dst, src, n);
  } else if (n >= 4) {
    CopyEnds<uint32_t>(dst, src, n);
  } else {
    for (int64_t j = 0; j < n; ++j) dst[j] = src[j];
  }
}

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_COPY_PIECE_H_
