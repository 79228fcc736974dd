/* SPDX-License-Identifier: Apache-2.0 */
/* TCP SYN cookies, one layout for both sides: the XDP program answers SYNs with them when
 * userspace's backlog is under pressure (or always), and infergate's TCP stack uses the same
 * function for every ISN it chooses, validates the ACK that completes a cookie handshake and
 * builds the connection straight into ESTABLISHED from what the cookie encodes. C, so that
 * ingress.bpf.c includes it as it is; no state, no allocation.
 *
 * Layout of the server ISN (our own, not the kernel's: see docs/TCP.md, "SYN cookies"):
 *
 *    31                       9   8   7   6   5      2  1   0
 *   +--------------------------+-----+---+---+--------+------+
 *   |   SipHash-2-4, 23 bits   | gen | T | S | wscale | mss  |
 *   +--------------------------+-----+---+---+--------+------+
 *
 *   mss     index into ig_cookie_mss[] (the largest entry <= the client's MSS)
 *   wscale  the client's window scale 0..14; 15: the client offered none
 *   S       the client offered SACK;   T: the client offered timestamps
 *   gen     which of the two live keys signed it (keys rotate; the previous stays valid)
 *   hash    SipHash-2-4 keyed with key[gen] over (addresses, ports, the client's ISN,
 *           family, bits 0..8), so every encoded bit is authenticated.
 *
 * The client's ACK (or first data segment) carries seq = client ISN + 1 and ack = cookie + 1:
 * everything needed to rebuild the connection. A forgery must guess 23 bits per attempt.
 */
#ifndef INFERGATE_DATAPLANE_TCP_SYNCOOKIE_H
#define INFERGATE_DATAPLANE_TCP_SYNCOOKIE_H

#include <linux/types.h>

#include "common/siphash.h"

#define IG_COOKIE_MSS_N 4
#define IG_COOKIE_WSCALE_NONE 15
#define IG_COOKIE_DATA_BITS 9 /* mss, wscale, S, T, gen */

/* The two live keys. gen is the generation of the current key (its parity is the key index);
 * cookies signed with the previous generation's key are still accepted. */
struct ig_cookie_keys {
	struct ig_sipkey key[2];
	__u32 gen;
	__u32 pad;
};

/* What the handshake negotiates, as the cookie carries it. */
struct ig_cookie_opts {
	__u16 mss;    /* decoded: an entry of ig_cookie_mss[] */
	__s8 wscale;  /* -1: none */
	__u8 sack;
	__u8 ts;
	__u8 pad[3];
};

static const __u16 ig_cookie_mss[IG_COOKIE_MSS_N] = {536, 1220, 1400, 1460};

#if defined(__bpf__) || defined(__BPF__)
#define IG_COOKIE_INLINE static __always_inline
#else
#define IG_COOKIE_INLINE static inline __attribute__((always_inline))
#endif

/* The 4-tuple as the client sent it (network byte order, like struct ig_flow_key): IPv4 uses
 * saddr[0]/daddr[0] only. */
IG_COOKIE_INLINE __u32 ig_cookie_hash(const struct ig_sipkey *k, const __u32 *saddr,
				      const __u32 *daddr, __u16 sport, __u16 dport, int v6,
				      __u32 client_isn, __u32 data)
{
	__u64 w[6];
	__u64 ports = (__u64)sport | ((__u64)dport << 16) | ((__u64)client_isn << 32);
	__u64 tail = (__u64)data | ((__u64)(v6 ? 6 : 4) << 16);
	if (!v6) {
		w[0] = (__u64)saddr[0] | ((__u64)daddr[0] << 32);
		w[1] = ports;
		w[2] = tail;
		return (__u32)ig_siphash(k, w, 3);
	}
	w[0] = (__u64)saddr[0] | ((__u64)daddr[0] << 32);
	w[1] = (__u64)saddr[1] | ((__u64)daddr[1] << 32);
	w[2] = (__u64)saddr[2] | ((__u64)daddr[2] << 32);
	w[3] = (__u64)saddr[3] | ((__u64)daddr[3] << 32);
	w[4] = ports;
	w[5] = tail;
	return (__u32)ig_siphash(k, w, 6);
}

/* The option bits (0..7) for what the client offered. wscale < 0: none. */
IG_COOKIE_INLINE __u32 ig_cookie_encode_opts(__u32 client_mss, int wscale, int sack, int ts)
{
	__u32 idx = 0, i;
	for (i = 1; i < IG_COOKIE_MSS_N; i++)
		if (client_mss >= ig_cookie_mss[i])
			idx = i;
	if (wscale < 0)
		wscale = IG_COOKIE_WSCALE_NONE;
	else if (wscale > 14)
		wscale = 14;
	return idx | ((__u32)wscale << 2) | (sack ? 0x40u : 0) | (ts ? 0x80u : 0);
}

/* The cookie (our ISN) for a SYN. opts: ig_cookie_encode_opts(). */
IG_COOKIE_INLINE __u32 ig_cookie_make(const struct ig_cookie_keys *keys, const __u32 *saddr,
				      const __u32 *daddr, __u16 sport, __u16 dport, int v6,
				      __u32 client_isn, __u32 opts)
{
	__u32 gen = keys->gen & 1;
	__u32 data = (opts & 0xff) | (gen << 8);
	__u32 h = ig_cookie_hash(&keys->key[gen], saddr, daddr, sport, dport, v6, client_isn,
				 data);
	return (h << IG_COOKIE_DATA_BITS) | data;
}

/* Checks a cookie (the segment's ack - 1) against the client's ISN (its seq - 1). Returns 1
 * and fills *out when it was made by one of the live keys; 0 otherwise. */
IG_COOKIE_INLINE int ig_cookie_check(const struct ig_cookie_keys *keys, const __u32 *saddr,
				     const __u32 *daddr, __u16 sport, __u16 dport, int v6,
				     __u32 client_isn, __u32 cookie, struct ig_cookie_opts *out)
{
	__u32 data = cookie & ((1u << IG_COOKIE_DATA_BITS) - 1);
	__u32 gen = (data >> 8) & 1;
	__u32 ws = (data >> 2) & 0xf;
	__u32 h = ig_cookie_hash(&keys->key[gen], saddr, daddr, sport, dport, v6, client_isn,
				 data);
	if ((h << IG_COOKIE_DATA_BITS) != (cookie & ~((1u << IG_COOKIE_DATA_BITS) - 1)))
		return 0;
	out->mss = ig_cookie_mss[data & 3];
	out->wscale = ws == IG_COOKIE_WSCALE_NONE ? -1 : (__s8)(ws > 14 ? 14 : ws);
	out->sack = (data >> 6) & 1;
	out->ts = (data >> 7) & 1;
	return 1;
}

#endif /* INFERGATE_DATAPLANE_TCP_SYNCOOKIE_H */
