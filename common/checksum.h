/* SPDX-License-Identifier: Apache-2.0 */
/* The Internet checksum (RFC 1071), written once for every side that computes one: the XDP
 * program (C, -target bpf: the RSTs and cookie SYN-ACKs xdp/classifier.h builds in place),
 * the TCP stack's frame parser and builder (dataplane/tcp/packet.cc) and the test packet
 * builder (xdp/testing/packet_builder.cc).
 *
 * A sum is a __u32 of 16-bit one's-complement terms, not yet folded; ig_csum_fold folds it and
 * complements it into the 16-bit field value. The byte order of the terms is the caller's
 * choice, as long as the field is stored in the same order (RFC 1071 2(B)): the BPF code adds
 * words as loaded from the frame (network order in memory), ig_csum_partial adds big-endian
 * values.
 */
#ifndef INFERGATE_COMMON_CHECKSUM_H
#define INFERGATE_COMMON_CHECKSUM_H

#include <linux/types.h>

#if defined(__bpf__) || defined(__BPF__)
#define IG_CSUM_INLINE static __always_inline
#else
#include <stddef.h>
#define IG_CSUM_INLINE static inline __attribute__((always_inline))
#endif

/* sum + the two 16-bit halves of v (no carry is lost while fewer than 2^15 words are added). */
IG_CSUM_INLINE __u32 ig_csum_add32(__u32 sum, __u32 v)
{
	return sum + (v & 0xffff) + (v >> 16);
}

/* The checksum field for a sum: folded to 16 bits, complemented. */
IG_CSUM_INLINE __u16 ig_csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

#if !defined(__bpf__) && !defined(__BPF__)
/* sum + the len bytes at data as big-endian 16-bit words (an odd last byte is padded with a
 * zero byte). Any length: four bytes a step into a 64-bit accumulator, folded back to 16 bits
 * (the one's-complement value kept), so the caller may add a few more terms before
 * ig_csum_fold. Host only: the BPF program sums fixed headers with ig_csum_add32. */
IG_CSUM_INLINE __u32 ig_csum_partial(const __u8 *data, size_t len, __u32 sum)
{
	__u64 s = sum;

	while (len >= 4) {
		s += (__u32)data[0] << 24 | (__u32)data[1] << 16 | (__u32)data[2] << 8 | data[3];
		data += 4;
		len -= 4;
	}
	if (len >= 2) {
		s += (__u32)data[0] << 8 | data[1];
		data += 2;
		len -= 2;
	}
	if (len == 1)
		s += (__u32)data[0] << 8;
	while (s >> 32)
		s = (s & 0xffffffffu) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u32)s;
}
#endif

#endif /* INFERGATE_COMMON_CHECKSUM_H */
