/* SPDX-License-Identifier: Apache-2.0 */
/* SipHash-2-4 (Aumasson & Bernstein) over whole 64-bit words, written once for both sides:
 * the XDP program (C, -target bpf) and host C++ (the TCP stack's ISNs, cookies and connection
 * table, the XDP control plane). Keyed with 128 bits from getrandom() (common/secret.h on the
 * host); an attacker who does not know the key can neither predict outputs (ISNs, cookies)
 * nor choose inputs that collide (hash tables).
 *
 * Input: n little-endian 64-bit words; the length byte of the final block is 8 * n, so
 * ig_siphash(k, w, n) equals the reference SipHash-2-4 of the 8n bytes of w on a
 * little-endian machine (tests/unit/common/siphash_test.cc checks the reference vectors).
 * n must be a compile-time constant at BPF call sites (the loop is unrolled).
 */
#ifndef INFERGATE_COMMON_SIPHASH_H
#define INFERGATE_COMMON_SIPHASH_H

#include <linux/types.h>

#if defined(__bpf__) || defined(__BPF__)
#define IG_SIP_INLINE static __always_inline
#define IG_SIP_UNROLL _Pragma("unroll")
#else
#define IG_SIP_INLINE static inline __attribute__((always_inline))
#define IG_SIP_UNROLL
#endif

struct ig_sipkey {
	__u64 k0;
	__u64 k1;
};

#define IG_SIP_ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define IG_SIP_ROUND(v0, v1, v2, v3)                                                 \
	do {                                                                          \
		v0 += v1;                                                             \
		v1 = IG_SIP_ROTL(v1, 13);                                             \
		v1 ^= v0;                                                             \
		v0 = IG_SIP_ROTL(v0, 32);                                             \
		v2 += v3;                                                             \
		v3 = IG_SIP_ROTL(v3, 16);                                             \
		v3 ^= v2;                                                             \
		v0 += v3;                                                             \
		v3 = IG_SIP_ROTL(v3, 21);                                             \
		v3 ^= v0;                                                             \
		v2 += v1;                                                             \
		v1 = IG_SIP_ROTL(v1, 17);                                             \
		v1 ^= v2;                                                             \
		v2 = IG_SIP_ROTL(v2, 32);                                             \
	} while (0)

/* SipHash-c-d over n 64-bit words: c compression rounds per word, d finalisation rounds. c and
 * d are constants at every call site (the rounds unroll). */
IG_SIP_INLINE __u64 ig_siphash_cd(const struct ig_sipkey *key, const __u64 *w, __u32 n,
				  const __u32 c, const __u32 d)
{
	__u64 v0 = 0x736f6d6570736575ULL ^ key->k0;
	__u64 v1 = 0x646f72616e646f6dULL ^ key->k1;
	__u64 v2 = 0x6c7967656e657261ULL ^ key->k0;
	__u64 v3 = 0x7465646279746573ULL ^ key->k1;
	__u64 b = (__u64)(8 * n) << 56;
	__u32 i, r;

IG_SIP_UNROLL
	for (i = 0; i < n; i++) {
		v3 ^= w[i];
IG_SIP_UNROLL
		for (r = 0; r < c; r++)
			IG_SIP_ROUND(v0, v1, v2, v3);
		v0 ^= w[i];
	}
	v3 ^= b;
IG_SIP_UNROLL
	for (r = 0; r < c; r++)
		IG_SIP_ROUND(v0, v1, v2, v3);
	v0 ^= b;
	v2 ^= 0xff;
IG_SIP_UNROLL
	for (r = 0; r < d; r++)
		IG_SIP_ROUND(v0, v1, v2, v3);
	return v0 ^ v1 ^ v2 ^ v3;
}

/* SipHash-2-4: for outputs an attacker sees (ISNs, cookies). */
IG_SIP_INLINE __u64 ig_siphash(const struct ig_sipkey *key, const __u64 *w, __u32 n)
{
	return ig_siphash_cd(key, w, n, 2, 4);
}

/* SipHash-1-3 (what Python and Rust hash tables use), about half the cost: for hash tables
 * (the XDP flow table), where the key only has to stop chosen collisions. */
IG_SIP_INLINE __u64 ig_siphash13(const struct ig_sipkey *key, const __u64 *w, __u32 n)
{
	return ig_siphash_cd(key, w, n, 1, 3);
}

#endif /* INFERGATE_COMMON_SIPHASH_H */
